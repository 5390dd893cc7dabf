// node reference_outputs.mjs SETTLD_CHECKOUT streams.json > shapes.json
// For each stream: settld's reduced job and four pure artifact bodies built at the last event (artifactId "art").
import fs from "fs";
import path from "path";
import { pathToFileURL } from "url";

const root = process.argv[2];
const { reduceJob } = await import(pathToFileURL(path.join(root, "src/core/job-reducer.js")));
const A = await import(pathToFileURL(path.join(root, "src/core/artifacts.js")));
const builders = {
  "WorkCertificate.v1": A.buildWorkCertificateV1,
  "ProofReceipt.v1": A.buildProofReceiptV1,
  "IncidentPacket.v1": A.buildIncidentPacketV1,
  "CoverageCertificate.v1": A.buildCoverageCertificateV1,
};
const streams = JSON.parse(fs.readFileSync(process.argv[3], "utf8"));
const out = streams.map((s) => {
  const job = reduceJob(s.events);
  const artifacts = {};
  for (const [type, build] of Object.entries(builders)) {
    artifacts[type] = build({ tenantId: s.tenantId, job, events: s.events, artifactId: "art", generatedAt: "2026-02-01T00:00:00.000Z" });
  }
  return { ...s, job, artifacts };
});
process.stdout.write(JSON.stringify({ producedBy: `settld 0.1.0 core, node ${process.versions.node}`, streams: out }));
