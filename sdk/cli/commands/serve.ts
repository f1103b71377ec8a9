// `moelens serve`: the OpenAI-compatible HTTP server (docs/server.md). Runs until SIGINT or SIGTERM.
import { DEFAULT_MAX_REQUEST_BYTES, serve } from "../../serve/server";
import { UsageError } from "../errors";
import { integerAtLeast, integerIn, numberFlag, parseFlags, positiveNumber } from "../flags";
import { loadModel } from "../load-model";
import { modelFlags } from "../options";

const FLAGS = {
  model: { type: "string" },
  backend: { type: "string" },
  emulator: { type: "boolean" },
  threads: { type: "string" },
  precision: { type: "string" },
  host: { type: "string" },
  port: { type: "string" },
  "api-key": { type: "string" },
  "model-id": { type: "string" },
  "max-queue": { type: "string" },
  "max-request-bytes": { type: "string" },
  "prefix-cache": { type: "string" },
  "prefix-cache-mib": { type: "string" },
  help: { type: "boolean", short: "h" },
} as const;

export function serveHelpText(): string {
  return `moelens serve: an OpenAI-compatible HTTP server (docs/server.md)

Usage:
  moelens serve [--model DIR] [--host 127.0.0.1] [--port 8000] [--api-key KEY] [--max-queue N]

Endpoints: GET /health, GET /v1/models, POST /v1/chat/completions, POST /v1/completions
(streaming with "stream": true). One generation runs at a time; others wait in the queue.

Options:
  --model <dir>              checkpoint folder (default: the embedded model)
  --backend <name>           compute backend (default: cpu)
  --emulator                 with --backend metal off macOS: run on the CPU emulator of the kernels
  --threads <n>              CPU threads (default: all cores)
  --precision <p>            fp32 (default: exact), int24 (within the parity tests, faster decode),
                             int16 or int8 (faster, reduced precision; docs/performance.md)
  --host <address>           interface to listen on (default 127.0.0.1: this machine only)
  --port <n>                 port (default 8000; 0 picks a free one)
  --api-key <key>            require "Authorization: Bearer <key>" on /v1/* (default: the
                             MOELENS_API_KEY environment variable; unset: no key)
  --model-id <id>            the model name clients send (default: the folder's name)
  --max-queue <n>            requests that may wait while one generates (default 64); more get 503
  --max-request-bytes <n>    largest request body in bytes (default ${DEFAULT_MAX_REQUEST_BYTES}, 8 MiB); a larger
                             one gets a 413, found while the body streams in
  --prefix-cache <n>         sessions kept for prompts that continue earlier ones (default 8; 0: off)
  --prefix-cache-mib <n>     memory those sessions may take, in MiB (default 2048)
  -h, --help                 this help

One line per request goes to stderr: method, path, status, tokens, decode speed, duration.
`;
}

export async function serveCommand(args: string[]): Promise<number> {
  const v = parseFlags(args, FLAGS, false).values;
  if (v.help) {
    process.stdout.write(serveHelpText());
    return 0;
  }
  const options = {
    host: v.host,
    port: numberFlag("--port", v.port, integerIn(0, 65535)),
    apiKey: v["api-key"] ?? (process.env.MOELENS_API_KEY || undefined),
    modelId: v["model-id"],
    maxQueue: numberFlag("--max-queue", v["max-queue"], integerAtLeast(0)),
    maxRequestBytes: numberFlag("--max-request-bytes", v["max-request-bytes"], integerAtLeast(1)),
    prefixCache: {
      entries: numberFlag("--prefix-cache", v["prefix-cache"], integerAtLeast(0)),
      bytes: mebibytes("--prefix-cache-mib", v["prefix-cache-mib"]),
    },
  };
  if (options.modelId === "") throw new UsageError("--model-id '': must not be empty");
  const model = await loadModel(modelFlags(v));
  if (!model.tokenizer) process.stderr.write(`moelens serve: ${model.dir} has no tokenizer.json; the completion endpoints will answer 400\n`);
  let server;
  try {
    server = await serve(model, options);
  } catch (e) {
    const err = e as NodeJS.ErrnoException;
    if (err.code === "EADDRINUSE" || err.code === "EACCES" || err.code === "EADDRNOTAVAIL") {
      throw new UsageError(`cannot listen on ${options.host ?? "127.0.0.1"}:${options.port ?? 8000}: ${err.code}`);
    }
    throw e;
  }
  process.stderr.write(`moelens serve: ${server.modelId} at ${server.url}/v1 (Ctrl+C stops)\n`);
  await new Promise<void>((resolve) => {
    const stop = () => {
      process.off("SIGINT", stop);
      process.off("SIGTERM", stop);
      resolve();
    };
    process.on("SIGINT", stop);
    process.on("SIGTERM", stop);
  });
  await server.close();
  model.tokenizer?.close();
  process.stderr.write("moelens serve: stopped\n");
  return 0;
}

function mebibytes(flag: string, text: string | undefined): number | undefined {
  const value = numberFlag(flag, text, positiveNumber);
  return value === undefined ? undefined : Math.floor(value * 2 ** 20);
}
