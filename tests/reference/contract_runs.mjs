// Runs job streams whose job pins an operator contract document through the settld reference: its reducer and
// posting rules, its allocations (allocateEntry against the job after each entry's event, with the document the
// job's operatorContractHash names, as its outbox does) and its artifact worker (the document served by
// getContractV2ByHash), for tests/reference/contract_runs.py.
// Usage: node contract_runs.mjs SETTLD_DIR RUNS.json GENERATED_AT OUT.json
// RUNS.json: [{events, contracts: {contractHash: document}}]
// OUT.json: [{entries, errors, allocations, allocationErrors, outbox, artifacts, reduceError, artifactError,
// hashMismatches}]; hashMismatches: the documents the reference stores whose hash is not the one they are served by
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

import { settldArtifacts } from "./settld_artifacts.mjs";

const [referenceDir, runsFile, generatedAt, outFile] = process.argv.slice(2);
const load = (rel) => import(pathToFileURL(path.join(referenceDir, "src", ...rel.split("/"))).href);
const { reduceJob } = await load("core/job-reducer.js");
const { ledgerEntriesForJobEvent } = await load("core/ledger-postings.js");
const { allocateEntry } = await load("core/allocations.js");
const worker = await load("api/workers/artifacts.js");
const { hashContractDocumentV1 } = await load("core/contract-document.js");

const tenantId = "tenant_default";

// The outbox's lookup: the first stored contract whose hash, as a string, is the job's pin.
function contractFor(job, contracts) {
  if (!job?.operatorContractHash) return null;
  for (const [hash, doc] of Object.entries(contracts)) {
    if (String(hash) === String(job.operatorContractHash)) return doc ?? null;
  }
  return null;
}

function ledger(events, contracts) {
  const out = { entries: [], errors: [], allocations: [], allocationErrors: [], reduceError: null };
  for (let i = 0; i < events.length; i += 1) {
    let jobBefore;
    let jobAfter;
    try {
      jobBefore = reduceJob(events.slice(0, i));
      jobAfter = reduceJob(events.slice(0, i + 1));
    } catch (err) {
      out.reduceError = { index: i, message: String(err?.message ?? err) };
      break;
    }
    if (!jobBefore) continue;
    let entries;
    try {
      entries = ledgerEntriesForJobEvent({ jobBefore, event: events[i], eventsBefore: events.slice(0, i) });
    } catch (err) {
      out.errors.push({ eventId: events[i].id, eventType: events[i].type, message: String(err?.message ?? err) });
      continue;
    }
    for (const entry of entries) {
      out.entries.push({ eventId: events[i].id, eventType: events[i].type, entry });
      try {
        const job = { ...jobAfter, tenantId: jobAfter.tenantId ?? tenantId };
        const operatorContractDoc = contractFor(job, contracts);
        out.allocations.push(...allocateEntry({ tenantId, entry, job, operatorContractDoc, currency: "USD" }));
      } catch (err) {
        out.allocationErrors.push({ entryId: entry?.id ?? null, message: String(err?.message ?? err) });
      }
    }
  }
  return out;
}

// The documents settld's validator accepts, with its hash where that is not the key the run serves them by.
function hashMismatches(contracts) {
  const out = [];
  for (const [hash, doc] of Object.entries(contracts)) {
    let settlds;
    try {
      settlds = hashContractDocumentV1(doc);
    } catch {
      continue;
    }
    if (settlds !== hash) out.push({ hash, settlds });
  }
  return out;
}

const results = [];
for (const { events, contracts } of JSON.parse(fs.readFileSync(runsFile, "utf8"))) {
  const result = { ...ledger(events, contracts), hashMismatches: hashMismatches(contracts) };
  try {
    Object.assign(result, await settldArtifacts(worker, { tenantId, events, generatedAt, contracts }),
      { artifactError: null });
  } catch (err) {
    Object.assign(result, { outbox: null, artifacts: null, artifactError: String(err?.message ?? err) });
  }
  results.push(result);
}
fs.writeFileSync(outFile, JSON.stringify(results));
