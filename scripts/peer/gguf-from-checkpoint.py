#!/usr/bin/env python3
"""Writes one of our qwen3_5_moe checkpoints (MLX 4/8-bit or HF bf16 folder) as a llama.cpp GGUF of
architecture qwen35moe with the same weights: each tensor is dequantized to float32 and quantized
again (Q4_0 by default), one tensor (or 16 experts) at a time, so memory stays far below the model
size. With --jobs N, N worker processes dequantize and quantize chunks (a tensor, or 16 experts) in
parallel while this process writes them in order, at most 2N chunks in flight; the file is the same
byte for byte whatever N. The GGUF writer and quantizers come from the gguf-py package of the
llama.cpp source that scripts/peer/build-llama-cpp.sh unpacks (needs numpy)."""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import sys
import time
from collections import deque
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

TYPES = ("q4_0", "q8_0", "f16", "f32")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="--type q4_0 keeps the bits per weight of an MLX 4-bit checkpoint: matrices stored at 8 bits "
               "(router, shared-expert gate) become Q8_0, as does the router of an unquantized checkpoint; "
               "all other matrices Q4_0. Vectors (norms, A_log, dt_bias, conv1d) are always F32.")
    p.add_argument("model", help="checkpoint folder (config.json + safetensors)")
    p.add_argument("out", help="GGUF file to write (written as OUT.part, renamed when complete)")
    p.add_argument("--type", choices=TYPES, default="q4_0", help="weight matrix type (default q4_0)")
    p.add_argument("--llama-cpp", default=os.path.expanduser("~/.cache/moelens/llama.cpp"),
                   help="folder of build-llama-cpp.sh, whose src/gguf-py is used (default %(default)s)")
    p.add_argument("--gguf-py", default=None,
                   help="llama.cpp's gguf-py folder, used instead of LLAMA_CPP/src/gguf-py (e.g. the gguf-py folder "
                        "where bench/gpu/llama-cuda.sh unpacked the source)")
    p.add_argument("--name", default=None, help="general.name (default: the folder name)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                   help="worker processes that dequantize and quantize (default: the CPU count, %(default)s); "
                        "each holds one chunk, up to the largest tensor (the embeddings) in float32")
    args = p.parse_args()
    if args.jobs < 1:
        p.error("--jobs must be at least 1")
    return args


# Per-process state: the checkpoint, its plan and each entry's GGML type (set by setup(), in the main
# process and in each worker of the pool).
W: dict = {}


def setup(gguf_py: str, model: str, type_name: str, types: list[int] | None = None) -> None:
    """Opens the checkpoint and plans the tensors; `types` (GGML type numbers) comes from the main
    process so that workers do not repeat its decisions and warnings."""
    if gguf_py not in sys.path:
        sys.path.insert(0, gguf_py)
    import gguf
    from checkpoint_reader import Checkpoint
    from qwen35moe_gguf import TextConfig, plan

    ck = Checkpoint(model)
    cfg = TextConfig.from_json(ck.text, f"{ck.folder}/config.json")
    entries = plan(ck, cfg)
    Q = gguf.GGMLQuantizationType
    if types is None:
        types = [ggml_type(gguf, e, type_name) for e in entries]
    W.update(gguf=gguf, ck=ck, cfg=cfg, entries=entries, types=[Q(t) for t in types])


def ggml_type(gguf, e, type_name: str):
    Q = gguf.GGMLQuantizationType
    if not e.matrix:
        return Q.F32
    wanted = {"q4_0": Q.Q4_0, "q8_0": Q.Q8_0, "f16": Q.F16, "f32": Q.F32}[type_name]
    if wanted == Q.Q4_0 and (e.source_bits == 8 or (e.source_bits is None and e.name.endswith("ffn_gate_inp.weight"))):
        wanted = Q.Q8_0
    block, _ = gguf.GGML_QUANT_SIZES[wanted]
    if e.shape[-1] % block:
        print(f"gguf-from-checkpoint: {e.name} rows of {e.shape[-1]} are not a multiple of {block}; writing F32",
              file=sys.stderr)
        return Q.F32
    return wanted


def quantize_chunk(task: tuple[int, int]):
    """Chunk `c` of entry `n`, dequantized to float32 and quantized to the entry's type: (rows, data)."""
    import numpy as np
    n, c = task
    e, t = W["entries"][n], W["types"][n]
    values = np.ascontiguousarray(e.produce(c), dtype=np.float32)
    if values.shape[1:] != e.shape[1:]:
        raise ValueError(f"{e.name} expects shape {e.shape} from config.json, the checkpoint "
                         f"gives {values.shape}{' per chunk' if e.chunks > 1 else ''}")
    return values.shape[0], W["gguf"].quants.quantize(values, t)


def chunks_in_order(tasks, pool, jobs: int):
    """quantize_chunk of each task, in order: here when there is no pool, else from the pool's workers
    with at most 2 * jobs tasks outstanding (bounded memory)."""
    if pool is None:
        for task in tasks:
            yield quantize_chunk(task)
        return
    pending: deque = deque()
    for task in tasks:
        pending.append(pool.apply_async(quantize_chunk, (task,)))
        if len(pending) >= 2 * jobs:
            yield pending.popleft().get()
    while pending:
        yield pending.popleft().get()


def main() -> None:
    args = parse_args()
    gguf_py = Path(args.gguf_py) if args.gguf_py else Path(args.llama_cpp) / "src" / "gguf-py"
    if not (gguf_py / "gguf" / "__init__.py").is_file():
        sys.exit(f"gguf-from-checkpoint: {gguf_py} has no gguf package; run scripts/peer/build-llama-cpp.sh first"
                 " (or pass --gguf-py)")
    gguf_py = str(gguf_py.resolve())
    setup(gguf_py, args.model, args.type)
    import numpy as np
    from qwen35moe_gguf import ARCH, write_metadata
    gguf, ck, cfg, entries, types = W["gguf"], W["ck"], W["cfg"], W["entries"], W["types"]

    def nbytes(shape, qtype) -> int:
        block, size = gguf.GGML_QUANT_SIZES[qtype]
        return math.prod(shape) // block * size

    file_type = {"q4_0": gguf.LlamaFileType.MOSTLY_Q4_0, "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
                 "f16": gguf.LlamaFileType.MOSTLY_F16, "f32": gguf.LlamaFileType.ALL_F32}[args.type]
    tasks = [(n, c) for n, e in enumerate(entries) for c in range(e.chunks)]
    jobs = min(args.jobs, len(tasks))

    def write(part: Path, pool) -> None:
        writer = gguf.GGUFWriter(part, ARCH)
        write_metadata(writer, cfg, args.name or ck.folder.name, int(file_type))
        for e, t in zip(entries, types):
            writer.add_tensor_info(e.name, e.shape, np.dtype(np.float32), nbytes(e.shape, t), raw_dtype=t)
        writer.write_header_to_file(part)
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        total = sum(nbytes(e.shape, t) for e, t in zip(entries, types))
        written, t0 = 0, time.time()
        results = chunks_in_order(tasks, pool, jobs)
        for n, (e, t) in enumerate(zip(entries, types)):
            pieces, rows = [], 0
            for _ in range(e.chunks):
                r, data = next(results)
                rows += r
                pieces.append(data)
            if rows != e.shape[0]:
                raise ValueError(f"{e.name} expects {e.shape[0]} rows from config.json, the checkpoint gives {rows}")
            data = pieces[0] if len(pieces) == 1 else np.concatenate(pieces)
            writer.write_tensor_data(data)
            written += data.nbytes
            if sys.stderr.isatty() or n % 25 == 0 or n == len(entries) - 1:
                rate = written / max(time.time() - t0, 1e-9) / 1e6
                print(f"[{n + 1}/{len(entries)}] {e.name} {t.name}  {written / 1e9:.2f}/{total / 1e9:.2f} GB  "
                      f"{rate:.0f} MB/s", file=sys.stderr)
        writer.close()

    out = Path(args.out)
    part = out.with_name(out.name + ".part")
    t0 = time.time()
    pool = None
    if jobs > 1:  # each worker opens the checkpoint and plans the tensors itself
        pool = multiprocessing.get_context().Pool(
            jobs, initializer=setup, initargs=(gguf_py, args.model, args.type, [int(t) for t in types]))
    try:
        try:
            write(part, pool)
        finally:
            if pool is not None:
                pool.terminate()  # after an error too: no worker left running
                pool.join()
    except BaseException as e:
        part.unlink(missing_ok=True)  # no half-written GGUF left behind
        if isinstance(e, ValueError):
            sys.exit(f"gguf-from-checkpoint: {e}")
        raise
    os.replace(part, out)
    counts: dict[str, int] = {}
    for t in types:
        counts[t.name] = counts.get(t.name, 0) + 1
    print(json.dumps({"gguf": str(out), "bytes": out.stat().st_size, "tensors": len(entries), "types": counts,
                      "source_layout": ck.layout, "jobs": jobs, "seconds": round(time.time() - t0, 1)}))


if __name__ == "__main__":
    main()
