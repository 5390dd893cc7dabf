// settld's own artifact worker over one job stream: its outbox derivation and builders, over an in-memory store.
// Shared by artifacts_xcheck.mjs and contract_runs.mjs.

// Runs `worker` (settld's src/api/workers/artifacts.js) over `events`; `contracts` ({contractHash: document})
// answers the worker's contract lookups (none: no contract is stored). Returns {outbox, artifacts}.
export async function settldArtifacts(worker, { tenantId, events, generatedAt, contracts = {} }) {
  const jobId = events[0].streamId;
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
    getContractV2ByHash: async ({ contractHash }) => {
      const doc = Object.prototype.hasOwnProperty.call(contracts, contractHash) ? contracts[contractHash] : undefined;
      return doc === undefined ? null : { contractHash, doc };
    },
  };
  const run = worker.createArtifactWorker({
    store, nowIso: () => generatedAt, getJobEvents: () => events, listDestinationsForTenant: () => [],
  });
  await run.tickArtifacts({ maxMessages: 1000000 });
  return { outbox, artifacts: built };
}
