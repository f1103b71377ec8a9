"""Our own MLX affine quantizer and the HF -> mlx-community conversion of a qwen3_5_moe checkpoint
(docs/model.md §4.1-4.3), with numpy alone.

Layout written: `language_model.model.*` / `language_model.lm_head.*`; experts split into
`mlp.switch_mlp.{gate,up,down}_proj`; conv1d as [C, K, 1]; the five zero-centred norms stored as
(1 + w); every Linear/Embedding whose input dim is a multiple of the group size quantized to 4 bits
(group 64), `mlp.gate` and `mlp.shared_expert_gate` to 8 bits. `mlx_to_hf_float32` inverts it on
dequantized weights, for the transformers reference of the quantized model.
"""

import copy

import numpy as np

from safetensors_io import bf16, bf16_bits_to_f32, to_bf16_bits

GROUP_SIZE = 64
HF_PREFIX = "model.language_model."
MLX_PREFIX = "language_model.model."
ZERO_CENTRED_NORMS = (".input_layernorm.weight", ".post_attention_layernorm.weight", ".q_norm.weight", ".k_norm.weight")
EIGHT_BIT_MODULES = (".mlp.gate", ".mlp.shared_expert_gate")


def quantize(w: np.ndarray, bits: int, group_size: int = GROUP_SIZE):
    """w [..., out, in] float32 -> (packed uint32 [..., out, in*bits/32], scales, biases as bf16 bits
    [..., out, in/group_size]). Dequantized: scale * q + bias. The codes q are chosen against the
    bf16-rounded scale and bias that are stored."""
    if w.shape[-1] % group_size:
        raise ValueError(f"quantize: input dim {w.shape[-1]} is not a multiple of the group size {group_size}")
    w = np.asarray(w, dtype=np.float32)
    g = w.reshape(*w.shape[:-1], w.shape[-1] // group_size, group_size)
    n_bins = float(2**bits - 1)
    w_min, w_max = g.min(-1), g.max(-1)
    scale = np.maximum((w_max - w_min) / n_bins, 1e-7).astype(np.float32)
    low_edge = np.abs(w_min) > np.abs(w_max)
    edge = np.where(low_edge, w_min, w_max)
    scale = np.where(low_edge, scale, -scale)
    # Make 0.0 exactly representable: snap the edge onto the grid through zero.
    q0 = np.round(edge / scale)
    nonzero = q0 != 0
    scale = np.where(nonzero, edge / np.where(nonzero, q0, 1), scale).astype(np.float32)
    bias = np.where(nonzero, edge, 0).astype(np.float32)
    scale_bits, bias_bits = to_bf16_bits(scale), to_bf16_bits(bias)
    s = bf16_bits_to_f32(scale_bits)[..., None]
    b = bf16_bits_to_f32(bias_bits)[..., None]
    q = np.clip(np.round((g - b) / s), 0, n_bins).astype(np.uint32)
    per_word = 32 // bits
    q = q.reshape(*w.shape[:-1], w.shape[-1] // per_word, per_word)
    packed = np.zeros(q.shape[:-1], dtype=np.uint32)
    for i in range(per_word):
        packed |= q[..., i] << np.uint32(bits * i)
    return packed, scale_bits, bias_bits


def dequantize(packed: np.ndarray, scales: np.ndarray, biases: np.ndarray, group_size: int = GROUP_SIZE) -> np.ndarray:
    """Inverse of quantize (float32). The bit width follows from the shapes (§4.1 cross-check)."""
    bits = 32 * packed.shape[-1] // (scales.shape[-1] * group_size)
    if bits not in (4, 8):
        raise ValueError(f"dequantize: shapes {packed.shape} / {scales.shape} imply {bits} bits")
    per_word = 32 // bits
    mask = np.uint32(2**bits - 1)
    q = np.stack([(packed >> np.uint32(bits * i)) & mask for i in range(per_word)], axis=-1)
    cols = packed.shape[-1] * per_word
    q = q.reshape(*packed.shape[:-1], cols // group_size, group_size).astype(np.float32)
    s = bf16_bits_to_f32(scales)[..., None]
    b = bf16_bits_to_f32(biases)[..., None]
    return (s * q + b).reshape(*packed.shape[:-1], cols)


def _bits_for(module: str) -> int:
    return 8 if module.endswith(EIGHT_BIT_MODULES) else 4


def hf_to_mlx(hf: dict, config: dict):
    """HF-layout tensors (bf16 bits, official names) -> (MLX tensors, MLX config.json dict)."""
    text = config["text_config"]
    out = {}
    quant = {"group_size": GROUP_SIZE, "bits": 4, "mode": "affine"}

    def put_quantized(module: str, w: np.ndarray):
        bits = _bits_for(module)
        packed, scales, biases = quantize(w, bits)
        out[module + ".weight"] = packed
        out[module + ".scales"] = scales
        out[module + ".biases"] = biases
        if bits != 4:
            quant[module] = {"group_size": GROUP_SIZE, "bits": bits}

    for name, bits16 in sorted(hf.items()):
        w = bf16_bits_to_f32(bits16)
        if name == "lm_head.weight":
            put_quantized("language_model.lm_head", w)
            continue
        if not name.startswith(HF_PREFIX):
            raise ValueError(f"hf_to_mlx: unexpected tensor '{name}' (expected the prefix {HF_PREFIX})")
        mlx = MLX_PREFIX + name[len(HF_PREFIX) :]
        if name.endswith(".mlp.experts.gate_up_proj"):
            base = mlx[: -len("experts.gate_up_proj")] + "switch_mlp."
            inter = w.shape[1] // 2
            put_quantized(base + "gate_proj", w[:, :inter, :])
            put_quantized(base + "up_proj", w[:, inter:, :])
        elif name.endswith(".mlp.experts.down_proj"):
            put_quantized(mlx[: -len("experts.down_proj")] + "switch_mlp.down_proj", w)
        elif name.endswith(".conv1d.weight"):
            out[mlx] = bf16(np.ascontiguousarray(bits16.transpose(0, 2, 1)))
        elif name.endswith(ZERO_CENTRED_NORMS) or name == HF_PREFIX + "norm.weight":
            # mlx-lm adds 1.0 at conversion, in the weight's dtype.
            out[mlx] = to_bf16_bits(w + np.float32(1.0))
        elif w.ndim == 2 and name.endswith(".weight") and w.shape[-1] % GROUP_SIZE == 0:
            put_quantized(mlx[: -len(".weight")], w)
        else:
            out[mlx] = bits16  # A_log, dt_bias, linear_attn.norm, unquantizable matrices

    mlx_config = copy.deepcopy(config)
    mlx_config["quantization"] = quant
    mlx_config["quantization_config"] = copy.deepcopy(quant)
    if text.get("tie_word_embeddings"):
        raise ValueError("hf_to_mlx: tied embeddings are not expected for qwen3_5_moe")
    return out, mlx_config


def mlx_to_hf_float32(mlx: dict) -> dict:
    """MLX tensors -> HF names (official layout) with dequantized float32 values; norms back to w."""
    out = {}
    modules = sorted({k[: -len(".scales")] for k in mlx if k.endswith(".scales")})
    dense = {k: v for k, v in mlx.items() if not any(k.startswith(m + ".") for m in modules)}
    values = {m + ".weight": dequantize(mlx[m + ".weight"], mlx[m + ".scales"], mlx[m + ".biases"]) for m in modules}
    values.update({k: bf16_bits_to_f32(v) if v.dtype == np.uint16 else v.astype(np.float32) for k, v in dense.items()})

    switch = {}
    for name, w in values.items():
        if name == "language_model.lm_head.weight":
            out["lm_head.weight"] = w
            continue
        hf = HF_PREFIX + name[len(MLX_PREFIX) :]
        if ".mlp.switch_mlp." in name:
            layer = hf.split(".mlp.switch_mlp.")[0]
            switch.setdefault(layer, {})[name.split(".mlp.switch_mlp.")[1]] = w
        elif name.endswith(".conv1d.weight"):
            out[hf] = np.ascontiguousarray(w.transpose(0, 2, 1))
        elif name.endswith(ZERO_CENTRED_NORMS) or hf == HF_PREFIX + "norm.weight":
            out[hf] = w - np.float32(1.0)
        else:
            out[hf] = w
    for layer, parts in switch.items():
        out[layer + ".mlp.experts.gate_up_proj"] = np.concatenate([parts["gate_proj.weight"], parts["up_proj.weight"]], axis=1)
        out[layer + ".mlp.experts.down_proj"] = parts["down_proj.weight"]
    return out
