#!/usr/bin/env python3
"""Step 1 of the reference generator (numpy only, runs anywhere): writes each fixture's tiny random
model as checkpoint folders <fixtures>/<name>/hf and, where the spec has one, <name>/mlx.

Then reads every folder back with read_checkpoint.py and checks it against the weights it was made
from: HF exactly, MLX within each group's quantization step."""

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from read_checkpoint import read_checkpoint  # noqa: E402
from specs import FIXTURES, FixtureSpec  # noqa: E402
from weights import is_zero_centred_norm, random_weights  # noqa: E402
from write_layouts import write_hf, write_mlx  # noqa: E402


def folder_size(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def make(spec: FixtureSpec, root: Path) -> None:
    masters = random_weights(spec.text_config, spec.seed)
    rng = np.random.default_rng(spec.seed + 1000)
    hf_dir = root / spec.name / "hf"
    write_hf(spec, masters, hf_dir, rng)
    text, hf_values, layout = read_checkpoint(hf_dir)
    assert layout == "hf" and all(text[k] == v for k, v in spec.text_config.items())
    if set(hf_values) != set(masters):
        raise SystemExit(f"{hf_dir}: read back {sorted(set(hf_values) ^ set(masters))[:5]} differently")
    for name, w in masters.items():
        stored = hf_values[name]
        # bf16 storage rounds by at most 2^-9 relative; F32 is exact.
        if not np.allclose(stored, w, rtol=2**-8, atol=0) or (name.endswith(spec.hf_f32) and spec.hf_f32 and not np.array_equal(stored, w)):
            raise SystemExit(f"{hf_dir}: {name} does not read back")
    print(f"{hf_dir}: {len(hf_values)} tensors, {folder_size(hf_dir) / 2**20:.2f} MiB")

    if spec.mlx:
        mlx_dir = root / spec.name / "mlx"
        write_mlx(spec, hf_values, mlx_dir)
        _, mlx_values, layout = read_checkpoint(mlx_dir)
        assert layout == "mlx"
        if set(mlx_values) != set(hf_values):
            raise SystemExit(f"{mlx_dir}: tensor names differ from hf: {sorted(set(mlx_values) ^ set(hf_values))[:5]}")
        worst = 0.0
        for name, w in hf_values.items():
            got = mlx_values[name]
            if got.shape != w.shape:
                raise SystemExit(f"{mlx_dir}: {name} reads back as {got.shape}, expected {w.shape}")
            if w.ndim == 1 or name.endswith("conv1d.weight"):
                # Not quantized; norms stored as bf16(1+w).
                tol = 2**-8 if is_zero_centred_norm(name) else 2**-8 * np.abs(w).max()
                if np.abs(got - w).max() > tol:
                    raise SystemExit(f"{mlx_dir}: {name} off by {np.abs(got - w).max()}")
                continue
            # Quantized: within a bit over half a step of each group's range (bf16 scale rounding).
            rel = np.abs(got - w).max() / (np.abs(w).max() + 1e-12)
            worst = max(worst, rel)
            if rel > 0.2:
                raise SystemExit(f"{mlx_dir}: {name} dequantizes {rel:.3f} (relative) away from the HF weight")
        print(f"{mlx_dir}: {len(mlx_values)} tensors, {folder_size(mlx_dir) / 2**20:.2f} MiB, worst quantization error {worst:.3f} of max|w|")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fixtures", type=Path, default=Path("test/fixtures"), help="folder that receives <name>/hf, <name>/mlx")
    ap.add_argument("--only", default=",".join(FIXTURES), help=f"comma-separated fixture names (default: {','.join(FIXTURES)})")
    args = ap.parse_args()
    for name in args.only.split(","):
        if name not in FIXTURES:
            raise SystemExit(f"unknown fixture {name!r}; known: {', '.join(FIXTURES)}")
        make(FIXTURES[name], args.fixtures)


if __name__ == "__main__":
    main()
