// Appends whole job streams, one event at a time, through the settld reference's own HTTP API (createApi over its
// in-memory store, no socket) and reports where it first refuses one, for tests/reference/import_xcheck.py.
// Usage: node import_xcheck.mjs SETTLD_DIR IN.json OUT.json
// IN.json: {now, serverKeypair: {publicKeyPem, privateKeyPem}, signers: [{role, keyId, publicKeyPem}],
//           streams: [{events}]}
//   Each stream's first event is put in the store as the job's first event (settld's POST /jobs made it); every
//   other one is POSTed to /jobs/:id/events as it is written in the file, in order, until one is refused.
// OUT.json: per stream, null (every event accepted) or {index, status, error, code, message}.
// Setup per stream, as tests/reference/api_xcheck.mjs: every robot and operator the stream names is registered,
// active, in the job's zone, available at any time, on an open shift, with the key of its role; the three keys are
// registered signer keys of the tenant (and of the job's tenant). Nothing else (other jobs, closed months, quotas).
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
const TOKEN = "import-xcheck";
const TENANT = "tenant_default";
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

function setUp(jobId, first, events) {
  const key = `${TENANT}\n${jobId}`;
  for (const map of [store.jobEvents, store.jobs, store.robots, store.operators, store.signerKeys, store.idempotency]) {
    map.clear();
  }
  store.outbox.length = 0;
  store.outboxCursor = 0;
  store.jobEvents.set(key, [first]);
  const job = reduceJob([first]);
  if (job) store.jobs.set(key, { ...job, tenantId: job.tenantId ?? TENANT });
  const tenants = new Set([TENANT, typeof job?.tenantId === "string" ? job.tenantId : TENANT]);
  const zone = normalizeZoneId(job?.booking?.zoneId ?? job?.constraints?.zoneId);
  for (const role of ["robot", "operator", "server"]) {
    const s = keyByRole.get(role);
    for (const t of tenants) {
      store.signerKeys.set(`${t}\n${s.keyId}`, {
        tenantId: t, keyId: s.keyId, publicKeyPem: s.publicKeyPem, purpose: role, status: "active",
      });
    }
  }
  const { robots, operators } = namedEntities(events);
  for (const t of tenants) {
    for (const id of robots) {
      store.robots.set(`${t}\n${id}`, {
        id, tenantId: t, status: "active", signerKeyId: keyByRole.get("robot").keyId,
        homeZoneId: zone, currentZoneId: zone, availability: ALWAYS,
      });
    }
    for (const id of operators) {
      store.operators.set(`${t}\n${id}`, {
        id, tenantId: t, signerKeyId: keyByRole.get("operator").keyId,
        shift: { status: "open", zoneId: zone, maxConcurrentJobs: 1000 },
      });
    }
  }
}

async function post(jobId, bodyText) {
  const req = Readable.from([Buffer.from(bodyText, "utf8")]);
  req.method = "POST";
  req.url = `/jobs/${encodeURIComponent(jobId)}/events`;
  req.headers = { "content-type": "application/json", "x-proxy-ops-token": TOKEN, "x-proxy-tenant-id": TENANT };
  const res = {
    statusCode: 200,
    setHeader() {},
    end(payload) {
      this.body = payload ?? "";
    },
  };
  await api.handle(req, res);
  const text = typeof res.body === "string" ? res.body : Buffer.from(res.body ?? "").toString("utf8");
  return { status: res.statusCode, body: text ? JSON.parse(text) : null };
}

const results = [];
for (const { events } of input.streams) {
  const jobId = events[0].streamId;
  let refusal = null;
  try {
    setUp(jobId, events[0], events);
    for (let i = 1; i < events.length; i += 1) {
      const { status, body } = await post(jobId, JSON.stringify(events[i]));
      if (status === 201) continue;
      const details = body?.details;
      const message = details && typeof details === "object" && typeof details.message === "string" ? details.message
        : typeof details === "string" ? details : null;
      refusal = { index: i, status, error: body?.error ?? null, code: body?.code ?? null, message };
      break;
    }
  } catch (err) {
    refusal = { index: -1, status: -1, error: "harness error", code: null, message: String(err?.stack ?? err) };
  }
  results.push(refusal);
}
fs.writeFileSync(outFile, JSON.stringify(results));
