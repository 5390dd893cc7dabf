// settld's own offline answers for job streams, for tests/reference/offline_parity.py: its chain verification
// (verifyChainedEvents with the streams' keys), its reducer and ledger posting rules event by event (as
// ledger_xcheck.mjs), the job its reducer makes of the whole stream, and its artifact worker's outbox and artifacts.
// Usage: node offline_parity.mjs SETTLD_DIR CASES.json GENERATED_AT OUT.json
//   CASES.json: [{events, keys: {keyId: publicKeyPem}}]
//   OUT.json: [{verify: {ok, error}, entries, errors, reduceError, job, jobError, outbox, artifacts, artifactError}]
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

import { settldArtifacts } from "./settld_artifacts.mjs";

const [referenceDir, casesFile, generatedAt, outFile] = process.argv.slice(2);
const load = (...parts) => import(pathToFileURL(path.join(referenceDir, "src", ...parts)).href);
const { reduceJob } = await load("core", "job-reducer.js");
const { ledgerEntriesForJobEvent } = await load("core", "ledger-postings.js");
const { verifyChainedEvents } = await load("core", "event-chain.js");
const worker = await load("api", "workers", "artifacts.js");

const message = (err) => String(err?.message ?? err);
const results = [];
for (const { events, keys } of JSON.parse(fs.readFileSync(casesFile, "utf8"))) {
  const out = {};
  try {
    out.verify = verifyChainedEvents(events, { publicKeyByKeyId: new Map(Object.entries(keys)) });
  } catch (err) {
    out.verify = { ok: false, error: `threw: ${message(err)}` };
  }
  out.entries = [];
  out.errors = [];
  out.reduceError = null;
  for (let i = 0; i < events.length && out.reduceError === null; i += 1) {
    let jobBefore;
    try {
      jobBefore = reduceJob(events.slice(0, i));
      reduceJob(events.slice(0, i + 1));
    } catch (err) {
      out.reduceError = { index: i, message: message(err) };
      break;
    }
    if (!jobBefore) continue;
    try {
      for (const entry of ledgerEntriesForJobEvent({ jobBefore, event: events[i], eventsBefore: events.slice(0, i) })) {
        out.entries.push({ eventId: events[i].id, eventType: events[i].type, entry });
      }
    } catch (err) {
      out.errors.push({ eventId: events[i].id, eventType: events[i].type, message: message(err) });
    }
  }
  try {
    out.job = reduceJob(events);
    out.jobError = null;
  } catch (err) {
    out.job = null;
    out.jobError = message(err);
  }
  try {
    const { outbox, artifacts } = await settldArtifacts(worker, { tenantId: "tenant_default", events, generatedAt });
    Object.assign(out, { outbox, artifacts, artifactError: null });
  } catch (err) {
    Object.assign(out, { outbox: null, artifacts: null, artifactError: message(err) });
  }
  results.push(out);
}
fs.writeFileSync(outFile, JSON.stringify(results));
