// Bad checkpoints and configs: each one is a JS Error that names the file and the tensor or field,
// never a crash or a hang.
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { afterAll, describe, expect, test } from "vitest";
import { load } from "moelens";
import { TINY_TEXT_CONFIG, safetensorsBytes, tinyTensors, writeModelDir } from "./helpers/checkpoint-writer";

const root = fs.mkdtempSync(path.join(os.tmpdir(), "moelens-bad-"));
afterAll(() => fs.rmSync(root, { recursive: true, force: true }));
let counter = 0;

function modelDir(config: unknown, weights: Uint8Array): string {
  return writeModelDir(path.join(root, `m${counter++}`), config, weights);
}

const goodWeights = () => safetensorsBytes(tinyTensors());

async function expectLoadError(dir: string, ...patterns: (string | RegExp)[]) {
  const err = await load(dir).then(
    () => null,
    (e: unknown) => e,
  );
  expect(err, "load() should have failed").toBeInstanceOf(Error);
  const message = (err as Error).message;
  for (const p of patterns) expect(message).toMatch(p);
  return message;
}

// Rewrites the JSON header of a safetensors file (keeping the data section).
function withHeader(bytes: Uint8Array, edit: (h: Record<string, any>) => void, rawLength?: bigint): Uint8Array {
  const view = new DataView(bytes.buffer, bytes.byteOffset);
  const n = Number(view.getBigUint64(0, true));
  const header = JSON.parse(Buffer.from(bytes.subarray(8, 8 + n)).toString("utf8"));
  edit(header);
  const json = Buffer.from(JSON.stringify(header), "utf8");
  const out = new Uint8Array(8 + json.length + (bytes.length - 8 - n));
  new DataView(out.buffer).setBigUint64(0, rawLength ?? BigInt(json.length), true);
  out.set(json, 8);
  out.set(bytes.subarray(8 + n), 8 + json.length);
  return out;
}

const EMBED = "model.language_model.embed_tokens.weight";
const QKV = "model.language_model.layers.0.linear_attn.in_proj_qkv.weight";

test("the tiny checkpoint itself loads and runs", async () => {
  const model = await load(modelDir(TINY_TEXT_CONFIG, goodWeights()));
  const r = await model.session().prefill([1, 2, 3]);
  expect(r.logits.shape).toEqual([1, 64]);
  expect(r.logits.data.every(Number.isFinite)).toBe(true);
});

describe("safetensors files", () => {
  test("truncated file", async () => {
    const w = goodWeights();
    await expectLoadError(modelDir(TINY_TEXT_CONFIG, w.subarray(0, 5)), /model\.safetensors/, /truncated/);
    await expectLoadError(modelDir(TINY_TEXT_CONFIG, w.subarray(0, w.length - 100)), /model\.safetensors/, /past the end/);
  });

  test("header length past the end", async () => {
    const w = withHeader(goodWeights(), () => {}, 1n << 40n);
    await expectLoadError(modelDir(TINY_TEXT_CONFIG, w), /model\.safetensors/, /header length/);
    const w2 = withHeader(goodWeights(), () => {}, 5_000_000n);
    await expectLoadError(modelDir(TINY_TEXT_CONFIG, w2), /model\.safetensors/, /past the end of the file/);
  });

  test("out-of-range offsets", async () => {
    const w = withHeader(goodWeights(), (h) => {
      h[QKV].data_offsets[1] += 1_000_000;
    });
    await expectLoadError(modelDir(TINY_TEXT_CONFIG, w), /model\.safetensors/, new RegExp(QKV.replace(/\./g, "\\.")));
  });

  test("overlapping offsets", async () => {
    const w = withHeader(goodWeights(), (h) => {
      h[QKV].data_offsets = [...h[EMBED].data_offsets];
      h[QKV].shape = h[EMBED].shape;
    });
    await expectLoadError(modelDir(TINY_TEXT_CONFIG, w), /model\.safetensors/, /overlap/, /embed_tokens/);
  });

  test("offsets that disagree with dtype and shape", async () => {
    const w = withHeader(goodWeights(), (h) => {
      h[EMBED].dtype = "F32";
    });
    await expectLoadError(modelDir(TINY_TEXT_CONFIG, w), /model\.safetensors/, /embed_tokens/, /need/);
  });

  test("non-UTF-8 header", async () => {
    const w = goodWeights();
    const n = Number(new DataView(w.buffer).getBigUint64(0, true));
    const bad = w.slice();
    const at = Buffer.from(bad.subarray(8, 8 + n)).indexOf("embed_tokens");
    bad[8 + at] = 0xff;
    await expectLoadError(modelDir(TINY_TEXT_CONFIG, bad), /model\.safetensors/, /UTF-8/);
  });

  test("malformed JSON header", async () => {
    const w = goodWeights().slice();
    w[8] = "[".charCodeAt(0);
    w[9] = "}".charCodeAt(0);
    await expectLoadError(modelDir(TINY_TEXT_CONFIG, w), /model\.safetensors/, /JSON/);
  });

  test("unknown dtype", async () => {
    const w = withHeader(goodWeights(), (h) => {
      h[EMBED].dtype = "Q4_K";
    });
    await expectLoadError(modelDir(TINY_TEXT_CONFIG, w), /embed_tokens/, /unknown dtype/);
  });
});

describe("tensors against the config", () => {
  test("wrong dtype", async () => {
    const t = tinyTensors();
    const e = t.get(EMBED)!;
    t.set(EMBED, { ...e, dtype: "I32", shape: [e.shape[0], e.shape[1] / 2] });
    await expectLoadError(modelDir(TINY_TEXT_CONFIG, safetensorsBytes(t)), /embed_tokens/, /dtype I32/);
  });

  test("wrong shape", async () => {
    const t = tinyTensors();
    const name = "model.language_model.layers.0.linear_attn.out_proj.weight";
    const o = t.get(name)!;
    t.set(name, { ...o, shape: [o.shape[1], o.shape[0]] });
    await expectLoadError(modelDir(TINY_TEXT_CONFIG, safetensorsBytes(t)), /out_proj/, /has shape \[16, 32\] but the config implies \[32, 16\]/);
  });

  test("missing tensor", async () => {
    const t = tinyTensors();
    t.delete("model.language_model.layers.1.self_attn.k_norm.weight");
    await expectLoadError(modelDir(TINY_TEXT_CONFIG, safetensorsBytes(t)), /missing tensor/, /layers\.1\.self_attn\.k_norm\.weight/);
  });

  test("unexpected extra tensor (vision and MTP tensors are skipped)", async () => {
    const t = tinyTensors();
    t.set("mtp.fc.weight", { dtype: "BF16", shape: [2], data: new Uint8Array(4) });
    t.set("model.visual.patch_embed.weight", { dtype: "BF16", shape: [2], data: new Uint8Array(4) });
    await load(modelDir(TINY_TEXT_CONFIG, safetensorsBytes(t)));
    t.set("model.language_model.layers.0.mystery.weight", { dtype: "BF16", shape: [2], data: new Uint8Array(4) });
    await expectLoadError(modelDir(TINY_TEXT_CONFIG, safetensorsBytes(t)), /unexpected tensor/, /mystery/);
  });

  test("a config that disagrees with the tensors", async () => {
    await expectLoadError(modelDir({ ...TINY_TEXT_CONFIG, hidden_size: 48 }, goodWeights()), /embed_tokens/, /config implies/);
    await expectLoadError(modelDir({ ...TINY_TEXT_CONFIG, num_experts: 8 }, goodWeights()), /mlp\.gate/);
    await expectLoadError(modelDir({ ...TINY_TEXT_CONFIG, num_hidden_layers: 3, layer_types: undefined }, goodWeights()), /missing tensor/, /layers\.1\.linear_attn/);
  });

  test("quantized tensors whose group size does not divide the row", async () => {
    const base = path.join(__dirname, "fixtures", "t1", "mlx");
    const config = JSON.parse(fs.readFileSync(path.join(base, "config.json"), "utf8"));
    config.quantization.group_size = 48;
    const weights = fs.readFileSync(path.join(base, "model.safetensors"));
    await expectLoadError(modelDir(config, weights), /config\.json/, /group size 48 does not divide/);
    config.quantization.group_size = 32;
    await expectLoadError(modelDir(config, weights), /group size 64 but config\.json quantization says 4-bit with group size 32/);
  });
});

describe("config.json", () => {
  test("unknown architecture", async () => {
    await expectLoadError(modelDir({ ...TINY_TEXT_CONFIG, model_type: "llama" }, goodWeights()), /config\.json/, /unknown architecture/, /llama/);
  });

  test("missing or mistyped fields", async () => {
    const { hidden_size: _h, ...noHidden } = TINY_TEXT_CONFIG;
    await expectLoadError(modelDir(noHidden, goodWeights()), /config\.json/, /'hidden_size'/);
    await expectLoadError(modelDir({ ...TINY_TEXT_CONFIG, num_experts: "4" }, goodWeights()), /'num_experts' must be an integer/);
    await expectLoadError(modelDir({ ...TINY_TEXT_CONFIG, layer_types: ["linear_attention", "cross"] }, goodWeights()), /'layer_types'/);
    await expectLoadError(modelDir({ ...TINY_TEXT_CONFIG, rope_parameters: { rope_type: "yarn" } }, goodWeights()), /rope_type/);
  });

  test("qwen3_5_moe without text_config", async () => {
    await expectLoadError(modelDir({ model_type: "qwen3_5_moe" }, goodWeights()), /text_config/);
  });

  test("invalid JSON and non-UTF-8 text", async () => {
    await expectLoadError(modelDir("{ \"model_type\": ", goodWeights()), /config\.json/, /invalid JSON/);
    const dir = modelDir(TINY_TEXT_CONFIG, goodWeights());
    fs.writeFileSync(path.join(dir, "config.json"), Buffer.from([0x7b, 0x22, 0xff, 0x22, 0x3a, 0x31, 0x7d]));
    await expectLoadError(dir, /config\.json/, /UTF-8/);
  });

  test("missing files", async () => {
    const dir = path.join(root, "empty");
    fs.mkdirSync(dir);
    await expectLoadError(dir, /config\.json/, /cannot open/);
    fs.writeFileSync(path.join(dir, "config.json"), JSON.stringify(TINY_TEXT_CONFIG));
    await expectLoadError(dir, /no model\.safetensors/);
    await expect(load(path.join(root, "does-not-exist"))).rejects.toThrow(/not a model directory/);
  });

  test("a sharded index that names a missing tensor or file", async () => {
    const dir = modelDir(TINY_TEXT_CONFIG, goodWeights());
    const weightMap: Record<string, string> = {};
    for (const name of tinyTensors().keys()) weightMap[name] = "model.safetensors";
    weightMap["model.language_model.ghost.weight"] = "model.safetensors";
    fs.writeFileSync(path.join(dir, "model.safetensors.index.json"), JSON.stringify({ weight_map: weightMap }));
    await expectLoadError(dir, /ghost/, /missing/);
    weightMap["model.language_model.ghost.weight"] = "other.safetensors";
    fs.writeFileSync(path.join(dir, "model.safetensors.index.json"), JSON.stringify({ weight_map: weightMap }));
    await expectLoadError(dir, /other\.safetensors/, /cannot open/);
  });
});

describe("requests", () => {
  test("token ids outside the vocabulary", async () => {
    const model = await load(modelDir(TINY_TEXT_CONFIG, goodWeights()));
    const s = model.session();
    await expect(s.prefill([1, 64])).rejects.toThrow(/token id 64 at index 1/);
    await expect(s.prefill([])).rejects.toThrow(/no token ids/);
    await expect(s.decode(-1)).rejects.toThrow(/token id -1/);
    await expect(s.prefill([1], { capture: ["nonsense" as never] })).rejects.toThrow(/unknown capture 'nonsense'/);
    expect(s.position).toBe(0);
  });

  test("context overflow", async () => {
    const model = await load(modelDir({ ...TINY_TEXT_CONFIG, max_position_embeddings: 8 }, goodWeights()));
    const s = model.session();
    await s.prefill([1, 2, 3, 4, 5, 6]);
    await expect(s.prefill([1, 2, 3])).rejects.toThrow(/context overflow/);
    expect(s.position).toBe(6);
  });

  test("a session refuses overlapping calls", async () => {
    const model = await load(modelDir(TINY_TEXT_CONFIG, goodWeights()));
    const s = model.session();
    const first = s.prefill([1, 2, 3]);
    await expect(s.prefill([4])).rejects.toThrow(/busy/);
    await first;
  });
});
