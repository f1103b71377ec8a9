#!/usr/bin/env node
// `npm test`: runs the vitest suite and prints the closing line CI reads ("N passed, N failed").
import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";

const report = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "moelens-test-")), "vitest.json");
const args = ["vitest", "run", "--reporter=default", "--reporter=json", `--outputFile.json=${report}`, ...process.argv.slice(2)];
const run = spawnSync("npx", args, { stdio: "inherit" });

let passed = 0;
let failed = 0;
let skipped = 0;
if (fs.existsSync(report)) {
  const r = JSON.parse(fs.readFileSync(report, "utf8"));
  passed = r.numPassedTests;
  skipped = r.numPendingTests + r.numTodoTests;
  // A suite that fails to load has no failed tests of its own: count it.
  failed = r.numFailedTests + (r.testResults ?? []).filter((t) => t.status === "failed" && t.assertionResults.length === 0).length;
} else {
  failed = 1;
}
console.log(`${passed} passed, ${failed} failed${skipped ? `, ${skipped} skipped` : ""}`);
process.exit(run.status === 0 && failed === 0 ? 0 : 1);
