// Regenerates the expectations of tests/vectors/js_date/date_parse.json:
//   node tests/reference/js_date_parse.mjs IN.json OUT.json
// (IN.json may be the vendored file itself: its strings are read, its expectations ignored.)
// IN.json is a JSON array of strings (or of [string, anything] pairs); OUT.json gets [string, Date.parse(string)]
// pairs, with null for NaN. Date.parse reads strings without a zone as local time: the zone is forced to UTC.
process.env.TZ = "UTC";
import { readFileSync, writeFileSync } from "node:fs";

if (new Date(2000, 0, 1).getTimezoneOffset() !== 0) throw new Error("run with TZ=UTC");
const [inPath, outPath] = process.argv.slice(2);
if (!inPath || !outPath) throw new Error("usage: node js_date_parse.mjs IN.json OUT.json");
const items = JSON.parse(readFileSync(inPath, "utf8")).map((x) => (Array.isArray(x) ? x[0] : x));
const pairs = items.map((s) => {
  const ms = Date.parse(s);
  return [s, Number.isNaN(ms) ? null : ms];
});
writeFileSync(outPath, "[\n" + pairs.map((p) => JSON.stringify(p)).join(",\n") + "\n]\n");
