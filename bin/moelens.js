#!/usr/bin/env node
// The `moelens` command: the compiled CLI in dist/ (built by `npm install`, or `npm run build:ts`).
"use strict";
const path = require("node:path");

let cli;
try {
  cli = require(path.join(__dirname, "..", "dist", "sdk", "cli", "main.js"));
} catch (e) {
  if (e.code !== "MODULE_NOT_FOUND") throw e;
  process.stderr.write(`moelens: the CLI is not built (${e.message.split("\n")[0]}); run \`npm run build:ts\`\n`);
  process.exit(1);
}
cli.main(process.argv.slice(2)).then((status) => {
  // exitCode, not exit(): let stdout drain when it is a pipe.
  process.exitCode = status;
});
