// Runs the settld reference's own artifact worker (its outbox derivation and builders, over an in-memory store)
// over streams, for tests/contract/test_reference_xcheck.py.
// Usage: node artifacts_xcheck.mjs SETTLD_DIR STREAMS.json GENERATED_AT OUT.json
// OUT.json: [{outbox, artifacts, error}] per stream (the worker logs to stdout, so the answer goes to a file)
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [referenceDir, streamsFile, generatedAt, outFile] = process.argv.slice(2);
const worker = await import(pathToFileURL(path.join(referenceDir, "src", "api", "workers", "artifacts.js")).href);

const results = [];
for (const events of JSON.parse(fs.readFileSync(streamsFile, "utf8"))) {
  const tenantId = "tenant_default";
  const jobId = events[0].streamId;
  try {
    const outbox = worker.deriveArtifactEnqueuesFromJobEvents({ tenantId, jobId, events });
    const stored = new Map();
    const built = [];
    const store = {
      outbox: outbox.map((message) => ({ ...message })),
      artifactCursor: 0,
      config: {},
      getArtifact: async ({ artifactId }) => stored.get(artifactId) ?? null,
      putArtifact: async ({ artifact }) => {
        stored.set(artifact.artifactId, artifact);
        built.push(artifact);
      },
      createDelivery: async () => {},
    };
    const run = worker.createArtifactWorker({
      store, nowIso: () => generatedAt, getJobEvents: () => events, listDestinationsForTenant: () => [],
    });
    await run.tickArtifacts({ maxMessages: 1000000 });
    results.push({ outbox, artifacts: built, error: null });
  } catch (err) {
    results.push({ outbox: null, artifacts: null, error: String(err?.message ?? err) });
  }
}
fs.writeFileSync(outFile, JSON.stringify(results));
