// Runs the settld reference's own HTTP API in process (createApi over its in-memory store, no socket) and POSTs
// one client-finalized job event per case on top of a corpus stream prefix, for tests/reference/api_xcheck.py.
// Usage: node api_xcheck.mjs SETTLD_DIR IN.json OUT.json
// IN.json: {now, serverKeypair: {publicKeyPem, privateKeyPem}, signers: [{role, keyId, publicKeyPem}],
//           streams: {name: corpus file (its `events` are read)}, cases: [{stream, prefix, extra?, event | draft}]}
//   `prefix`: how many of the stream's events are put directly into the store as the job's events, followed by
//   `extra` (events already chained on them, stored as they are);
//   `event`: the candidate envelope, already chained on that prefix and signed; or `draft`: a server draft
//   `{type, actor, payload}`, posted with the stream head as the expected previous chain hash.
// OUT.json: [{status, error, code, message, payload}] per case (`message`: the error's details.message, when there
// is one; `payload`: the stored event's payload when a draft was accepted).
// Setup per case: the job's events and its reduced snapshot (store.jobEvents / store.jobs, as the store's own
// JOB_EVENTS_APPENDED does); every robot and operator the prefix or the candidate names is registered, active,
// in the job's zone, available at any time, on an open shift, with the corpus key of its role; the corpus robot
// and operator keys are registered signer keys of the tenant. Nothing else (other jobs, closed months, quotas).
import fs from "node:fs";
import path from "node:path";
import { Readable } from "node:stream";
import { pathToFileURL } from "node:url";

process.env.LOG_LEVEL = "error";
process.env.PROXY_EVIDENCE_STORE = "memory";

const [referenceDir, inFile, outFile] = process.argv.slice(2);
const load = (rel) => import(pathToFileURL(path.join(referenceDir, "src", ...rel.split("/"))).href);
const { createApi } = await load("api/app.js");
const { createStore } = await load("api/store.js");
const { reduceJob } = await load("core/job-reducer.js");
const { normalizeZoneId } = await load("core/zones.js");

const input = JSON.parse(fs.readFileSync(inFile, "utf8"));
const TOKEN = "api-xcheck";
const store = createStore({ serverSignerKeypair: input.serverKeypair });
const api = createApi({ store, now: () => input.now, opsToken: TOKEN });

const keyByRole = new Map(input.signers.map((s) => [s.role, s]));
for (const s of input.signers) store.publicKeyByKeyId.set(s.keyId, s.publicKeyPem);

const ALWAYS = [{ startAt: "1970-01-01T00:00:00.000Z", endAt: "2999-12-31T23:59:59.999Z" }];

function namedEntities(events) {
  const robots = new Set();
  const operators = new Set();
  const add = (set, id) => {
    if (typeof id === "string" && id.trim() !== "") set.add(id);
  };
  for (const e of events) {
    if (!e || typeof e !== "object") continue;
    if (e.actor?.type === "robot") add(robots, e.actor.id);
    if (e.actor?.type === "operator") add(operators, e.actor.id);
    const p = e.payload;
    if (p && typeof p === "object") {
      add(robots, p.robotId);
      add(operators, p.operatorId);
    }
  }
  return { robots, operators };
}

function setUp(tenantId, jobId, prefix, candidate) {
  const key = `${tenantId}\n${jobId}`;
  store.jobEvents.clear();
  store.jobs.clear();
  store.robots.clear();
  store.operators.clear();
  store.signerKeys.clear();
  store.idempotency.clear();
  store.outbox.length = 0;
  store.outboxCursor = 0;
  store.jobEvents.set(key, prefix.slice());
  const job = reduceJob(prefix);
  if (job) store.jobs.set(key, { ...job, tenantId: job.tenantId ?? tenantId });
  const jobTenant = job?.tenantId ?? tenantId;
  const zone = normalizeZoneId(job?.booking?.zoneId ?? job?.constraints?.zoneId);
  for (const role of ["robot", "operator", "server"]) {
    const s = keyByRole.get(role);
    if (!s) continue;
    for (const t of new Set([tenantId, jobTenant])) {
      store.signerKeys.set(`${t}\n${s.keyId}`, {
        tenantId: t, keyId: s.keyId, publicKeyPem: s.publicKeyPem, purpose: role, status: "active",
      });
    }
  }
  const { robots, operators } = namedEntities([...prefix, candidate]);
  for (const t of new Set([tenantId, jobTenant])) {
    for (const id of robots) {
      store.robots.set(`${t}\n${id}`, {
        id, tenantId: t, status: "active", signerKeyId: keyByRole.get("robot")?.keyId ?? null,
        homeZoneId: zone, currentZoneId: zone, availability: ALWAYS,
      });
    }
    for (const id of operators) {
      store.operators.set(`${t}\n${id}`, {
        id, tenantId: t, signerKeyId: keyByRole.get("operator")?.keyId ?? null,
        shift: { status: "open", zoneId: zone, maxConcurrentJobs: 1000 },
      });
    }
  }
}

async function post(jobId, bodyText, extraHeaders = {}) {
  const req = Readable.from([Buffer.from(bodyText, "utf8")]);
  req.method = "POST";
  req.url = `/jobs/${encodeURIComponent(jobId)}/events`;
  req.headers = {
    "content-type": "application/json", "x-proxy-ops-token": TOKEN, "x-proxy-tenant-id": "tenant_default",
    ...extraHeaders,
  };
  const headers = new Map();
  const res = {
    statusCode: 200,
    setHeader(name, value) {
      headers.set(String(name).toLowerCase(), String(value));
    },
    end(payload) {
      this.body = payload ?? "";
    },
  };
  await api.handle(req, res);
  const text = typeof res.body === "string" ? res.body : Buffer.from(res.body ?? "").toString("utf8");
  return { status: res.statusCode, body: text ? JSON.parse(text) : null };
}

const streamEvents = new Map();
for (const [name, doc] of Object.entries(input.streams)) streamEvents.set(name, doc.events);

const results = [];
for (const c of input.cases) {
  const events = streamEvents.get(c.stream);
  const prefix = [...events.slice(0, c.prefix), ...(c.extra ?? [])];
  const jobId = events[0].streamId;
  try {
    const candidate = c.draft ?? c.event;
    setUp("tenant_default", jobId, prefix, candidate);
    const head = prefix.length ? prefix[prefix.length - 1].chainHash : "null";
    const { status, body } = c.draft
      ? await post(jobId, JSON.stringify(c.draft), { "x-proxy-expected-prev-chain-hash": head })
      : await post(jobId, JSON.stringify(c.event));
    if (status === 201) {
      results.push({ status, error: null, code: null, message: null, payload: c.draft ? body?.event?.payload ?? null : null });
    } else {
      const details = body?.details;
      const message = details && typeof details === "object" && typeof details.message === "string" ? details.message
        : typeof details === "string" ? details : null;
      results.push({ status, error: body?.error ?? null, code: body?.code ?? null, message });
    }
  } catch (err) {
    results.push({ status: -1, error: "harness error", code: null, message: String(err?.stack ?? err) });
  }
}
fs.writeFileSync(outFile, JSON.stringify(results));
