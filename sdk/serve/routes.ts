// HTTP routing: the endpoints, which need the API key, and the 404 / 405 answers for the rest.
import type { IncomingMessage, ServerResponse } from "node:http";
import { ApiError, modelNotFound } from "./api-error";
import { handleCompletion, sendJson, type CompletionContext } from "./completion-handler";
import type { GenerationOutcome } from "./engine";

export type Handler = (req: IncomingMessage, res: ServerResponse, params: string[]) => Promise<GenerationOutcome | undefined | void>;

interface Route {
  method: "GET" | "POST";
  /** Matched against the whole path; capture groups become `params`. */
  path: RegExp;
  /** Needs the API key when the server has one. */
  authenticated: boolean;
  handler: Handler;
}

/** GET /health */
export interface Health {
  status: "ok";
  model: string;
  queue: { running: number; waiting: number; max_waiting: number };
  prefix_cache: { entries: number; bytes: number; max_entries: number; max_bytes: number };
}

export interface RouteContext extends CompletionContext {
  /** Unix time the server started (the model's `created`). */
  started: number;
}

export function buildRoutes(ctx: RouteContext): Route[] {
  const modelCard = () => ({ id: ctx.modelId, object: "model", created: ctx.started, owned_by: "moelens" });
  return [
    {
      method: "GET",
      path: /^\/health$/,
      authenticated: false,
      handler: async (_req, res) => {
        const { queue, cache } = ctx.engine;
        const health: Health = {
          status: "ok",
          model: ctx.modelId,
          queue: { running: queue.running, waiting: queue.queued, max_waiting: queue.maxWaiting },
          prefix_cache: { entries: cache.size, bytes: cache.bytes, max_entries: cache.limits.entries, max_bytes: cache.limits.bytes },
        };
        sendJson(res, 200, health);
      },
    },
    {
      method: "GET",
      path: /^\/v1\/models$/,
      authenticated: true,
      handler: async (_req, res) => sendJson(res, 200, { object: "list", data: [modelCard()] }),
    },
    {
      method: "GET",
      path: /^\/v1\/models\/(.+)$/,
      authenticated: true,
      handler: async (_req, res, [id]) => {
        const asked = decodePathPart(id);
        if (asked !== ctx.modelId) throw modelNotFound(asked, ctx.modelId);
        sendJson(res, 200, modelCard());
      },
    },
    {
      method: "POST",
      path: /^\/v1\/chat\/completions$/,
      authenticated: true,
      handler: (req, res) => handleCompletion("chat", ctx, req, res),
    },
    {
      method: "POST",
      path: /^\/v1\/completions$/,
      authenticated: true,
      handler: (req, res) => handleCompletion("completion", ctx, req, res),
    },
  ];
}

/** The route for `method` and `path`, or a 404 (unknown path) / 405 (known path, other method). */
export function resolveRoute(routes: Route[], method: string, path: string): { route: Route; params: string[] } {
  const allowed: string[] = [];
  for (const route of routes) {
    const m = route.path.exec(path);
    if (!m) continue;
    if (route.method === method) return { route, params: m.slice(1) };
    allowed.push(route.method);
  }
  if (allowed.length > 0) {
    throw new ApiError(405, `${method} is not allowed on ${path} (use ${allowed.join(", ")})`, "invalid_request_error", "method_not_allowed", null, {
      Allow: allowed.join(", "),
    });
  }
  throw new ApiError(404, `no such endpoint: ${method} ${path}`, "invalid_request_error", "unknown_url");
}

// A malformed %-escape names no model (rather than failing as a 500).
function decodePathPart(part: string): string {
  try {
    return decodeURIComponent(part);
  } catch {
    return part;
  }
}
