// Reads request bodies as settld's API does (src/api/http.js readJsonBody: the bytes as UTF-8, trimmed, JSON.parse)
// and as its offline readers read a file (the bytes as UTF-8, JSON.parse), for tests/reference/spelling_xcheck.py.
// Usage: node spelling_xcheck.mjs SETTLD_DIR CASES.json OUT.json
// CASES.json: [base64 body]; OUT.json per case: {body, file}, each {parsed: false} or {parsed: true, value (the
// value written with JavaScript's key order and number spelling, -0 and Infinity as such), canonical (its canonical
// JSON) or canonicalError, and for an object with a string `type`: payloadHash (or null) and validator {ok, message}}.
import crypto from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

import { loadValidators } from "./settld_validators.mjs";

const [referenceDir, casesFile, outFile] = process.argv.slice(2);
const { canonicalJsonStringify } = await import(pathToFileURL(path.join(referenceDir, "src", "core", "canonical-json.js")).href);
const validate = await loadValidators(referenceDir);

function written(v) {
  if (typeof v === "number") return Object.is(v, -0) ? "-0" : String(v);
  if (v === null || typeof v !== "object") return JSON.stringify(v);
  if (Array.isArray(v)) return `[${v.map(written).join(",")}]`;
  return `{${Object.keys(v).map((k) => `${JSON.stringify(k)}:${written(v[k])}`).join(",")}}`;
}

function judged(text) {
  let value;
  try {
    value = JSON.parse(text);
  } catch {
    return { parsed: false };
  }
  const out = { parsed: true, value: written(value) };
  try {
    out.canonical = canonicalJsonStringify(value);
  } catch (err) {
    out.canonicalError = String(err?.message ?? err);
  }
  if (value && typeof value === "object" && !Array.isArray(value) && typeof value.type === "string") {
    try {
      out.payloadHash = crypto.createHash("sha256").update(canonicalJsonStringify(value.payload ?? null)).digest("hex");
    } catch {
      out.payloadHash = null;
    }
    out.validator = validate(value.type, value.payload);
  }
  return out;
}

const results = JSON.parse(fs.readFileSync(casesFile, "utf8")).map((b64) => {
  const text = Buffer.from(b64, "base64").toString("utf8");
  const body = text.trim();
  return { body: body ? judged(body) : { parsed: true, value: "null", empty: true }, file: judged(text) };
});
fs.writeFileSync(outFile, JSON.stringify(results));
