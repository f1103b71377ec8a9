"""Writes a model's weights in the official Hugging Face layout and in the mlx-community layout
(docs/model.md §2.2 and §4)."""

import json
from pathlib import Path

import numpy as np

import mlx_quant
import st_io
from specs import FixtureSpec, Quant
from weights import is_zero_centred_norm, mtp_shapes

ROUTER_SUFFIXES = ("mlp.gate", "mlp.shared_expert_gate")


def hf_config(spec: FixtureSpec) -> dict:
    text = dict(spec.text_config)
    if spec.top_level.endswith("_text"):
        extra = dict(spec.extra_config)
        return {"architectures": extra.pop("architectures"), **text, **extra}
    cfg: dict = {
        "architectures": ["Qwen3_5MoeForConditionalGeneration"],
        "model_type": "qwen3_5_moe",
        "text_config": text,
        "tie_word_embeddings": text["tie_word_embeddings"],
        "eos_token_id": text["eos_token_id"],
        **spec.extra_config,
    }
    if spec.vision_config:
        cfg["vision_config"] = spec.vision_config
    return cfg


def hf_name(canonical: str, top_level: str) -> str:
    if top_level == "qwen3_5_moe" and canonical.startswith("model."):
        return "model.language_model." + canonical[len("model.") :]
    return canonical


def hf_tensors(spec: FixtureSpec, weights: dict[str, np.ndarray], rng: np.random.Generator) -> dict[str, st_io.Tensor]:
    """BF16 except the names listed in spec.hf_f32 (kept at full float32 precision)."""
    out: dict[str, st_io.Tensor] = {}
    for name, w in weights.items():
        stored = st_io.Tensor.f32(w) if name.endswith(spec.hf_f32) and spec.hf_f32 else st_io.Tensor.bf16(w)
        out[hf_name(name, spec.top_level)] = stored
    if spec.hf_extra_mtp:
        for name, shape in mtp_shapes(spec.text_config).items():
            out[name] = st_io.Tensor.bf16(rng.normal(0.0, 0.1, shape).astype(np.float32))
    return out


def write_hf(spec: FixtureSpec, weights: dict[str, np.ndarray], folder: Path, rng: np.random.Generator) -> dict[str, st_io.Tensor]:
    folder.mkdir(parents=True, exist_ok=True)
    tensors = hf_tensors(spec, weights, rng)
    (folder / "config.json").write_text(json.dumps(hf_config(spec), indent=2) + "\n")
    if spec.hf_shards == 1:
        st_io.write(folder / "model.safetensors", tensors)
        return tensors
    # Split the sorted names into shards of about equal bytes (a layer may straddle two shards).
    names = sorted(tensors)
    total = sum(tensors[n].nbytes for n in names)
    shard_of: dict[str, int] = {}
    acc = 0
    for n in names:
        shard_of[n] = min(spec.hf_shards - 1, acc * spec.hf_shards // total)
        acc += tensors[n].nbytes
    weight_map = {}
    for s in range(spec.hf_shards):
        file = f"model-{s + 1:05d}-of-{spec.hf_shards:05d}.safetensors"
        st_io.write(folder / file, {n: tensors[n] for n in names if shard_of[n] == s})
        weight_map.update({n: file for n in names if shard_of[n] == s})
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    return tensors


def mlx_module(canonical: str) -> str:
    """The mlx-community module path of a canonical parameter (without .weight)."""
    if canonical == "lm_head.weight":
        return "language_model.lm_head"
    path = "language_model." + canonical
    return path[: -len(".weight")] if path.endswith(".weight") else path


def quant_for(module: str, spec: FixtureSpec) -> Quant:
    assert spec.mlx
    for suffix, q in spec.mlx.overrides:
        if module == suffix or module.endswith("." + suffix):
            return q
    return spec.mlx.default


def mlx_tensors(spec: FixtureSpec, hf_values: dict[str, np.ndarray]) -> tuple[dict[str, st_io.Tensor], dict]:
    """Converts the HF stored values (float32) the way mlx-lm's sanitize + quantize would: experts split
    and stacked, conv [C,K,1], the five zero-centred norms stored as 1+w, every matrix quantized."""
    assert spec.mlx
    out: dict[str, st_io.Tensor] = {}
    overrides: dict[str, dict] = {}

    def put_quantized(module: str, w: np.ndarray) -> None:
        q = quant_for(module, spec)
        packed, scales, biases = mlx_quant.quantize(w, q.bits, q.group_size)
        out[module + ".weight"] = st_io.Tensor("U32", packed)
        out[module + ".scales"] = st_io.Tensor.bf16(scales)
        out[module + ".biases"] = st_io.Tensor.bf16(biases)
        if q != spec.mlx.default:
            overrides[module] = {"group_size": q.group_size, "bits": q.bits}

    for name, w in hf_values.items():
        if name.endswith("mlp.experts.gate_up_proj"):
            base = mlx_module(name)[: -len("experts.gate_up_proj")] + "switch_mlp."
            inter = w.shape[1] // 2
            put_quantized(base + "gate_proj", w[:, :inter, :])
            put_quantized(base + "up_proj", w[:, inter:, :])
        elif name.endswith("mlp.experts.down_proj"):
            put_quantized(mlx_module(name)[: -len("experts.down_proj")] + "switch_mlp.down_proj", w)
        elif name.endswith("conv1d.weight"):
            out[mlx_module(name) + ".weight"] = st_io.Tensor.bf16(np.ascontiguousarray(w.transpose(0, 2, 1)))
        elif w.ndim == 1:
            value = 1.0 + w if is_zero_centred_norm(name) else w
            key = mlx_module(name) + (".weight" if name.endswith(".weight") else "")
            out[key] = st_io.Tensor.bf16(value.astype(np.float32))
        else:
            put_quantized(mlx_module(name), w)
    d = spec.mlx.default
    quantization = {"group_size": d.group_size, "bits": d.bits, "mode": "affine", **dict(sorted(overrides.items()))}
    return out, quantization


def write_mlx(spec: FixtureSpec, hf_values: dict[str, np.ndarray], folder: Path) -> dict[str, st_io.Tensor]:
    folder.mkdir(parents=True, exist_ok=True)
    tensors, quantization = mlx_tensors(spec, hf_values)
    cfg = hf_config(spec)
    cfg["quantization"] = quantization
    cfg["quantization_config"] = quantization
    (folder / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    st_io.write(folder / "model.safetensors", tensors)
    return tensors
