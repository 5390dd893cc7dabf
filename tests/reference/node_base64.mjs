// What node's Buffer.from(s, "base64") makes of strings, for tests/reference/node_base64.py.
// Usage: node node_base64.mjs STRINGS.json  ->  stdout: the hex of each decoding, in order (a JSON array)
import fs from "node:fs";

const strings = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
process.stdout.write(JSON.stringify(strings.map((s) => Buffer.from(s, "base64").toString("hex"))));
