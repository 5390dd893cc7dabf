// Regenerates node_order.json: node node_order.js STRINGS.json > node_order.json
// STRINGS.json: a JSON array of strings (any order). Output: the strings in `localeCompare` order, and the sign of
// each adjacent comparison (0 marks a tie).
const fs = require("fs");
const xs = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
xs.sort((a, b) => a.localeCompare(b));
const cmp = [];
for (let i = 0; i + 1 < xs.length; i++) cmp.push(Math.sign(xs[i].localeCompare(xs[i + 1])));
const esc = (s) => JSON.stringify(s).replace(/[\u007f-\uffff]/g, (c) => "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0"));
const lines = xs.map((s) => "    " + esc(s));
process.stdout.write(
  '{\n  "producedBy": "node ' + process.versions.node + ', ICU ' + process.versions.icu + ': xs.sort((a, b) => a.localeCompare(b))",\n' +
  '  "adjacentSigns": ' + JSON.stringify(cmp) + ',\n  "sorted": [\n' + lines.join(",\n") + "\n  ]\n}\n"
);
