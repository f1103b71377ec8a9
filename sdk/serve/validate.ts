// Request validation: turns the JSON body of /v1/chat/completions or /v1/completions into a checked
// request, or throws a 400 that names the field at fault. Unknown fields are ignored (clients send
// many); known ones the server cannot honour (n > 1, logprobs, echo...) are refused rather than
// silently dropped. null counts as absent, as in OpenAI's API.
import type { ChatMessage } from "../chat/message";
import { badRequest, invalidParam } from "./api-error";

/** Sampling and stopping, as the request gave them (undefined: the model's default). */
export interface SamplingRequest {
  maxTokens?: number;
  temperature?: number;
  topP?: number;
  topK?: number;
  minP?: number;
  seed?: number;
  presencePenalty?: number;
  frequencyPenalty?: number;
  stop?: string[];
  /** Keep generating past eos ids (vLLM's ignore_eos), for benchmarks. */
  ignoreEos: boolean;
}

interface CommonRequest {
  model: string;
  stream: boolean;
  /** stream_options.include_usage: a last chunk with the usage. */
  includeUsage: boolean;
  sampling: SamplingRequest;
  /** The moelens extension: {"moelens": {"routing": true}} adds the expert load of the request. */
  routing: boolean;
}

export interface ChatRequest extends CommonRequest {
  kind: "chat";
  messages: ChatMessage[];
  tools?: Record<string, unknown>[];
  enableThinking?: boolean;
  /** chat_template_kwargs other than enable_thinking. */
  templateVariables: Record<string, unknown>;
}

export interface CompletionRequest extends CommonRequest {
  kind: "completion";
  /** The prompt text, or its token ids. */
  prompt: string | number[];
}

type Json = Record<string, unknown>;

const ROLES = new Set(["system", "developer", "user", "assistant", "tool"]);

export function parseChatRequest(body: unknown): ChatRequest {
  const f = new Fields(requireObject(body));
  const messages = parseMessages(f.get("messages"));
  if (f.boolean("logprobs") === true) throw unsupported("logprobs");
  if (f.get("top_logprobs") !== undefined) throw unsupported("top_logprobs");
  const format = f.object("response_format");
  if (format !== undefined && format.type !== "text") throw unsupported("response_format", "only {\"type\": \"text\"} is supported");
  const tools = f.get("tools");
  if (tools !== undefined && !(Array.isArray(tools) && tools.every(isObject))) throw invalidParam("tools", "tools must be an array of objects", "invalid_type");
  const kwargs = f.object("chat_template_kwargs") ?? {};
  const { enable_thinking: enableThinking, ...templateVariables } = kwargs;
  if (enableThinking !== undefined && enableThinking !== null && typeof enableThinking !== "boolean") {
    throw invalidParam("chat_template_kwargs.enable_thinking", "chat_template_kwargs.enable_thinking must be a boolean", "invalid_type");
  }
  return {
    kind: "chat",
    ...common(f, f.integer("max_completion_tokens", 1) ?? f.integer("max_tokens", 1)),
    messages,
    tools: tools as Record<string, unknown>[] | undefined,
    enableThinking: enableThinking ?? undefined,
    templateVariables,
  };
}

export function parseCompletionRequest(body: unknown): CompletionRequest {
  const f = new Fields(requireObject(body));
  if (f.get("logprobs") !== undefined) throw unsupported("logprobs");
  if (f.boolean("echo") === true) throw unsupported("echo");
  const bestOf = f.integer("best_of", 1);
  if (bestOf !== undefined && bestOf !== 1) throw unsupported("best_of", "best_of must be 1");
  const suffix = f.string("suffix");
  if (suffix !== undefined && suffix !== "") throw unsupported("suffix");
  return { kind: "completion", ...common(f, f.integer("max_tokens", 1)), prompt: parsePrompt(f.get("prompt")) };
}

function common(f: Fields, maxTokens: number | undefined): CommonRequest {
  const model = f.string("model");
  if (model === undefined) throw invalidParam("model", "model is required (GET /v1/models lists the served model)", "missing_required_parameter");
  const n = f.integer("n", 1);
  if (n !== undefined && n !== 1) throw unsupported("n", "n must be 1 (one choice per request)");
  const bias = f.object("logit_bias");
  if (bias !== undefined && Object.keys(bias).length > 0) throw unsupported("logit_bias");
  const streamOptions = f.object("stream_options");
  const includeUsage = streamOptions?.include_usage ?? false;
  if (typeof includeUsage !== "boolean") throw invalidParam("stream_options.include_usage", "stream_options.include_usage must be a boolean", "invalid_type");
  const topK = f.integer("top_k", -1);
  return {
    model,
    stream: f.boolean("stream") ?? false,
    includeUsage,
    sampling: {
      maxTokens,
      temperature: f.number("temperature", { min: 0 }),
      topP: f.number("top_p", { min: 0, minExclusive: true, max: 1 }),
      topK: topK === -1 ? 0 : topK, // -1 is "off" in vLLM
      minP: f.number("min_p", { min: 0, max: 1 }),
      seed: f.integer("seed", Number.MIN_SAFE_INTEGER),
      presencePenalty: f.number("presence_penalty", { min: -2, max: 2 }),
      frequencyPenalty: f.number("frequency_penalty", { min: -2, max: 2 }),
      stop: parseStop(f.get("stop")),
      ignoreEos: f.boolean("ignore_eos") ?? false,
    },
    routing: parseExtension(f.object("moelens")),
  };
}

function parseExtension(ext: Json | undefined): boolean {
  if (ext === undefined) return false;
  for (const key of Object.keys(ext)) {
    if (key !== "routing") throw invalidParam(`moelens.${key}`, `moelens.${key} is not a moelens option (known: routing)`, "unknown_parameter");
  }
  const routing = ext.routing ?? false;
  if (typeof routing !== "boolean") throw invalidParam("moelens.routing", "moelens.routing must be a boolean", "invalid_type");
  return routing;
}

function parseStop(value: unknown): string[] | undefined {
  if (value === undefined) return undefined;
  const list = typeof value === "string" ? [value] : value;
  if (!Array.isArray(list) || !list.every((s) => typeof s === "string")) {
    throw invalidParam("stop", "stop must be a string or an array of strings", "invalid_type");
  }
  if (list.some((s) => s === "")) throw invalidParam("stop", "stop strings must not be empty");
  return list.length > 0 ? list : undefined;
}

function parseMessages(value: unknown): ChatMessage[] {
  if (!Array.isArray(value)) throw invalidParam("messages", "messages must be an array of {role, content} objects", value === undefined ? "missing_required_parameter" : "invalid_type");
  if (value.length === 0) throw invalidParam("messages", "messages must not be empty");
  return value.map((m, i) => {
    const param = `messages[${i}]`;
    if (!isObject(m)) throw invalidParam(param, `${param} must be an object`, "invalid_type");
    if (typeof m.role !== "string" || !ROLES.has(m.role)) {
      throw invalidParam(`${param}.role`, `${param}.role must be one of ${[...ROLES].join(", ")}`);
    }
    // "developer" is OpenAI's newer name for the system role; chat templates know "system".
    const role = m.role === "developer" ? "system" : m.role;
    return { ...m, role, content: messageContent(m.content, `${param}.content`) } as ChatMessage;
  });
}

// A string, null (an assistant turn with only tool calls), or text parts.
function messageContent(value: unknown, param: string): string {
  if (value === undefined || value === null) return "";
  if (typeof value === "string") return value;
  if (!Array.isArray(value)) throw invalidParam(param, `${param} must be a string or an array of content parts`, "invalid_type");
  return value
    .map((part, j) => {
      if (!isObject(part) || part.type !== "text") {
        throw invalidParam(`${param}[${j}]`, `${param}[${j}]: only {"type": "text", "text": ...} parts are supported`);
      }
      if (typeof part.text !== "string") throw invalidParam(`${param}[${j}].text`, `${param}[${j}].text must be a string`, "invalid_type");
      return part.text;
    })
    .join("\n");
}

// A string, token ids, or a list holding one of those (batches of prompts are not supported).
function parsePrompt(value: unknown): string | number[] {
  if (value === undefined) throw invalidParam("prompt", "prompt is required", "missing_required_parameter");
  let prompt = value;
  if (Array.isArray(value) && value.length > 0 && (typeof value[0] === "string" || Array.isArray(value[0]))) {
    if (value.length !== 1) throw unsupported("prompt", "one prompt per request (a list of prompts is not supported)");
    prompt = value[0];
  }
  if (typeof prompt === "string") {
    if (prompt === "") throw invalidParam("prompt", "prompt is empty: there is nothing to continue");
    return prompt;
  }
  if (Array.isArray(prompt) && prompt.every((id) => Number.isInteger(id) && id >= 0)) {
    if (prompt.length === 0) throw invalidParam("prompt", "prompt is empty: there is nothing to continue");
    return prompt as number[];
  }
  throw invalidParam("prompt", "prompt must be a string or an array of token ids (integers >= 0)", "invalid_type");
}

function unsupported(param: string, message = `${param} is not supported by this server`) {
  return invalidParam(param, message, "unsupported_parameter");
}

function requireObject(body: unknown): Json {
  if (!isObject(body)) throw badRequest("the request body must be a JSON object", "invalid_type");
  return body;
}

function isObject(v: unknown): v is Json {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

// Typed access to top-level fields; each getter throws a 400 naming the field.
class Fields {
  constructor(private readonly body: Json) {}

  get(name: string): unknown {
    const v = this.body[name];
    return v === null ? undefined : v;
  }

  string(name: string): string | undefined {
    const v = this.get(name);
    if (v !== undefined && typeof v !== "string") throw invalidParam(name, `${name} must be a string`, "invalid_type");
    return v;
  }

  boolean(name: string): boolean | undefined {
    const v = this.get(name);
    if (v !== undefined && typeof v !== "boolean") throw invalidParam(name, `${name} must be a boolean`, "invalid_type");
    return v;
  }

  object(name: string): Json | undefined {
    const v = this.get(name);
    if (v !== undefined && !isObject(v)) throw invalidParam(name, `${name} must be an object`, "invalid_type");
    return v;
  }

  number(name: string, range: { min?: number; minExclusive?: boolean; max?: number }): number | undefined {
    const v = this.get(name);
    if (v === undefined) return undefined;
    if (typeof v !== "number" || !Number.isFinite(v)) throw invalidParam(name, `${name} must be a number`, "invalid_type");
    const { min, max, minExclusive } = range;
    if ((min !== undefined && (minExclusive ? v <= min : v < min)) || (max !== undefined && v > max)) {
      const low = min === undefined ? "" : minExclusive ? `> ${min}` : `>= ${min}`;
      const high = max === undefined ? "" : `<= ${max}`;
      throw invalidParam(name, `${name} must be ${[low, high].filter(Boolean).join(" and ")}, got ${v}`);
    }
    return v;
  }

  integer(name: string, min: number): number | undefined {
    const v = this.get(name);
    if (v === undefined) return undefined;
    if (typeof v !== "number" || !Number.isSafeInteger(v)) throw invalidParam(name, `${name} must be an integer`, "invalid_type");
    if (v < min) throw invalidParam(name, `${name} must be >= ${min}, got ${v}`);
    return v;
  }
}
