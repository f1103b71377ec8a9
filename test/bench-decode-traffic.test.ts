// The bytes-per-token arithmetic of bench/cpu-bench.ts against figures worked out by hand for the
// Qwen3.6-35B-A3B shape in MLX 4-bit g64 (router and shared-expert gate 8-bit), and the synthetic
// prompt.
import { describe, expect, it } from "vitest";
import { decodeBytesPerToken, decodeShape, decodeTraffic, mlxBitsPerWeight } from "../bench/decode-traffic";
import { syntheticPrompt } from "../bench/synthetic-prompt";

const LAYERS = 40;

function qwen36Config(quantized: boolean): Record<string, unknown> {
  const quantization: Record<string, unknown> = { group_size: 64, bits: 4, mode: "affine" };
  for (let i = 0; i < LAYERS; i++) {
    quantization[`language_model.model.layers.${i}.mlp.gate`] = { group_size: 64, bits: 8 };
    quantization[`language_model.model.layers.${i}.mlp.shared_expert_gate`] = { group_size: 64, bits: 8 };
  }
  return {
    model_type: "qwen3_5_moe",
    text_config: {
      vocab_size: 248320, hidden_size: 2048, num_hidden_layers: LAYERS, full_attention_interval: 4,
      num_attention_heads: 16, num_key_value_heads: 2, head_dim: 256,
      linear_num_key_heads: 16, linear_num_value_heads: 32, linear_key_head_dim: 128, linear_value_head_dim: 128,
      linear_conv_kernel_dim: 4, num_experts: 256, num_experts_per_tok: 8, moe_intermediate_size: 512,
      shared_expert_intermediate_size: 512,
    },
    ...(quantized ? { quantization } : {}),
  };
}

const MB = 1e6;

describe("decode bytes per token", () => {
  const config = qwen36Config(true);
  const traffic = decodeTraffic(decodeShape(config), mlxBitsPerWeight(config));

  it("gives each part of a 35B-A3B decode step at 4.5 bits per weight", () => {
    expect(traffic.deltanet / MB).toBeCloseTo(568.4, 1);
    expect(traffic.routedExperts / MB).toBeCloseTo(566.2, 1);
    expect(traffic.lmHead / MB).toBeCloseTo(286.1, 1);
    expect(traffic.attention / MB).toBeCloseTo(153.4, 1);
    expect(traffic.sharedExpert / MB).toBeCloseTo(70.8, 1);
    expect(traffic.router / MB).toBeCloseTo(22.3, 1); // 8-bit router: 8.5 bits per weight
    expect(traffic.deltanetState / MB).toBeCloseTo(125.8, 1);
    expect(traffic.kvPerContextToken).toBe(20480);
  });

  it("totals 1.795 GB at zero context and adds 20,480 bytes per context token", () => {
    expect(Number((decodeBytesPerToken(traffic) / 1e9).toFixed(3))).toBe(1.795);
    expect(decodeBytesPerToken(traffic, 1000) - decodeBytesPerToken(traffic)).toBeCloseTo(20480 * 1000, 3);
  });

  it("counts bf16 weights when the config has no quantization block", () => {
    const bf16 = decodeTraffic(decodeShape(qwen36Config(false)), mlxBitsPerWeight(qwen36Config(false)));
    expect(bf16.routedExperts / traffic.routedExperts).toBeCloseTo(16 / 4.5, 6);
    expect(bf16.router / traffic.router).toBeCloseTo(16 / 8.5, 6);
  });

  it("names the field at fault", () => {
    const broken = qwen36Config(true);
    delete (broken.text_config as Record<string, unknown>).moe_intermediate_size;
    expect(() => decodeShape(broken, "x/config.json")).toThrow(/x\/config\.json.*moe_intermediate_size/);
  });
});

describe("synthetic prompt", () => {
  it("is ((i * 2654435761) mod 2^32) mod vocab, exact for long prompts", () => {
    const vocab = 248320;
    const ids = syntheticPrompt(200_000, vocab);
    for (const i of [0, 1, 2, 3, 4095, 65_537, 131_071, 199_999]) {
      expect(ids[i]).toBe(Number(((BigInt(i) * 2654435761n) % 4294967296n) % BigInt(vocab)));
    }
    expect(ids.slice(0, 3)).toEqual([0, 2654435761 % vocab, 1013904226 % vocab]);
  });
});
