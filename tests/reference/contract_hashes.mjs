// Hashes contract documents as the settld reference does, for tests/reference/contract_hashes.py: its
// ContractDocument.v1 validator and hash, its SplitPlan.v1 validator and hash (of the document's connect.splitPlan)
// and its ContractPolicyTemplate.v1 compiler (the template and its policyHash), each with the error it throws.
// Usage: node contract_hashes.mjs SETTLD_DIR DOCUMENTS.json OUT.json
// DOCUMENTS.json: [document]; OUT.json: [{document: {ok, message, contractHash}, splitPlan: null | {ok, message,
// splitPlanHash}, template: {ok, message, policyHash, policyTemplate}}], one per document.
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [referenceDir, documentsFile, outFile] = process.argv.slice(2);
const load = (rel) => import(pathToFileURL(path.join(referenceDir, "src", ...rel.split("/"))).href);
const { validateContractDocumentV1, hashContractDocumentV1, validateSplitPlanV1, hashSplitPlanV1 } =
  await load("core/contract-document.js");
const { compileContractPolicyTemplate } = await load("core/contract-compiler.js");

function attempt(fn) {
  try {
    return { ok: true, message: null, value: fn() };
  } catch (err) {
    return { ok: false, message: String(err?.message ?? err), value: null };
  }
}

const results = [];
for (const doc of JSON.parse(fs.readFileSync(documentsFile, "utf8"))) {
  const valid = attempt(() => validateContractDocumentV1(doc));
  const hashed = valid.ok ? attempt(() => hashContractDocumentV1(doc)) : valid;
  const document = { ok: hashed.ok, message: hashed.message, contractHash: hashed.value };

  const plan = doc?.connect?.splitPlan;
  let splitPlan = null;
  if (plan !== undefined && plan !== null) {
    const planValid = attempt(() => validateSplitPlanV1(plan));
    const planHashed = planValid.ok ? attempt(() => hashSplitPlanV1(plan)) : planValid;
    splitPlan = { ok: planHashed.ok, message: planHashed.message, splitPlanHash: planHashed.value };
  }

  const compiled = attempt(() => compileContractPolicyTemplate({ contractDoc: doc }));
  const template = {
    ok: compiled.ok,
    message: compiled.message,
    policyHash: compiled.value?.policyHash ?? null,
    policyTemplate: compiled.value?.policyTemplate ?? null,
  };
  results.push({ document, splitPlan, template });
}
fs.writeFileSync(outFile, JSON.stringify(results));
