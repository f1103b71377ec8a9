// The real `moelens` binary (bin/moelens.js over dist/), spawned as users run it, on the t1 fixture
// with the t1-tokenizer. Outputs are compared with the SDK's.
import { spawn, spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { embeddedModelDir, load, type Model } from "moelens";
import { countParameters } from "../sdk/cli/parameters";
import { native } from "../sdk/native";
import { makeTextModelDir } from "./fixtures/t1-tokenizer/model-dir";
import { ensureBuiltDist } from "./helpers/built-dist";

const root = path.resolve(__dirname, "..");
const bin = path.join(root, "bin", "moelens.js");
const fixture = makeTextModelDir();
let model: Model;

function moelens(args: string[], input?: string) {
  const r = spawnSync(process.execPath, [bin, ...args], { cwd: root, input, encoding: "utf8", timeout: 60_000 });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

const modelFlags = () => ["--model", fixture.dir, "--threads", "1"];

beforeAll(async () => {
  ensureBuiltDist(root); // the binary runs dist/
  model = await load(fixture.dir, { threads: 1 });
}, 180_000);
afterAll(() => {
  model?.tokenizer?.close();
  fixture.remove();
});

async function sdkText(prompt: string, options: Parameters<ReturnType<Model["session"]>["generate"]>[1]): Promise<string> {
  let text = "";
  for await (const c of model.session().generate(prompt, options)) text += c.text;
  return text;
}

describe("moelens CLI", () => {
  it("--help lists the commands and flags (and no unfinished ones)", () => {
    const r = moelens(["--help"]);
    expect(r.status).toBe(0);
    for (const word of ["generate", "chat", "info", "kernel install", "kernel uninstall", "--model", "--backend", "--max-tokens", "--temperature", "--top-p", "--top-k", "--seed", "--stop", "--help"]) {
      expect(r.stdout).toContain(word);
    }
    // Every command listed works (none is a placeholder).
    const listed = new Set([...r.stdout.matchAll(/^ {2}moelens (\w+)/gm)].map((m) => m[1]));
    expect([...listed]).toEqual(expect.arrayContaining(["generate", "chat", "info", "kernel"]));
    for (const command of listed) {
      const help = moelens([command, "--help"]);
      expect(help.status, command).toBe(0);
      expect(help.stdout.length).toBeGreaterThan(0);
    }
    expect(moelens(["generate", "--help"]).stdout).toBe(r.stdout);
    const bare = moelens([]);
    expect(bare.status).toBe(2);
    expect(bare.stdout).toBe(r.stdout);
  });

  it("rejects unknown commands, flags and bad values up front: one message style, exit status 2", () => {
    const hasMetal = (native().backends() as string[]).includes("metal");
    const cases: [string[], string][] = [
      [["frobnicate"], "unknown command 'frobnicate'"],
      [["generate", "--nope", "x"], "--nope: unknown option"],
      [["generate", "--seed"], "--seed: needs a value"],
      [["generate", "--chat=yes", "x"], "--chat: takes no value"],
      [["generate", "--top-k", "1.5", "x"], "--top-k 1.5: must be an integer >= 0"],
      [["generate", "--top-k", "-2", "x"], "--top-k -2: must be an integer >= 0"],
      [["generate", "--temperature=-1", "x"], "--temperature -1: must be a number >= 0"],
      [["generate", "--temperature", "-1", "x"], "--temperature -1: must be a number >= 0"],
      [["generate", "--temperature", "hot", "x"], "--temperature hot: must be a number >= 0"],
      [["generate", "--top-p", "1.5", "x"], "--top-p 1.5: must be a number in (0, 1]"],
      [["generate", "--top-p", "0", "x"], "--top-p 0: must be a number in (0, 1]"],
      [["generate", "--min-p", "2", "x"], "--min-p 2: must be a number in [0, 1]"],
      [["generate", "--repetition-penalty", "0", "x"], "--repetition-penalty 0: must be a number > 0"],
      [["generate", "--presence-penalty", "much", "x"], "--presence-penalty much: must be a number"],
      [["generate", "--frequency-penalty", "", "x"], "--frequency-penalty : must be a number"],
      [["generate", "--seed", "1.5", "x"], "--seed 1.5: must be an integer"],
      [["generate", "--max-tokens", "-1", "x"], "--max-tokens -1: must be an integer >= 0"],
      [["generate", "--threads", "0", "x"], "--threads 0: must be an integer >= 1"],
      [["generate", "--think", "--no-think", "x"], "--think and --no-think exclude each other"],
      [["generate", "--emulator", "x"], "--emulator: goes with --backend metal"],
      [["generate", ...modelFlags(), "--backend", "warp", "x"], `--backend warp: unknown (available: ${native().backends().join(", ")})`],
      [["generate", ...modelFlags(), "--precision", "int4", "x"], "--precision int4: must be one of fp32, fp16, int24, int16, int8"],
      [["generate", "--model", "/nonexistent", "x"], "--model /nonexistent: no such folder"],
      [["generate", ...modelFlags(), "--max-tokens", "4093", "The jury said"], "--max-tokens 4093: the model's context holds 4096 tokens and the prompt takes 4, so at most 4092"],
      [["chat", ...modelFlags(), "stray"], "chat takes no arguments; type the messages at its prompt"],
      [["serve", "--port", "-1"], "--port -1: must be an integer in [0, 65535]"],
      [["serve", "--max-request-bytes", "0"], "--max-request-bytes 0: must be an integer >= 1"],
      [["serve", "stray"], "unexpected argument stray"],
    ];
    if (hasMetal && process.platform !== "darwin") {
      cases.push([
        ["generate", ...modelFlags(), "--backend", "metal", "x"],
        `--backend metal: Metal needs macOS; on ${process.platform}, --backend emulator runs the same kernels on the CPU ` +
          "emulator, a test harness far slower than --backend cpu (add --emulator to run the Metal host over it anyway)",
      ]);
    }
    for (const [args, message] of cases) {
      const r = moelens(args);
      expect(r.status, args.join(" ")).toBe(2);
      expect(r.stderr, args.join(" ")).toBe(`moelens: ${message}\nRun \`moelens --help\` for the options.\n`);
      expect(r.stdout, args.join(" ")).toBe("");
    }
  });

  it("takes negative numbers as values, and every generation flag as the SDK option of the same name", async () => {
    const r = moelens(["generate", ...modelFlags(), "--temperature", "0", "--presence-penalty", "-2", "--frequency-penalty", "-1", "--seed", "-3", "--max-tokens", "8", "The jury said"]);
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toBe(await sdkText("The jury said", { temperature: 0, presencePenalty: -2, frequencyPenalty: -1, seed: -3, maxTokens: 8 }));
    const help = moelens(["--help"]).stdout;
    for (const option of ["maxTokens", "temperature", "topK", "topP", "minP", "repetitionPenalty", "presencePenalty", "frequencyPenalty", "seed", "stop", "skipSpecialTokens"]) {
      expect(help).toContain(`  --${option.replace(/[A-Z]/g, (c) => "-" + c.toLowerCase())} `);
    }
  });

  it("--backend metal runs off macOS when the emulator is asked for", () => {
    if (!(native().backends() as string[]).includes("metal") || process.platform === "darwin") return;
    const r = moelens(["info", ...modelFlags(), "--backend", "metal", "--emulator", "--json"]);
    expect(r.status, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout).backend).toBe("metal");
  });

  it("--backend emulator runs the GPU kernels on the CPU emulator anywhere, as the refusal of metal says", () => {
    const r = moelens(["info", ...modelFlags(), "--backend", "emulator", "--json"]);
    expect(r.status, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout).backend).toBe("emulator");
  });

  it("defaults to the embedded model, with a clear error while it is missing", () => {
    const r = moelens(["generate", "--threads", "1", "--max-tokens", "2", "Hello"]);
    if (fs.existsSync(embeddedModelDir)) {
      expect(r.status).toBe(0);
    } else {
      expect(r.status).toBe(2);
      expect(r.stderr).toContain(`the embedded model is not installed (${embeddedModelDir} is missing); pass --model <dir>`);
    }
  });

  it("generate streams the SDK's text to stdout and the speed to stderr", async () => {
    const r = moelens(["generate", ...modelFlags(), "--temperature", "0", "--max-tokens", "10", "The jury said"]);
    expect(r.status).toBe(0);
    expect(r.stdout).toBe(await sdkText("The jury said", { temperature: 0, maxTokens: 10 }));
    expect(r.stderr).toMatch(/^prefill 4 tokens in \d+ ms, [\d.]+ tok\/s; decode \d+ tokens in \d+ ms, [\d.]+ tok\/s; finish: (length|eos)\n$/);
  });

  it("the speed line stands on its own line when stdout and stderr share a pipe", async () => {
    const text = await sdkText("The jury said", { temperature: 0, maxTokens: 6 });
    expect(text.endsWith("\n")).toBe(false);
    const args = [bin, "generate", ...modelFlags(), "--temperature", "0", "--max-tokens", "6", "The jury said"];
    const r = spawnSync("sh", ["-c", `"$0" "$@" 2>&1`, process.execPath, ...args], { cwd: root, encoding: "utf8", timeout: 60_000 });
    expect(r.status).toBe(0);
    expect(r.stdout).toMatch(/\nprefill 4 tokens in \d+ ms, [\d.]+ tok\/s; decode \d+ tokens in \d+ ms, [\d.]+ tok\/s; finish: length\n$/);
    expect(r.stdout.startsWith(text + "\nprefill ")).toBe(true);
  });

  it("generate reads the prompt from stdin, reproduces a seed and honours --stop", async () => {
    const args = ["generate", ...modelFlags(), "--temperature", "1.5", "--top-k", "50", "--top-p", "0.9", "--seed", "7", "--max-tokens", "12"];
    const a = moelens(args, "The jury said");
    expect(a.status).toBe(0);
    expect(moelens(args, "The jury said").stdout).toBe(a.stdout);
    expect(a.stdout).toBe(await sdkText("The jury said", { temperature: 1.5, topK: 50, topP: 0.9, seed: 7, maxTokens: 12 }));

    const greedy = await sdkText("The jury said", { temperature: 0, maxTokens: 10, stopTokenIds: [] });
    const stop = greedy.slice(5, 8);
    const r = moelens(["generate", ...modelFlags(), "--temperature", "0", "--max-tokens", "10", "--stop", stop, "The jury said"]);
    expect(r.stdout).toBe(greedy.slice(0, greedy.indexOf(stop)));
    expect(r.stderr).toMatch(/finish: stop/);
  });

  it("generate --chat applies the chat template with the system prompt and thinking switch", async () => {
    const r = moelens(["generate", ...modelFlags(), "--chat", "--system", "Be brief.", "--no-think", "--temperature", "0", "--max-tokens", "6", "Hi"]);
    expect(r.status).toBe(0);
    let text = "";
    const messages = [{ role: "system" as const, content: "Be brief." }, { role: "user" as const, content: "Hi" }];
    for await (const c of model.session().generate(messages, { temperature: 0, maxTokens: 6, enableThinking: false })) text += c.text;
    expect(r.stdout).toBe(text);
    const rendered = model.tokenizer!.chatTemplate!.render(messages, { addGenerationPrompt: true, enableThinking: false });
    expect(r.stderr).toContain(`prefill ${model.tokenizer!.encode(rendered).length} tokens`);
  });

  it("chat answers line by line like a Conversation, re-feeding only each new turn", async () => {
    const r = moelens(["chat", ...modelFlags(), "--temperature", "0", "--max-tokens", "5", "--no-think"], "Hello\nAnd then?\n/reset\nHello\n");
    expect(r.status).toBe(0);
    const chat = model.conversation({ enableThinking: false });
    const replies: string[] = [];
    for (const line of ["Hello", "And then?"]) {
      let text = "";
      for await (const c of chat.send(line, { temperature: 0, maxTokens: 5 })) text += c.text;
      replies.push(text);
    }
    const end = (s: string) => (s.endsWith("\n") ? s : s + "\n");
    expect(r.stdout).toBe(end(replies[0]) + end(replies[1]) + end(replies[0]));
    const fed = [...r.stderr.matchAll(/fed (\d+) new prompt tokens/g)].map((m) => Number(m[1]));
    expect(fed.length).toBe(3);
    expect(fed[1]).toBe(chat.promptTokensFed);
    expect(fed[2]).toBe(fed[0]); // after /reset, the whole prompt again
    expect(r.stderr).toContain("(new conversation)");
  });

  it("info reports the config, parameter count and memory (--json too)", () => {
    const r = moelens(["info", ...modelFlags(), "--json"]);
    expect(r.status).toBe(0);
    const info = JSON.parse(r.stdout);
    expect(info.config.numLayers).toBe(4);
    expect(info.parameters).toEqual(countParameters(model.config));
    expect(info.parameters.activePerToken).toBeLessThan(info.parameters.total);
    expect(info.memory.weightBytes).toBe(model.info.weightBytes);
    expect(info.tokenizer.vocabSize).toBe(1000);
    expect(info.eosTokenIds).toEqual([997, 995]);
    const text = moelens(["info", ...modelFlags()]);
    expect(text.stdout).toMatch(/^parameters +2\.\d\d M total, 1\.\d\d M active per token/m);
    expect(text.stdout).toMatch(/^weights +[\d.]+ MiB in memory/m);
  });

  it("--precision picks the CPU backend's matmul precision (exact fp32 by default)", () => {
    expect(JSON.parse(moelens(["info", ...modelFlags(), "--json"]).stdout).precision).toBe("fp32");
    const r = moelens(["info", ...modelFlags(), "--precision", "int8", "--json"]);
    expect(r.status).toBe(0);
    expect(JSON.parse(r.stdout).precision).toBe("int8");
    expect(moelens(["info", ...modelFlags(), "--precision", "int16"]).stdout).toMatch(/^model .*, int16 activations\)$/m);
    expect(moelens(["info", ...modelFlags(), "--precision", "int24"]).stdout).toMatch(/^model .*, int24 activations in decode\)$/m);
  });

  it("Ctrl+C ends generate with finish reason abort and exit status 130", async () => {
    // Greedy on t1 after "The jury said" meets no eos id within 4000 tokens: only the signal ends it early.
    const child = spawn(process.execPath, [bin, "generate", ...modelFlags(), "--temperature", "0", "--max-tokens", "4000", "The jury said"], { cwd: root });
    let stderr = "";
    child.stderr.on("data", (d) => (stderr += d));
    await new Promise<void>((resolve) => child.stdout.once("data", () => resolve()));
    child.kill("SIGINT");
    const status = await new Promise<number | null>((resolve) => child.on("close", resolve));
    expect(stderr).toMatch(/finish: abort\n$/);
    expect(status).toBe(130);
  });

  it("shows a loading progress bar on a terminal only", () => {
    // util-linux `script` gives the command a pseudo-terminal.
    const command = [process.execPath, bin, "info", ...modelFlags()].map((a) => `'${a}'`).join(" ");
    const tty = spawnSync("script", ["-qec", command, "/dev/null"], { cwd: root, encoding: "utf8", timeout: 60_000 });
    expect(tty.status).toBe(0);
    expect(tty.stdout).toMatch(/\rloading moelens-t1-text-\w+ \[#{30}\] (\d+)\/\1\r\x1b\[2Kmodel /);
    expect(moelens(["info", ...modelFlags()]).stderr).toBe("");
  });

  it("kernel forwards to the Jupyter kernel's command line", () => {
    const r = moelens(["kernel", "--help"]);
    expect(r.status).toBe(0);
    expect(r.stdout).toContain("kernel install [--user | --sys-prefix | --prefix DIR]");
  });
});

describe("docs/examples/generate.ts", () => {
  const example = path.join(root, "docs", "examples", "generate.ts");
  const runners: [string, string][] = [
    ["tsx", path.join(root, "node_modules", "tsx", "dist", "cli.mjs")],
    ["ts-node", path.join(root, "node_modules", "ts-node", "dist", "bin.js")],
  ];
  it.each(runners)("runs as written with %s", (_, runner) => {
    const r = spawnSync(process.execPath, [runner, example, fixture.dir], { cwd: root, encoding: "utf8", timeout: 120_000 });
    expect(r.stderr).toBe("");
    expect(r.status).toBe(0);
    const lines = r.stdout.split("\n");
    expect(lines[0]).toMatch(/^327:"The" 473:" j" 975:"ury" 548:" said"/);
    expect(lines[1]).toBe("true");
    expect(r.stdout).toMatch(/\[length: 30 tokens, [\d.]+ tok\/s\]/);
    expect(r.stdout.match(/\[fed \d+ new prompt tokens\]/g)?.length).toBe(2);
  });
});
