"""Reads a qwen3_5_moe checkpoint folder (official HF layout or mlx-community layout, see
docs/checkpoints.md) tensor by tensor as float32, dequantizing MLX affine weights, without loading
the whole model: every tensor is a memory map into its safetensors shard."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

_NUMPY_DTYPES = {"BF16": np.uint16, "F16": np.float16, "F32": np.float32, "U32": np.uint32}


class SafetensorsFile:
    def __init__(self, path: Path):
        self.path = path
        with open(path, "rb") as f:
            (header_len,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(header_len))
        header.pop("__metadata__", None)
        self.entries: dict[str, dict] = header
        self._data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + header_len)

    def raw(self, name: str) -> tuple[str, np.ndarray]:
        """The stored dtype name and a read-only view of the tensor (BF16 as uint16)."""
        e = self.entries[name]
        if e["dtype"] not in _NUMPY_DTYPES:
            raise ValueError(f"{self.path}: tensor {name} has dtype {e['dtype']}, not one of {list(_NUMPY_DTYPES)}")
        start, end = e["data_offsets"]
        return e["dtype"], self._data[start:end].view(_NUMPY_DTYPES[e["dtype"]]).reshape(e["shape"])


def to_float32(dtype: str, values: np.ndarray) -> np.ndarray:
    if dtype == "BF16":
        return (values.astype(np.uint32) << 16).view(np.float32)
    if dtype in ("F16", "F32"):
        return values.astype(np.float32)
    raise ValueError(f"cannot read dtype {dtype} as floating point")


class Checkpoint:
    """Tensors of one checkpoint folder, addressed by their name below the text model's prefix
    (e.g. "layers.0.mlp.gate"), with the model's text config."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        config_path = self.folder / "config.json"
        if not config_path.is_file():
            raise FileNotFoundError(f"{config_path}: missing (is {self.folder} a checkpoint folder?)")
        self.config_json = json.loads(config_path.read_text())
        self.text = self.config_json.get("text_config", self.config_json)
        self.quantization = self.config_json.get("quantization") or self.config_json.get("quantization_config") or {}

        index = self.folder / "model.safetensors.index.json"
        if index.is_file():
            shard_names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        else:
            shard_names = ["model.safetensors"]
        self._tensor_file: dict[str, SafetensorsFile] = {}
        for shard in shard_names:
            f = SafetensorsFile(self.folder / shard)
            for name in f.entries:
                self._tensor_file[name] = f

        if "language_model.model.embed_tokens.weight" in self._tensor_file:
            self.layout, self.prefix, self.lm_head = "mlx", "language_model.model.", "language_model.lm_head"
        elif "model.language_model.embed_tokens.weight" in self._tensor_file:
            self.layout, self.prefix, self.lm_head = "hf", "model.language_model.", "lm_head"
        elif "model.embed_tokens.weight" in self._tensor_file:
            self.layout, self.prefix, self.lm_head = "hf", "model.", "lm_head"
        else:
            raise ValueError(f"{self.folder}: no embed_tokens.weight under a known prefix (language_model.model., model.language_model., model.)")
        # HF conv1d is [C, 1, K] and its five zero-centred norms are stored as w (applied as 1 + w);
        # MLX conv1d is [C, K, 1] with (1 + w) stored (docs/checkpoints.md).
        conv = next((n for n in self._tensor_file if n.endswith("linear_attn.conv1d.weight")), None)
        self.norms_zero_centred = conv is not None and self._shape(conv)[1] == 1

    def _shape(self, full_name: str) -> list[int]:
        return self._tensor_file[full_name].entries[full_name]["shape"]

    def _full(self, name: str) -> str:
        return name if name.startswith(self.lm_head) else self.prefix + name

    def has(self, name: str) -> bool:
        full = self._full(name)
        return full in self._tensor_file or full + ".weight" in self._tensor_file

    def bits(self, module: str) -> int | None:
        """Bits of an MLX-quantized module, or None when it is stored unquantized."""
        full = self._full(module)
        if full + ".scales" not in self._tensor_file:
            return None
        override = self.quantization.get(full)
        bits = (override or self.quantization).get("bits")
        if bits is None:  # no quantization block in config.json: assume MLX's default group size 64
            packed_columns = self._shape(full + ".weight")[-1]
            bits = packed_columns * 32 // (self._shape(full + ".scales")[-1] * 64)
        if bits not in (4, 8):
            raise ValueError(f"{self.folder}/config.json: quantization bits for {full} is {bits!r}, expected 4 or 8")
        return int(bits)

    def weight(self, module: str, first: int = 0, count: int | None = None) -> np.ndarray:
        """Module `module`'s weight as float32 (dequantized if MLX-quantized); for stacked expert
        tensors, only experts [first, first + count) along the leading axis."""
        full = self._full(module)
        name = full + ".weight" if full + ".weight" in self._tensor_file else full
        if name not in self._tensor_file:
            raise KeyError(f"{self.folder}: tensor {name} is missing")
        dtype, w = self._tensor_file[name].raw(name)
        if count is not None:
            w = w[first:first + count]
        bits = self.bits(module)
        if bits is None:
            return to_float32(dtype, w)
        return self._dequantize(full, w, bits, first, count)

    def _dequantize(self, full: str, packed: np.ndarray, bits: int, first: int, count: int | None) -> np.ndarray:
        sdt, scales = self._tensor_file[full + ".scales"].raw(full + ".scales")
        bdt, biases = self._tensor_file[full + ".biases"].raw(full + ".biases")
        if count is not None:
            scales, biases = scales[first:first + count], biases[first:first + count]
        columns = packed.shape[-1] * 32 // bits
        if columns % scales.shape[-1]:
            raise ValueError(f"{self.folder}: {full} has {columns} columns at {bits} bits, not a multiple of {scales.shape[-1]} groups")
        group = columns // scales.shape[-1]
        as_bytes = np.ascontiguousarray(packed).view(np.uint8)  # little-endian: element j of a word is in byte j*bits/8
        if bits == 4:
            q = np.empty((*as_bytes.shape, 2), dtype=np.uint8)
            np.bitwise_and(as_bytes, 0x0F, out=q[..., 0])
            np.right_shift(as_bytes, 4, out=q[..., 1])
        else:
            q = as_bytes
        values = q.reshape(*packed.shape[:-1], columns // group, group).astype(np.float32)
        values *= to_float32(sdt, scales)[..., None]
        values += to_float32(bdt, biases)[..., None]
        return values.reshape(*packed.shape[:-1], columns)
