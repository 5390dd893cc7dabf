// Runs the settld reference's own artifact worker (its outbox derivation and builders, over an in-memory store)
// over streams, for tests/contract/test_reference_xcheck.py.
// Usage: node artifacts_xcheck.mjs SETTLD_DIR STREAMS.json GENERATED_AT OUT.json
// OUT.json: [{outbox, artifacts, error}] per stream (the worker logs to stdout, so the answer goes to a file)
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

import { settldArtifacts } from "./settld_artifacts.mjs";

const [referenceDir, streamsFile, generatedAt, outFile] = process.argv.slice(2);
const worker = await import(pathToFileURL(path.join(referenceDir, "src", "api", "workers", "artifacts.js")).href);

const results = [];
for (const events of JSON.parse(fs.readFileSync(streamsFile, "utf8"))) {
  const tenantId = "tenant_default";
  try {
    const { outbox, artifacts } = await settldArtifacts(worker, { tenantId, events, generatedAt });
    results.push({ outbox, artifacts, error: null });
  } catch (err) {
    results.push({ outbox: null, artifacts: null, error: String(err?.message ?? err) });
  }
}
fs.writeFileSync(outFile, JSON.stringify(results));
