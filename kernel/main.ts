#!/usr/bin/env node
// Entry point of the kernel process (the kernelspec runs `node main.js {connection_file}`).
import { kernelCommand } from "./cli";

void kernelCommand(process.argv.slice(2)).then((status) => process.exit(status));
