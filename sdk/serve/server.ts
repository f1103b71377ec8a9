// The OpenAI-compatible HTTP server on node:http: routes, the API key, OpenAI-shaped errors, one log
// line per request. No request can stop it: every failure becomes an error response (or, once a
// stream has started, an error event) and the server keeps serving.
import { createHash, timingSafeEqual } from "node:crypto";
import * as http from "node:http";
import type { AddressInfo, Socket } from "node:net";
import * as path from "node:path";
import type { Model } from "../model";
import { ApiError } from "./api-error";
import { sendJson } from "./completion-handler";
import { Engine, type GenerationOutcome } from "./engine";
import type { PrefixCacheLimits } from "./prefix-cache";
import { PromptWorkers } from "./prompt-workers";
import { isLingering, lingerAfterTooLarge } from "./request-body";
import { formatRequestLine } from "./request-log";
import { buildRoutes, resolveRoute } from "./routes";

export interface ServeOptions {
  /** Interface to listen on (default 127.0.0.1: this machine only). */
  host?: string;
  /** Port (default 8000; 0 picks a free one). */
  port?: number;
  /** When set, /v1/* needs `Authorization: Bearer <apiKey>`. */
  apiKey?: string;
  /** Requests that may wait while one generates (default 64); the next gets a 503. */
  maxQueue?: number;
  /** Largest request body in bytes (default 8 MiB); a larger one gets a 413, found while the body streams in. */
  maxRequestBytes?: number;
  /** Prefix cache bounds (default 8 sessions, 2 GiB of state; entries: 0 turns it off). */
  prefixCache?: Partial<PrefixCacheLimits>;
  /** The id clients pass as `model` (default: the model folder's name). */
  modelId?: string;
  /** Receives one line per request (default: stderr). */
  log?: (line: string) => void;
}

export interface MoelensServer {
  /** http://host:port */
  readonly url: string;
  readonly port: number;
  readonly modelId: string;
  /** The queue and prefix cache, for monitoring. */
  readonly engine: Engine;
  /** Stops listening, ends open connections (aborting their generations) and waits for them. */
  close(): Promise<void>;
}

export const DEFAULT_MAX_REQUEST_BYTES = 8 * 2 ** 20;

/** Starts serving `model`; resolves once the server listens. */
export async function serve(model: Model, options: ServeOptions = {}): Promise<MoelensServer> {
  const modelId = options.modelId ?? path.basename(model.dir);
  const maxRequestBytes = options.maxRequestBytes ?? DEFAULT_MAX_REQUEST_BYTES;
  if (!Number.isInteger(maxRequestBytes) || maxRequestBytes < 1) throw new RangeError(`serve: maxRequestBytes must be a positive integer, got ${maxRequestBytes}`);
  const log = options.log ?? ((line: string) => process.stderr.write(line + "\n"));
  const engine = new Engine(model, {
    maxQueue: options.maxQueue ?? 64,
    prefixCache: { entries: options.prefixCache?.entries ?? 8, bytes: options.prefixCache?.bytes ?? 2 * 2 ** 30 },
  });
  // Prompts are rendered and tokenized in worker processes, so long ones never block other clients.
  const prompts = model.tokenizer ? await PromptWorkers.start(model.tokenizer.dir) : undefined;
  const routes = buildRoutes({ model, modelId, engine, prompts, maxRequestBytes, started: Math.floor(Date.now() / 1000) });
  const keyDigest = options.apiKey === undefined ? undefined : digest(options.apiKey);
  const inFlight = new Set<Promise<void>>();

  const handle = async (req: http.IncomingMessage, res: http.ServerResponse): Promise<void> => {
    const start = performance.now();
    const method = req.method ?? "GET";
    const urlPath = (req.url ?? "/").split("?")[0];
    let generation: GenerationOutcome | undefined;
    let error: ApiError | undefined;
    try {
      const { route, params } = resolveRoute(routes, method, urlPath);
      if (route.authenticated && keyDigest) authenticate(req, keyDigest);
      generation = (await route.handler(req, res, params)) ?? undefined;
    } catch (e) {
      error = ApiError.from(e);
      if (!res.headersSent && !res.destroyed) {
        sendJson(res, error.status, error.body, error.headers);
        if (error.status === 413) lingerAfterTooLarge(req);
      }
    }
    const clientClosed = !res.writableEnded;
    const status = res.headersSent ? res.statusCode : 499; // nginx's "client closed request"
    log(formatRequestLine({ method, path: urlPath, status, ms: performance.now() - start, clientClosed, generation, error: error?.message }));
  };

  const server = http.createServer((req, res) => {
    // A client that resets the connection makes the request stream emit 'error'; a body reader sees
    // it through its iterator, and with no listener at all it would be an uncaught exception.
    req.on("error", () => undefined);
    const done = handle(req, res)
      .catch((e) => log(`moelens serve: unexpected failure: ${(e as Error).stack ?? e}`))
      .finally(() => inFlight.delete(done));
    inFlight.add(done);
  });
  // Requests Node cannot even parse: answer like the others, then drop the connection.
  server.on("clientError", (err: NodeJS.ErrnoException, socket) => {
    // A client that stops in the middle of a refused body has had its answer (the 413).
    if (!socket.writable || isLingering(socket as Socket)) return socket.destroy();
    const body = JSON.stringify(new ApiError(400, `malformed HTTP request: ${err.code ?? err.message}`, "invalid_request_error", "bad_http").body);
    socket.end(`HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`);
  });

  const host = options.host ?? "127.0.0.1";
  await new Promise<void>((resolve, reject) => {
    const fail = (e: Error) => {
      void prompts?.close();
      reject(e);
    };
    server.once("error", fail);
    server.listen(options.port ?? 8000, host, () => {
      server.off("error", fail);
      resolve();
    });
  });
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://${host.includes(":") ? `[${host}]` : host}:${port}`,
    port,
    modelId,
    engine,
    async close() {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeAllConnections();
      await Promise.allSettled([...inFlight]);
      await closed;
      await prompts?.close();
      engine.cache.clear();
    },
  };
}

function digest(key: string): Buffer {
  return createHash("sha256").update(key).digest();
}

// Compares digests, so the time taken says nothing about the key.
function authenticate(req: http.IncomingMessage, expected: Buffer): void {
  const header = req.headers.authorization ?? "";
  const given = /^Bearer\s+(.+)$/i.exec(header)?.[1]?.trim();
  if (given === undefined || !timingSafeEqual(digest(given), expected)) {
    throw new ApiError(
      401,
      given === undefined ? "missing API key: send `Authorization: Bearer <key>`" : "incorrect API key",
      "invalid_request_error",
      "invalid_api_key",
      null,
      { "WWW-Authenticate": "Bearer" },
    );
  }
}
