"""Writes the synthetic checkpoint that scripts/synth-checkpoint.ts plans, on machines without Node:
`npx tsx scripts/synth-checkpoint.ts --manifest plan.json` where Node is, then
`python3 scripts/synth_checkpoint.py plan.json OUT_DIR [--seed N]` there. Same files, tensor names,
dtypes, shapes, sharding and config; values drawn from the same distributions with numpy's generator
(so not byte-identical to the Node writer): shard i from its own stream (seed, i), so the shards are
written in parallel (--jobs) and the result does not depend on the number of jobs. Needs only numpy;
streams one tensor slice at a time."""
import argparse
import json
import multiprocessing
import os
import struct
import sys
import zlib

import numpy as np

SLICE = 64 << 20  # bytes generated at a time


def bf16(x):
    """float32 array -> bfloat16 bits (round to nearest even), as uint16."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def nbytes(t):
    return numel(t["shape"]) * (4 if t["dtype"] == "U32" else 2)


def code_std(bits):
    levels = 2**bits
    return np.sqrt((levels * levels - 1) / 12.0)


def scales_for(rng_by_module, module, bits, count, weight_std):
    """Per-group scales ±(0.75..1.25)·std/std(codes), one stream per module (scales and biases agree)."""
    rng = rng_by_module.setdefault(module, np.random.default_rng(zlib.crc32(module.encode())))
    state = rng.bit_generator.state
    mag = rng.uniform(0.75, 1.25, count) * weight_std / code_std(bits)
    sign = np.where(rng.integers(0, 2, count) == 0, 1.0, -1.0)
    rng.bit_generator.state = state  # the biases read the same draws
    return (mag * sign).astype(np.float32)


def write_tensor(f, t, rng, scale_rngs, weight_std):
    fill = t["fill"]
    n = numel(t["shape"])
    if fill["kind"] == "codes":
        remaining = nbytes(t)
        while remaining:
            k = min(remaining, SLICE)
            f.write(rng.bytes(k))
            remaining -= k
        return
    if fill["kind"] in ("scales", "biases"):
        s = scales_for(scale_rngs, fill["module"], fill["bits"], n, weight_std)
        s = bf16(s).view(np.uint16)
        s_f = (s.astype(np.uint32) << 16).view(np.float32)  # the stored (rounded) scale
        values = s_f if fill["kind"] == "scales" else -s_f * (2 ** fill["bits"] - 1) / 2
        f.write(bf16(values).tobytes())
        return
    u = rng.uniform(fill["low"], fill["high"], n)
    f.write(bf16(np.log(u) if fill["kind"] == "log-uniform" else u).tobytes())


def shard_header(shard):
    header = {"__metadata__": {"format": "mlx"}}
    offset = 0
    for t in shard["tensors"]:
        size = nbytes(t)
        header[t["name"]] = {"dtype": t["dtype"], "shape": t["shape"], "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":"))
    return text + " " * ((8 - (8 + len(text)) % 8) % 8), offset


def write_shard(job):
    plan, index, out, seed = job
    shard = plan["shards"][index]
    rng = np.random.default_rng([seed, index])
    text, size = shard_header(shard)
    path = os.path.join(out, shard["file"])
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text.encode())
        scale_rngs = {}
        for t in shard["tensors"]:
            write_tensor(f, t, rng, scale_rngs, plan["weightStd"])
    print(f"wrote {path} ({size / 1e9:.2f} GB, {len(shard['tensors'])} tensors)", flush=True)
    return size


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("manifest")
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=os.cpu_count(), help="shards written at once (default: the CPU count)")
    args = ap.parse_args()
    plan = json.load(open(args.manifest))
    os.makedirs(args.out, exist_ok=True)
    jobs = [(plan, i, args.out, args.seed) for i in range(len(plan["shards"]))]
    with multiprocessing.Pool(max(1, min(args.jobs, len(jobs)))) as pool:
        total = sum(pool.map(write_shard, jobs))
    weight_map = {t["name"]: shard["file"] for shard in plan["shards"] for t in shard["tensors"]}
    if len(plan["shards"]) > 1:
        with open(os.path.join(args.out, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, f)
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(plan["config"], f, indent=2)
    with open(os.path.join(args.out, "generation_config.json"), "w") as f:
        json.dump(plan["generationConfig"], f, indent=2)
    print(f"{args.out}: {plan['preset']}, {total / 1e9:.2f} GB", flush=True)


if __name__ == "__main__":
    sys.exit(main())
