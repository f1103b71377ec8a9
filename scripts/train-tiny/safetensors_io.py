"""Reading and writing safetensors files with numpy alone (no torch, no safetensors package).

bf16 tensors are held as numpy uint16 arrays of raw bfloat16 bits; `to_bf16_bits` and
`bf16_bits_to_f32` convert (round to nearest even, as torch does).
"""

import json
import os
import struct

import numpy as np

_DTYPES = {"BF16": np.uint16, "F32": np.float32, "U32": np.uint32, "F16": np.float16, "I32": np.int32}


class Bf16(np.ndarray):
    """Marks a uint16 array as bfloat16 bits (so the writer records dtype BF16)."""


def bf16(bits: np.ndarray) -> np.ndarray:
    if bits.dtype != np.uint16:
        raise TypeError(f"bf16(): expected uint16 bits, got {bits.dtype}")
    return bits.view(Bf16)


def to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits (uint16), round to nearest even."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = u + 0x7FFF + ((u >> 16) & 1)
    return bf16((u >> 16).astype(np.uint16))


def bf16_bits_to_f32(bits: np.ndarray) -> np.ndarray:
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def _dtype_name(a: np.ndarray) -> str:
    if isinstance(a, Bf16):
        return "BF16"
    for name, dt in _DTYPES.items():
        if name != "BF16" and a.dtype == dt:
            return name
    raise TypeError(f"unsupported dtype {a.dtype} (wrap uint16 bfloat16 bits with bf16())")


def write_safetensors(path: str, tensors: dict, metadata: dict | None = None) -> int:
    """Writes tensors (name -> array) in name order; returns the file size."""
    header = {"__metadata__": metadata or {"format": "pt"}}
    offset = 0
    names = sorted(tensors)
    for name in names:
        a = tensors[name]
        n = a.nbytes
        header[name] = {"dtype": _dtype_name(a), "shape": list(a.shape), "data_offsets": [offset, offset + n]}
        offset += n
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * ((8 - len(blob) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for name in names:
            f.write(np.ascontiguousarray(tensors[name]).tobytes())
    return 8 + len(blob) + offset


def read_safetensors(path: str) -> dict:
    """name -> numpy array (BF16 as Bf16-marked uint16 bits)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] not in _DTYPES:
            raise ValueError(f"{path}: tensor {name} has unsupported dtype {info['dtype']}")
        start, end = info["data_offsets"]
        a = np.frombuffer(data[base + start : base + end], dtype=_DTYPES[info["dtype"]]).reshape(info["shape"])
        out[name] = bf16(a.copy()) if info["dtype"] == "BF16" else a.copy()
    return out


def write_sharded(directory: str, tensors: dict, max_shard_bytes: int) -> list:
    """Writes model.safetensors, or model-0000k-of-0000n.safetensors shards with an index when the
    tensors exceed max_shard_bytes. Returns the file names written."""
    names = sorted(tensors)
    shards, current, size = [], [], 0
    for name in names:
        n = tensors[name].nbytes
        if current and size + n > max_shard_bytes:
            shards.append(current)
            current, size = [], 0
        current.append(name)
        size += n
    shards.append(current)
    if len(shards) == 1:
        write_safetensors(os.path.join(directory, "model.safetensors"), tensors)
        return ["model.safetensors"]
    files, weight_map, total = [], {}, 0
    for i, shard in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        write_safetensors(os.path.join(directory, fname), {k: tensors[k] for k in shard})
        files.append(fname)
        for k in shard:
            weight_map[k] = fname
            total += tensors[k].nbytes
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    with open(os.path.join(directory, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=1, sort_keys=True)
        f.write("\n")
    return files + ["model.safetensors.index.json"]


def read_checkpoint(directory: str) -> dict:
    """All tensors of a checkpoint directory (single file or sharded)."""
    index = os.path.join(directory, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    out = {}
    for fname in files:
        out.update(read_safetensors(os.path.join(directory, fname)))
    return out
