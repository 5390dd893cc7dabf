// Runs the settld reference's own payload validators (src/core/*.js) the way its API's append route calls them
// for a job event type, over payload cases, for the api_payloads differential.
// Usage: node api_validators.mjs SETTLD_DIR CASES.json OUT.json
// CASES.json: [{type, payload}] (a case without "payload" sends none); OUT.json: [{ok, message}] per case.
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [referenceDir, casesFile, outFile] = process.argv.slice(2);
const core = async (name) => import(pathToFileURL(path.join(referenceDir, "src", "core", `${name}.js`)).href);

const m = Object.fromEntries(
  await Promise.all(
    ["access", "assist", "booking", "cancellation", "claims", "dispatch-events", "evidence", "incidents", "liveness",
      "operator-cost", "operator-coverage", "proof-events", "rescheduling", "risk", "skills", "sla-events",
      "zone-coverage"].map(async (name) => [name, await core(name)]),
  ),
);

// type -> [module, function, does the route pass `payload ?? {}` (true) or the payload as sent (false)]
const ROUTE = {
  ACCESS_PLAN_ISSUED: ["access", "validateAccessPlanIssuedPayload", false],
  ACCESS_GRANTED: ["access", "validateAccessResultPayload", false],
  ACCESS_DENIED: ["access", "validateAccessResultPayload", false],
  ACCESS_REVOKED: ["access", "validateAccessRevokedPayload", false],
  ACCESS_EXPIRED: ["access", "validateAccessRevokedPayload", false],
  BOOKED: ["booking", "validateBookedPayload", true],
  ZONE_COVERAGE_REPORTED: ["zone-coverage", "validateZoneCoverageReportedPayload", true],
  PROOF_EVALUATED: ["proof-events", "validateProofEvaluatedPayload", true],
  RISK_SCORED: ["risk", "validateRiskScoredPayload", true],
  DISPATCH_REQUESTED: ["dispatch-events", "validateDispatchRequestedPayload", true],
  DISPATCH_EVALUATED: ["dispatch-events", "validateDispatchEvaluatedPayload", true],
  DISPATCH_CONFIRMED: ["dispatch-events", "validateDispatchConfirmedPayload", true],
  DISPATCH_FAILED: ["dispatch-events", "validateDispatchFailedPayload", true],
  RESERVED: ["booking", "validateReservedPayload", true],
  OPERATOR_COVERAGE_RESERVED: ["operator-coverage", "validateOperatorCoverageReservedPayload", true],
  OPERATOR_COVERAGE_RELEASED: ["operator-coverage", "validateOperatorCoverageReleasedPayload", true],
  SKILL_LICENSED: ["skills", "validateSkillLicensedPayload", false],
  SKILL_USED: ["skills", "validateSkillUsedPayload", false],
  JOB_RESCHEDULED: ["rescheduling", "validateJobRescheduledPayload", true],
  JOB_CANCELLED: ["cancellation", "validateJobCancelledPayload", true],
  INCIDENT_REPORTED: ["incidents", "validateIncidentReportedPayload", false],
  INCIDENT_DETECTED: ["incidents", "validateIncidentDetectedPayload", false],
  EVIDENCE_CAPTURED: ["evidence", "validateEvidenceCapturedPayload", false],
  EVIDENCE_VIEWED: ["evidence", "validateEvidenceViewedPayload", false],
  EVIDENCE_EXPIRED: ["evidence", "validateEvidenceExpiredPayload", false],
  CLAIM_OPENED: ["claims", "validateClaimOpenedPayload", false],
  CLAIM_TRIAGED: ["claims", "validateClaimTriagedPayload", false],
  CLAIM_APPROVED: ["claims", "validateClaimApprovedPayload", false],
  CLAIM_DENIED: ["claims", "validateClaimDeniedPayload", false],
  JOB_ADJUSTED: ["claims", "validateJobAdjustedPayload", false],
  CLAIM_PAID: ["claims", "validateClaimPaidPayload", false],
  JOB_EXECUTION_STARTED: ["liveness", "validateJobExecutionStartedPayload", true],
  JOB_HEARTBEAT: ["liveness", "validateJobHeartbeatPayload", true],
  JOB_EXECUTION_STALLED: ["liveness", "validateJobExecutionStalledPayload", true],
  JOB_EXECUTION_RESUMED: ["liveness", "validateJobExecutionResumedPayload", true],
  JOB_EXECUTION_ABORTED: ["liveness", "validateJobExecutionAbortedPayload", true],
  JOB_EXECUTION_COMPLETED: ["liveness", "validateJobExecutionCompletedPayload", true],
  ASSIST_REQUESTED: ["assist", "validateAssistRequestedPayload", true],
  ASSIST_QUEUED: ["assist", "validateAssistQueuedPayload", true],
  ASSIST_ASSIGNED: ["assist", "validateAssistAssignedPayload", true],
  ASSIST_ACCEPTED: ["assist", "validateAssistAcceptedPayload", true],
  ASSIST_DECLINED: ["assist", "validateAssistDeclinedPayload", true],
  ASSIST_TIMEOUT: ["assist", "validateAssistTimeoutPayload", true],
  OPERATOR_COST_RECORDED: ["operator-cost", "validateOperatorCostRecordedPayload", true],
  SLA_BREACH_DETECTED: ["sla-events", "validateSlaBreachDetectedPayload", true],
  SLA_CREDIT_ISSUED: ["sla-events", "validateSlaCreditIssuedPayload", true],
};

const results = [];
for (const c of JSON.parse(fs.readFileSync(casesFile, "utf8"))) {
  const route = ROUTE[c.type];
  if (!route) {
    results.push({ ok: null, message: "no validator" });
    continue;
  }
  const [mod, fn, nullAsEmpty] = route;
  const payload = c.payload ?? null; // the route reads `event.payload ?? null`
  try {
    const arg = nullAsEmpty ? (payload ?? {}) : payload;
    if (fn === "validateAccessResultPayload") m[mod][fn](arg, { name: c.type });
    else m[mod][fn](arg);
    results.push({ ok: true, message: null });
  } catch (err) {
    results.push({ ok: false, message: String(err?.message ?? err) });
  }
}
fs.writeFileSync(outFile, JSON.stringify(results));
