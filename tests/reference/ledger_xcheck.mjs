// Runs the settld reference's own reducer and ledger posting rules over streams, for tests/contract/test_reference_xcheck.py.
// Usage: node ledger_xcheck.mjs SETTLD_DIR STREAMS.json  ->  stdout: [{entries, errors, reduceError}] per stream
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [referenceDir, streamsFile] = process.argv.slice(2);
const core = (name) => import(pathToFileURL(path.join(referenceDir, "src", "core", name)).href);
const { reduceJob } = await core("job-reducer.js");
const { ledgerEntriesForJobEvent } = await core("ledger-postings.js");

const results = [];
for (const events of JSON.parse(fs.readFileSync(streamsFile, "utf8"))) {
  const entries = [];
  const errors = [];
  let reduceError = null;
  for (let i = 0; i < events.length && reduceError === null; i += 1) {
    const eventsBefore = events.slice(0, i);
    let jobBefore;
    try {
      jobBefore = reduceJob(eventsBefore);
      reduceJob(events.slice(0, i + 1));
    } catch (err) {
      reduceError = { index: i, message: String(err?.message ?? err) };
      break;
    }
    if (!jobBefore) continue;
    try {
      for (const entry of ledgerEntriesForJobEvent({ jobBefore, event: events[i], eventsBefore })) {
        entries.push({ eventId: events[i].id, eventType: events[i].type, entry });
      }
    } catch (err) {
      errors.push({ eventId: events[i].id, eventType: events[i].type, message: String(err?.message ?? err) });
    }
  }
  results.push({ entries, errors, reduceError });
}
process.stdout.write(JSON.stringify(results));
