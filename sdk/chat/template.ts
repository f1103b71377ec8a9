// The checkpoint's chat template (chat_template.jinja, or chat_template in tokenizer_config.json),
// rendered with @huggingface/jinja the way transformers' apply_chat_template renders it.
import * as fs from "node:fs";
import * as path from "node:path";
import { Template } from "@huggingface/jinja";
import type { ChatMessage } from "./message";

export interface ChatRenderOptions {
  /** Open an assistant turn at the end, for generation (default false, as in transformers). */
  addGenerationPrompt?: boolean;
  /** The template's `enable_thinking` switch; left undefined when not given, so the template's default applies. */
  enableThinking?: boolean;
  /** Tool (function) descriptions, JSON-schema style, passed as `tools`. */
  tools?: Record<string, unknown>[];
  /** More template variables (transformers' `**kwargs` of apply_chat_template). */
  variables?: Record<string, unknown>;
}

/** Special-token strings the template may use (bos_token, eos_token...). */
export type TemplateTokens = Record<string, string>;

export class ChatTemplate {
  private readonly compiled: Template;

  /**
   * @param source the Jinja text
   * @param origin where it came from, for error messages
   * @param tokens special-token strings exposed to the template
   */
  constructor(
    readonly source: string,
    readonly origin: string,
    readonly tokens: TemplateTokens = {},
  ) {
    try {
      this.compiled = new Template(source);
    } catch (e) {
      throw new Error(`${origin}: cannot parse the chat template: ${(e as Error).message}`);
    }
  }

  /** The prompt text for `messages`. */
  render(messages: ChatMessage[], options: ChatRenderOptions = {}): string {
    if (!Array.isArray(messages)) throw new TypeError("ChatTemplate.render: messages must be an array");
    const variables: Record<string, unknown> = {
      ...this.tokens,
      ...options.variables,
      messages,
      add_generation_prompt: options.addGenerationPrompt ?? false,
    };
    if (options.enableThinking !== undefined) variables.enable_thinking = options.enableThinking;
    if (options.tools !== undefined) variables.tools = options.tools;
    try {
      return this.compiled.render(variables);
    } catch (e) {
      throw new Error(`${this.origin}: chat template failed: ${(e as Error).message}`);
    }
  }
}

/**
 * The chat template of a checkpoint folder: chat_template.jinja first (what transformers saves
 * today), else `chat_template` in tokenizer_config.json (a string, or a list of named templates of
 * which "default" is used). Undefined when there is none.
 */
export function loadChatTemplate(dir: string, tokenizerConfig: Record<string, unknown> = {}): ChatTemplate | undefined {
  const tokens = templateTokens(tokenizerConfig);
  const jinjaFile = path.join(dir, "chat_template.jinja");
  if (fs.existsSync(jinjaFile)) return new ChatTemplate(fs.readFileSync(jinjaFile, "utf8"), jinjaFile, tokens);
  const origin = path.join(dir, "tokenizer_config.json");
  const field = tokenizerConfig.chat_template;
  if (field === undefined || field === null) return undefined;
  if (typeof field === "string") return new ChatTemplate(field, origin, tokens);
  if (Array.isArray(field)) {
    const named = field.find((t) => t && (t as { name?: unknown }).name === "default") as { template?: unknown } | undefined;
    if (named && typeof named.template === "string") return new ChatTemplate(named.template, `${origin} (default)`, tokens);
  }
  throw new Error(`${origin}: chat_template must be a string or a list with a "default" entry`);
}

// bos_token etc. are strings, or AddedToken objects ({"content": ...}) in older configs.
function templateTokens(config: Record<string, unknown>): TemplateTokens {
  const out: TemplateTokens = {};
  for (const key of ["bos_token", "eos_token", "unk_token", "pad_token"]) {
    const v = config[key];
    if (typeof v === "string") out[key] = v;
    else if (v && typeof v === "object" && typeof (v as { content?: unknown }).content === "string") {
      out[key] = (v as { content: string }).content;
    }
  }
  return out;
}
