// Chat prompts rendered by our ChatTemplate equal transformers' apply_chat_template (recorded by
// scripts/tokenizer-reference/record.py) for every conversation of test/data/chat-conversations.json.
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadChatTemplate, loadTokenizer, type ChatMessage, type Tokenizer } from "moelens";
const dataDir = path.join(__dirname, "data");
const tokenizerDirs: { name: string; dir: string; vocabSize: number }[] = JSON.parse(
  fs.readFileSync(path.join(dataDir, "tokenizer-dirs.json"), "utf8"),
).tokenizers.map((t: { dir: string }) => ({ ...t, dir: path.resolve(__dirname, "..", t.dir) }));

interface Conversation {
  name: string;
  messages: ChatMessage[];
  options: { add_generation_prompt?: boolean; enable_thinking?: boolean; tools?: Record<string, unknown>[] };
}
interface Rendered {
  text?: string;
  ids?: number[];
  error?: string;
}

const conversations: Conversation[] = JSON.parse(fs.readFileSync(path.join(dataDir, "chat-conversations.json"), "utf8"))
  .conversations;

it("covers system / no system, thinking on / off / default and multi-turn", () => {
  expect(conversations.length).toBeGreaterThanOrEqual(20);
  const has = (f: (c: Conversation) => boolean) => conversations.some(f);
  expect(has((c) => c.messages[0].role === "system")).toBe(true);
  expect(has((c) => c.messages[0].role !== "system")).toBe(true);
  expect(has((c) => c.options.enable_thinking === true)).toBe(true);
  expect(has((c) => c.options.enable_thinking === false)).toBe(true);
  expect(has((c) => c.options.enable_thinking === undefined)).toBe(true);
  expect(has((c) => c.messages.filter((m) => m.role === "user").length >= 3)).toBe(true);
});

describe.each(tokenizerDirs)("chat template of $name", ({ name, dir }) => {
  let tok: Tokenizer;
  const reference: Rendered[] = JSON.parse(
    fs.readFileSync(path.join(dataDir, "chat-reference", `chat-${name}.json`), "utf8"),
  ).conversations;

  beforeAll(async () => {
    tok = await loadTokenizer(dir);
  });
  afterAll(() => tok?.close());

  it.each(conversations.map((c, i) => [c.name, i] as const))("renders '%s' like transformers", (_, i) => {
    const c = conversations[i];
    const ref = reference[i];
    expect(ref.error).toBeUndefined();
    const text = tok.chatTemplate!.render(c.messages, {
      addGenerationPrompt: c.options.add_generation_prompt,
      enableThinking: c.options.enable_thinking,
      tools: c.options.tools,
    });
    expect(text).toBe(ref.text);
    expect(tok.encode(text)).toEqual(ref.ids);
  });
});

describe("chat template sources", () => {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "moelens-chat-"));
  afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }));

  it("prefers chat_template.jinja, then tokenizer_config.json (string or named list)", () => {
    fs.writeFileSync(path.join(tmp, "chat_template.jinja"), "J{{ messages[0].content }}");
    const config = { chat_template: "C{{ messages[0].content }}", eos_token: { content: "</s>" } };
    const msgs: ChatMessage[] = [{ role: "user", content: "x" }];
    expect(loadChatTemplate(tmp, config)!.render(msgs)).toBe("Jx");
    fs.rmSync(path.join(tmp, "chat_template.jinja"));
    expect(loadChatTemplate(tmp, config)!.render(msgs)).toBe("Cx");
    const named = { chat_template: [{ name: "tool_use", template: "T" }, { name: "default", template: "D{{ eos_token }}" }], eos_token: { content: "</s>" } };
    expect(loadChatTemplate(tmp, named)!.render(msgs)).toBe("D</s>");
    expect(loadChatTemplate(tmp, {})).toBeUndefined();
  });

  it("names the file when the template is broken", () => {
    expect(() => loadChatTemplate(tmp, { chat_template: "{% if %}" })).toThrow(/tokenizer_config\.json/);
    const bad = loadChatTemplate(tmp, { chat_template: "{{ raise_exception('no system role') }}" })!;
    expect(() => bad.render([{ role: "system", content: "x" }])).toThrow(/tokenizer_config\.json: chat template failed: .*no system role/);
  });
});
