// Runs the settld reference's own payload validators (src/core/*.js) the way its API's append route calls them
// for a job event type, over payload cases, for the api_payloads differential.
// Usage: node api_validators.mjs SETTLD_DIR CASES.json OUT.json
// CASES.json: [{type, payload}] (a case without "payload" sends none); OUT.json: [{ok, message}] per case.
import fs from "node:fs";

import { loadValidators } from "./settld_validators.mjs";

const [referenceDir, casesFile, outFile] = process.argv.slice(2);
const validate = await loadValidators(referenceDir);
const results = JSON.parse(fs.readFileSync(casesFile, "utf8")).map((c) => validate(c.type, c.payload));
fs.writeFileSync(outFile, JSON.stringify(results));
