#!/usr/bin/env node
// Builds the native addon (build/native/Release/moelens.node) with cmake-js: `npm install` and
// `npm run build:native` run it. The CUDA backend is built on request, where nvcc exists:
//   MOELENS_CUDA=1 npm install        (or: npm install --moelens-cuda)
// MOELENS_CUDA=0 turns it off again; unset, a rebuild keeps what the build folder was configured with.
// CUDAARCHS picks the GPU architectures (CMake's variable; default 90, Hopper). Arguments after the
// script's name go to cmake-js (e.g. `npm run build:native -- --debug`).
import { spawnSync } from "node:child_process";
import { createRequire } from "node:module";
import * as path from "node:path";
import { fileURLToPath } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");

// "on", "off", or undefined when neither MOELENS_CUDA nor npm's --moelens-cuda says.
function cudaSwitch() {
  const sources = [
    ["MOELENS_CUDA", process.env.MOELENS_CUDA],
    ["npm's --moelens-cuda", process.env.npm_config_moelens_cuda],
  ];
  for (const [name, raw] of sources) {
    if (raw === undefined || raw === "") continue;
    const value = raw.trim().toLowerCase();
    if (["1", "on", "true", "yes"].includes(value)) return "on";
    if (["0", "off", "false", "no"].includes(value)) return "off";
    console.error(`moelens: ${name}=${raw} is not a switch (use 1 to build the CUDA backend, 0 not to)`);
    process.exit(2);
  }
  return undefined;
}

const cuda = cudaSwitch();
if (cuda === "on") {
  const nvcc = process.env.CUDACXX || "nvcc";
  if (spawnSync(nvcc, ["--version"], { stdio: "ignore" }).status !== 0) {
    console.error(`moelens: the CUDA backend was asked for (MOELENS_CUDA) but ${nvcc} does not run: put CUDA's bin folder ` +
      "on PATH (e.g. /usr/local/cuda/bin) or set CUDACXX to nvcc's path");
    process.exit(2);
  }
}

const args = ["compile", "--directory", "native", "--out", "build/native", "--CDMOELENS_TOOLS=ON"];
if (cuda) args.push(`--CDMOELENS_CUDA=${cuda === "on" ? "ON" : "OFF"}`);
args.push(...process.argv.slice(2));

const cmakeJs = createRequire(path.join(root, "package.json")).resolve("cmake-js/bin/cmake-js");
const run = spawnSync(process.execPath, [cmakeJs, ...args], { cwd: root, stdio: "inherit" });
process.exit(run.status ?? 1);
