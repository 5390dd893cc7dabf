// settld's own payload validators (src/core/*.js), called the way its API's append route calls them for a job
// event type: `const validate = await loadValidators(SETTLD_DIR); validate(type, payload)` -> {ok, message}
// (`payload` undefined: the request sent none; ok null: the type has no validator).
import path from "node:path";
import { pathToFileURL } from "node:url";

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

export async function loadValidators(referenceDir) {
  const core = async (name) => import(pathToFileURL(path.join(referenceDir, "src", "core", `${name}.js`)).href);
  const modules = Object.fromEntries(
    await Promise.all([...new Set(Object.values(ROUTE).map(([name]) => name))].map(async (name) => [name, await core(name)])),
  );
  return (type, sent) => {
    const route = ROUTE[type];
    if (!route) return { ok: null, message: "no validator" };
    const [mod, fn, nullAsEmpty] = route;
    const payload = sent ?? null; // the route reads `event.payload ?? null`
    try {
      const arg = nullAsEmpty ? (payload ?? {}) : payload;
      if (fn === "validateAccessResultPayload") modules[mod][fn](arg, { name: type });
      else modules[mod][fn](arg);
      return { ok: true, message: null };
    } catch (err) {
      return { ok: false, message: String(err?.message ?? err) };
    }
  };
}
