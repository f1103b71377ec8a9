"""Minimal safetensors reading and writing with numpy only (so that checkpoints can be written
without torch), including bfloat16, which numpy lacks: bf16 tensors are handled as their uint16
bit patterns and widened to float32 on read."""

import json
import struct
from pathlib import Path

import numpy as np

# safetensors dtype name -> numpy dtype of the stored bits
_STORED = {
    "BF16": np.dtype("<u2"),
    "F16": np.dtype("<f2"),
    "F32": np.dtype("<f4"),
    "U32": np.dtype("<u4"),
    "I32": np.dtype("<i4"),
}


def to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns, rounding to nearest even (what torch's .bfloat16() does)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounding = ((u >> 16) & 1) + np.uint32(0x7FFF)
    return ((u + rounding) >> 16).astype(np.uint16)


def bf16_bits_to_f32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def round_bf16(x: np.ndarray) -> np.ndarray:
    """The float32 value of x rounded to bfloat16."""
    return bf16_bits_to_f32(to_bf16_bits(x))


class Tensor:
    """A tensor as stored: a safetensors dtype name and an array of the stored bits."""

    def __init__(self, dtype: str, data: np.ndarray):
        if dtype not in _STORED:
            raise ValueError(f"unsupported dtype {dtype}")
        if data.dtype != _STORED[dtype]:
            raise ValueError(f"{dtype} tensor needs {_STORED[dtype]} data, got {data.dtype}")
        self.dtype = dtype
        self.data = np.ascontiguousarray(data)

    @staticmethod
    def bf16(x: np.ndarray) -> "Tensor":
        return Tensor("BF16", to_bf16_bits(x))

    @staticmethod
    def f32(x: np.ndarray) -> "Tensor":
        return Tensor("F32", np.asarray(x, dtype="<f4"))

    @staticmethod
    def i32(x) -> "Tensor":
        return Tensor("I32", np.asarray(x, dtype="<i4"))

    def float32(self) -> np.ndarray:
        if self.dtype == "BF16":
            return bf16_bits_to_f32(self.data)
        if self.dtype in ("F16", "F32"):
            return self.data.astype(np.float32)
        raise ValueError(f"{self.dtype} tensor is not floating point")

    @property
    def nbytes(self) -> int:
        return self.data.nbytes


def write(path: Path, tensors: dict[str, Tensor]) -> None:
    """Writes tensors sorted by name, header padded with spaces to a multiple of 8 bytes."""
    header: dict = {"__metadata__": {"format": "pt"}}
    offset = 0
    names = sorted(tensors)
    for name in names:
        t = tensors[name]
        header[name] = {"dtype": t.dtype, "shape": list(t.data.shape), "data_offsets": [offset, offset + t.nbytes]}
        offset += t.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * ((8 - len(raw) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for name in names:
            f.write(tensors[name].data.tobytes())


def read(path: Path) -> dict[str, Tensor]:
    blob = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8 : 8 + n])
    base = 8 + n
    out: dict[str, Tensor] = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        if entry["dtype"] not in _STORED:
            raise ValueError(f"{path}: tensor {name} has unsupported dtype {entry['dtype']}")
        start, end = entry["data_offsets"]
        data = np.frombuffer(blob[base + start : base + end], dtype=_STORED[entry["dtype"]])
        out[name] = Tensor(entry["dtype"], data.reshape(entry["shape"]))
    return out
