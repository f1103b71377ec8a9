// The `moelens` command (bin/moelens.js calls main).
import { chatCommand } from "./commands/chat";
import { generateCommand } from "./commands/generate";
import { infoCommand } from "./commands/info";
import { kernelCommand } from "./commands/kernel";
import { serveCommand } from "./commands/serve";
import { traceCommand } from "./commands/trace";
import { UsageError } from "./errors";
import { helpText } from "./help";
import { parseOptions } from "./options";

const COMMANDS = {
  generate: generateCommand,
  chat: chatCommand,
  info: infoCommand,
} as const;

/** Runs the command line; resolves to the exit status. */
export async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  try {
    if (command === "kernel") return await kernelCommand(rest);
    if (command === "serve") return await serveCommand(rest); // its own flags (--port, --api-key...)
    if (command === "trace") return await traceCommand(rest); // its own flags (--prompts, --out...)
    if (command === undefined || command === "help" || command === "-h" || command === "--help") {
      process.stdout.write(helpText());
      return command === undefined ? 2 : 0;
    }
    if (!(command in COMMANDS)) throw new UsageError(`unknown command '${command}'`);
    const options = parseOptions(rest);
    if (options.help) {
      process.stdout.write(helpText());
      return 0;
    }
    return await COMMANDS[command as keyof typeof COMMANDS](options);
  } catch (e) {
    const usage = e instanceof UsageError;
    process.stderr.write(`moelens: ${(e as Error).message}\n${usage ? "Run `moelens --help` for the options.\n" : ""}`);
    return usage ? 2 : 1;
  }
}
