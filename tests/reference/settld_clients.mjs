// settld's own clients against a live settlekit: settld's API SDK (packages/api-sdk) creates, books and settles
// jobs, settld's executor SDK (packages/executor-sdk) appends the robot's signed events through its disk spool,
// both imported from a settld checkout, pointed at settlekit by their base URL alone.
//
//   node settld_clients.mjs SETTLD_DIR ORIGIN API_KEY TENANT WORK_DIR SERVER_KEYS.json
//
// ORIGIN is the server's origin: the API SDK resolves its paths against the origin (the server runs with
// settld_compat_at_root); the executor SDK appends to ORIGIN/compat/settld. The robot's public key is registered
// on settlekit's own API (POST /v1/keys): settld's robot registration is not served. Prints a JSON summary
// ({jobs: [{jobId, status, events}], signers: {keyId: pem}}) and exits 1 naming the first check that failed.

import assert from "node:assert/strict";
import fs from "node:fs/promises";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [settldDir, origin, apiKey, tenantId, workDir, serverKeysFile] = process.argv.slice(2);
const serverKeys = JSON.parse(await fs.readFile(serverKeysFile, "utf8")); // keyId -> PEM of the server's key
const load = (p) => import(pathToFileURL(path.join(settldDir, p)).href);
const { SettldClient } = await load("packages/api-sdk/src/index.js");
const { createExecutorSdk } = await load("packages/executor-sdk/src/index.js");
const { verifyChainedEvents } = await load("packages/executor-sdk/src/event-chain.js");
const { createEd25519Keypair, keyIdFromPublicKeyPem } = await load("src/core/crypto.js");
const { reduceJob } = await load("src/core/job-reducer.js");

const executorBase = `${origin}/compat/settld`;
const robot = { type: "robot", id: "rob_7" };
const backOffice = { type: "system", id: "backoffice" };
const iso = (ms) => new Date(ms).toISOString();

// the back office's client, as a settld deployment's back office runs it
const api = new SettldClient({ baseUrl: origin, tenantId, apiKey });

// the robot's key, registered on settlekit's own API
const { publicKeyPem, privateKeyPem } = createEd25519Keypair();
const keyId = keyIdFromPublicKeyPem(publicKeyPem);
{
  const r = await fetch(`${origin}/v1/keys`, {
    method: "POST",
    headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
    body: JSON.stringify({ publicKeyPem, purpose: "robot" })
  });
  const text = await r.text();
  assert.equal(r.status, 201, text);
  assert.equal(JSON.parse(text).keyId, keyId, "settlekit names the key as settld does");
}
const signer = { keyId, privateKeyPem };

// fetch as the robot's network gives it: `drop` "before" a POST leaves (the request never arrives) or "after" it
// (the server committed, the answer is lost), once
function network(drop = null) {
  let armed = drop;
  return async (url, init = {}) => {
    const posting = (init.method ?? "GET") === "POST";
    if (posting && armed === "before") {
      armed = null;
      throw new Error("network down");
    }
    const res = await fetch(url, init);
    if (posting && armed === "after") {
      armed = null;
      await res.text();
      throw new Error("connection reset after the server answered");
    }
    return res;
  };
}

function executor(spoolDir, fetchImpl = network()) {
  return createExecutorSdk({
    baseUrl: executorBase,
    tenantId,
    principalId: "robot:rob_7",
    signer,
    apiKey,
    spoolDir,
    fetch: fetchImpl,
    backoffBaseMs: 1,
    backoffMaxMs: 2
  });
}

async function spoolIsEmpty(spoolDir) {
  for (const state of ["queued", "inflight", "failed"]) {
    const left = await fs.readdir(path.join(spoolDir, state)).catch(() => []);
    assert.deepEqual(left, [], `spool ${state} holds ${left.join(", ")}`);
  }
}

async function backOfficeBooks(n) {
  const created = await api.createJob(
    { templateId: "reset_lite", customerId: "cust_1", siteId: "site_1", constraints: { zoneId: "zone_a" } },
    { idempotencyKey: `create-${n}-${Date.now()}` }
  );
  assert.equal(created.status, 201);
  assert.ok(created.requestId, "x-request-id is answered");
  let job = created.body.job;
  assert.equal(job.status, "CREATED");
  const now = Date.now();
  const start = iso(now - 3_600_000);
  const end = iso(now + 8 * 3_600_000);
  const steps = [
    ["QUOTE_PROPOSED", { amountCents: 6500, currency: "USD", breakdown: { coverageFeeCents: 0, totalCents: 6500 } }],
    ["BOOKED", {
      startAt: start, endAt: end, environmentTier: "ENV_MANAGED_BUILDING", requiresOperatorCoverage: false,
      zoneId: "zone_a", customerId: "cust_1", siteId: "site_1",
      sla: { slaVersion: 1, mustStartWithinWindow: true, maxStallMs: 300000, maxExecutionMs: 28800000 },
      contractId: "contract_default", contractVersion: 1
    }],
    ["MATCHED", { robotId: robot.id }],
    ["RESERVED", { robotId: robot.id, startAt: start, endAt: end, reservationId: `rsv_${job.id}` }],
    ["ACCESS_PLAN_ISSUED", {
      jobId: job.id, accessPlanId: "ap_1", method: "BUILDING_CONCIERGE", credentialRef: "vault://ap_1",
      scope: { areas: ["lobby"], noGo: [] }, validFrom: start, validTo: end, revocable: true, requestedBy: "system"
    }]
  ];
  for (const [type, payload] of steps) {
    const r = await api.appendJobEvent(job.id, { type, actor: backOffice, payload }, {
      expectedPrevChainHash: job.lastChainHash,
      idempotencyKey: `${job.id}:${type}`
    });
    assert.equal(r.status, 201);
    assert.equal(r.body.event.type, type);
    assert.equal(r.body.job.lastChainHash, r.body.event.chainHash);
    job = r.body.job;
  }
  assert.equal(job.status, "RESERVED");
  return job;
}

function heartbeat(jobId, progress) {
  const t = new Date().toISOString();
  return [jobId, "JOB_HEARTBEAT", robot, { jobId, robotId: robot.id, t, stage: "TASK", progress }, { at: t }];
}

// the robot's side: every event signed by the executor SDK and sent through its spool; `faults` adds a lost
// answer (the spool's idempotency key replays it) and a send that never left while the head moved on (the spool
// rebases after settld's 409 "event append conflict")
async function robotWorks(jobId, spoolDir, { faults }) {
  const append = async (sdk, [streamId, type, actor, payload, opts = {}]) => {
    const r = await sdk.appendEvent(streamId, type, actor, payload, opts);
    assert.equal(r.status, "queued");
    return r;
  };
  if (faults) {
    await append(executor(spoolDir, network("after")), [jobId, "EN_ROUTE", robot, { etaSeconds: 600 }]);
    const replayed = await executor(spoolDir).flushSpool();
    assert.deepEqual(replayed.processed.map((p) => p.status), ["delivered"]);
  } else {
    await append(executor(spoolDir), [jobId, "EN_ROUTE", robot, { etaSeconds: 600 }]);
  }
  const sdk = executor(spoolDir);
  await append(sdk, [jobId, "ACCESS_GRANTED", robot, { jobId, accessPlanId: "ap_1", method: "BUILDING_CONCIERGE" }]);
  await append(sdk, [jobId, "EXECUTION_STARTED", robot, { stage: "TASK" }]);
  if (faults) {
    // finalized on the current head, never sent; another of the robot's processes appends meanwhile
    await append(executor(spoolDir, network("before")), heartbeat(jobId, 25));
    const direct = createExecutorSdk({ baseUrl: executorBase, tenantId, signer, apiKey });
    const sent = await direct.appendEvent(...heartbeat(jobId, 50));
    assert.equal(sent.status, "accepted");
    const stale = await executor(spoolDir).flushSpool({ allowReorder: false });
    assert.match(stale.processed[0].error, /^409 event append conflict$/);
    const rebased = await executor(spoolDir).flushSpool({ allowReorder: true });
    assert.deepEqual(rebased.processed.map((p) => p.status), ["delivered"]);
  }
  await append(sdk, heartbeat(jobId, 75));
  await append(sdk, [jobId, "EXECUTION_COMPLETED", robot, { report: { tasksCompleted: 1 } }]);
  await spoolIsEmpty(spoolDir);
}

const jobs = [];
for (let n = 0; n < 3; n += 1) {
  const booked = await backOfficeBooks(n);
  const spoolDir = path.join(workDir, `spool_${n}`);
  await robotWorks(booked.id, spoolDir, { faults: n === 0 });
  let job = (await api.getJob(booked.id)).body.job;
  assert.equal(job.status, "COMPLETED");
  if (n < 2) {
    // settlement in settld's server mode: the executor SDK's own drafts (job 0), the API SDK's (job 1)
    if (n === 0) {
      const office = createExecutorSdk({ baseUrl: executorBase, tenantId, signer, apiKey });
      const r = await office.appendEvent(booked.id, "SETTLED", backOffice, null, { mode: "server" });
      assert.equal(r.status, "accepted");
      assert.ok(r.response.ledgerEntryIds.length > 0);
      job = r.response.job;
    } else {
      const r = await api.appendJobEvent(booked.id, { type: "SETTLED", actor: backOffice, payload: null },
        { expectedPrevChainHash: job.lastChainHash });
      assert.equal(r.status, 201);
      assert.equal(r.body.ledgerEntryId, `jnl_${r.body.event.id}`);
      job = r.body.job;
    }
    assert.equal(job.status, "SETTLED");
  }
  const events = (await api.request("GET", `/jobs/${encodeURIComponent(booked.id)}/events`)).body.events;
  // settld's own reducer gives the job the server answers, and settld's own chain check accepts the stream
  const fetched = (await api.getJob(booked.id)).body.job;
  assert.deepEqual(fetched, JSON.parse(JSON.stringify(reduceJob(events))), "GET /jobs/{id} is settld's reduceJob");
  const robotEvents = events.filter((e) => e.actor.type === "robot");
  assert.equal(robotEvents.length, n === 0 ? 7 : 5);
  assert.ok(robotEvents.every((e) => e.signerKeyId === keyId && e.signature));
  const publicKeyByKeyId = new Map([[keyId, publicKeyPem], ...Object.entries(serverKeys)]);
  assert.deepEqual(verifyChainedEvents(events, { publicKeyByKeyId }), { ok: true });
  jobs.push({ jobId: booked.id, status: fetched.status, events });
}

// a refusal in settld's shape reaches the API SDK's error
await assert.rejects(api.getJob("job_missing"), (err) => {
  assert.deepEqual([err.settld.status, err.settld.code, err.message], [404, "NOT_FOUND", "job not found"]);
  return true;
});

process.stdout.write(JSON.stringify({ jobs, signers: { [keyId]: publicKeyPem } }));
