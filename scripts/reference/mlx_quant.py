"""MLX affine quantization (docs/model.md §4.1), written from the format description.

A weight [..., out, in] is split along `in` into groups of `group_size`; each group stores a scale s
and a bias b (bf16 here) and unsigned codes q in [0, 2^bits - 1] so that w ~= s*q + b. Codes are packed
into uint32 words least-significant first: element i of a word occupies bits [bits*i, bits*(i+1)).
"""

import numpy as np

from st_io import round_bf16


def quantize(w: np.ndarray, bits: int, group_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Returns (packed uint32 [..., in*bits/32], scales [..., in/gs], biases [..., in/gs]); scales and
    biases are float32 values already rounded to bf16, as they will be stored."""
    if bits not in (4, 8):
        raise ValueError(f"bits must be 4 or 8, got {bits}")
    if w.shape[-1] % group_size:
        raise ValueError(f"group size {group_size} does not divide the input dim {w.shape[-1]}")
    levels = 2**bits - 1
    g = w.astype(np.float32).reshape(*w.shape[:-1], w.shape[-1] // group_size, group_size)
    w_min = g.min(-1)
    w_max = g.max(-1)
    scale = np.maximum((w_max - w_min) / levels, np.float32(1e-7)).astype(np.float32)
    # The sign rule: the edge of larger magnitude becomes the bias; when that edge is the maximum the
    # scale is negative, so codes still count up from the bias.
    min_is_edge = np.abs(w_min) > np.abs(w_max)
    edge = np.where(min_is_edge, w_min, w_max)
    scale = np.where(min_is_edge, scale, -scale)
    # Snap so that 0.0 is exactly representable.
    q0 = np.rint(edge / scale)
    nonzero = q0 != 0
    scale = np.where(nonzero, edge / np.where(nonzero, q0, 1), scale).astype(np.float32)
    bias = np.where(nonzero, edge, 0).astype(np.float32)
    # Stored values are bf16; choose codes against the stored scale and bias.
    scale = round_bf16(scale)
    bias = round_bf16(bias)
    q = np.clip(np.rint((g - bias[..., None]) / scale[..., None]), 0, levels).astype(np.uint32)
    return pack(q.reshape(w.shape), bits), scale, bias


def pack(q: np.ndarray, bits: int) -> np.ndarray:
    per_word = 32 // bits
    q = q.astype(np.uint32).reshape(*q.shape[:-1], q.shape[-1] // per_word, per_word)
    shifts = (np.arange(per_word, dtype=np.uint32) * bits).astype(np.uint32)
    return np.bitwise_or.reduce(q << shifts, axis=-1).astype(np.uint32)


def unpack(packed: np.ndarray, bits: int) -> np.ndarray:
    per_word = 32 // bits
    shifts = (np.arange(per_word, dtype=np.uint32) * bits).astype(np.uint32)
    q = (packed[..., None] >> shifts) & np.uint32(2**bits - 1)
    return q.reshape(*packed.shape[:-1], packed.shape[-1] * per_word)


def dequantize(packed: np.ndarray, scales: np.ndarray, biases: np.ndarray, bits: int) -> np.ndarray:
    """w = scale * q + bias in float32."""
    q = unpack(packed, bits).astype(np.float32)
    groups = scales.shape[-1]
    gs = q.shape[-1] // groups
    q = q.reshape(*q.shape[:-1], groups, gs)
    w = q * scales[..., None].astype(np.float32) + biases[..., None].astype(np.float32)
    return w.reshape(*packed.shape[:-1], groups * gs)


def bits_from_shapes(packed_shape, scales_shape, group_size: int) -> float:
    """The bit width that the stored shapes imply for a group size (§4.1 cross-check)."""
    return 32 * packed_shape[-1] / (scales_shape[-1] * group_size)
