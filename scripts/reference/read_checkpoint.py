"""Reads a checkpoint folder (official HF layout, text-only or multimodal, single file or sharded; or
the mlx-community layout) into float32 weights under the canonical names of transformers'
Qwen3_5MoeForCausalLM, with the math HF applies: MLX weights dequantized (w = scale*q + bias), experts
re-fused, conv back to [C,1,K] and the five zero-centred norms stored as 1+w turned back into w."""

import json
from pathlib import Path

import numpy as np

import mlx_quant
import st_io
from weights import is_zero_centred_norm

SKIPPED_PREFIXES = ("mtp.", "model.visual.", "vision_tower.")


def read_config(folder: Path) -> tuple[dict, dict]:
    """(whole config.json, text config)."""
    cfg = json.loads((folder / "config.json").read_text())
    return cfg, cfg.get("text_config", cfg)


def read_tensors(folder: Path) -> dict[str, st_io.Tensor]:
    index = folder / "model.safetensors.index.json"
    if index.exists():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    out: dict[str, st_io.Tensor] = {}
    for f in files:
        for name, t in st_io.read(folder / f).items():
            if name in out:
                raise ValueError(f"{folder / f}: tensor {name} appears twice")
            out[name] = t
    return out


def layout_of(names) -> str:
    if any(n.startswith("language_model.model.") for n in names):
        return "mlx"
    return "hf"


def read_checkpoint(folder: Path) -> tuple[dict, dict[str, np.ndarray], str]:
    """(text config, canonical float32 weights, layout name)."""
    folder = Path(folder)
    cfg, text = read_config(folder)
    tensors = read_tensors(folder)
    layout = layout_of(tensors)
    weights = _from_mlx(cfg, tensors) if layout == "mlx" else _from_hf(tensors)
    return text, weights, layout


def _from_hf(tensors: dict[str, st_io.Tensor]) -> dict[str, np.ndarray]:
    out = {}
    for name, t in tensors.items():
        if name.startswith(SKIPPED_PREFIXES):
            continue
        canonical = "model." + name[len("model.language_model.") :] if name.startswith("model.language_model.") else name
        out[canonical] = t.float32()
    return out


def _from_mlx(cfg: dict, tensors: dict[str, st_io.Tensor]) -> dict[str, np.ndarray]:
    quant = cfg.get("quantization") or cfg.get("quantization_config") or {}
    out: dict[str, np.ndarray] = {}
    switch: dict[str, dict[str, np.ndarray]] = {}
    for name, t in tensors.items():
        if name.startswith(SKIPPED_PREFIXES) or name.endswith((".scales", ".biases")):
            continue
        module = name[: -len(".weight")] if name.endswith(".weight") else name
        if module + ".scales" in tensors:
            spec = quant.get(module, quant)
            bits, gs = spec["bits"], spec["group_size"]
            scales = tensors[module + ".scales"]
            implied = mlx_quant.bits_from_shapes(t.data.shape, scales.data.shape, gs)
            if implied != bits:
                raise ValueError(f"{module}: config says {bits} bits (group {gs}) but shapes imply {implied}")
            value = mlx_quant.dequantize(t.data, scales.float32(), tensors[module + ".biases"].float32(), bits)
        else:
            value = t.float32()
        if module == "language_model.lm_head":
            canonical = "lm_head.weight"
        else:
            canonical = name[len("language_model.") :]
            if ".mlp.switch_mlp." in canonical:
                layer, proj = canonical.split(".mlp.switch_mlp.")
                switch.setdefault(layer, {})[proj.split(".")[0]] = value
                continue
        if canonical.endswith("conv1d.weight"):
            value = np.ascontiguousarray(value.transpose(0, 2, 1))
        elif is_zero_centred_norm(canonical):
            value = value - np.float32(1.0)
        out[canonical] = value
    for layer, p in switch.items():
        out[layer + ".mlp.experts.gate_up_proj"] = np.concatenate([p["gate_proj"], p["up_proj"]], axis=1)
        out[layer + ".mlp.experts.down_proj"] = p["down_proj"]
    return out
