#!/usr/bin/env python3
"""Step 2 of the reference generator (torch + transformers; computes on the CPU in float32): for each
fixture and layout, reads the checkpoint folder written by make_checkpoints.py, runs transformers'
Qwen3_5MoeForCausalLM (Qwen3_5ForCausalLM for the dense qwen3_5) on it and writes

  <out>/<name>/ref_<layout>.safetensors            prompts, logits, residual stream, router (mixtures of
                                                   experts), greedy decode
  <out>/<name>/interventions_<layout>.safetensors  edited runs (fixtures whose spec has interventions)

Then loads each HF folder once more through transformers' own from_pretrained and checks that it
gives the same logits (proof that the files follow the official layout)."""

import argparse
import os
import sys
import time
import traceback
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

import st_io  # noqa: E402
from edits import disabled_experts, residual_capture, residual_patch, shared_expert_off, steering  # noqa: E402
from hf_model import Recorder, build_model, environment, greedy, implementations, logits_of, recorded_prefill  # noqa: E402
from read_checkpoint import read_checkpoint  # noqa: E402
from specs import FIXTURES, FixtureSpec  # noqa: E402

# Smallest accepted top-1/top-2 logit gap along the greedy decode, in units of the logits' std:
# 5x the parity tolerance (1e-3 std), so a correct float32 engine cannot pick another token.
MIN_GREEDY_GAP = 5e-3
PROMPT_ATTEMPTS = 40


def log(msg: str) -> None:
    print(msg, flush=True)


def rel(a: np.ndarray, b: np.ndarray) -> float:
    """max |a - b| in units of std(b)."""
    return float(np.abs(a - b).max() / b.std())


def choose_p0(spec: FixtureSpec, models: dict, rng: np.random.Generator):
    """Random p0 prompts until the greedy decode has no near-tie in any layout."""
    vocab = spec.text_config["vocab_size"]
    best = None
    for attempt in range(PROMPT_ATTEMPTS):
        ids = rng.integers(0, vocab, spec.prompt_lengths[0])
        runs = {layout: greedy(m, ids, spec.greedy_steps) for layout, m in models.items()}
        gap = min(r[2] for r in runs.values())
        if best is None or gap > best[0]:
            best = (gap, ids, runs)
        if gap >= MIN_GREEDY_GAP:
            break
    gap, ids, runs = best
    note = "" if gap >= MIN_GREEDY_GAP else f"  WARNING: below {MIN_GREEDY_GAP}"
    log(f"  p0: {len(ids)} tokens after {attempt + 1} attempt(s); smallest greedy top-2 gap {gap:.4f} std{note}")
    return ids, runs


def reference_file(spec, layout, model, prompts, greedy_run) -> dict[str, st_io.Tensor]:
    out: dict[str, st_io.Tensor] = {}
    for k, ids in enumerate(prompts):
        arrays, rec = recorded_prefill(model, ids)
        if rec.routing_mismatch:
            log(f"  WARNING {layout} p{k}: {rec.routing_mismatch}")
        out[f"p{k}.input_ids"] = st_io.Tensor.i32(ids)
        for key, a in arrays.items():
            out[f"p{k}.{key}"] = st_io.Tensor.i32(a) if a.dtype == np.int32 else st_io.Tensor.f32(a)
        if k == 0:
            p0_logits = arrays["logits"]
    ids, logits, _ = greedy_run
    out["p0.greedy_ids"] = st_io.Tensor.i32(ids)
    out["p0.greedy_logits"] = st_io.Tensor.f32(logits)
    if int(np.argmax(p0_logits[-1])) != int(ids[0]):
        raise SystemExit(f"{spec.name}/{layout}: greedy's first token differs from the prefill's argmax")
    # The cached decode must agree with one forward over prompt + generated tokens.
    full = logits_of(model, list(prompts[0]) + list(ids))
    log(f"  {layout}: cached decode vs full forward: max |diff| {rel(logits, full[len(prompts[0]):]):.2e} std")
    return out


def interventions_file(spec, layout, model, p0, inputs, steer_vector) -> dict[str, st_io.Tensor]:
    iv = spec.interventions
    E = spec.text_config["num_experts"]
    out: dict[str, st_io.Tensor] = {}

    base, _ = recorded_prefill(model, p0)
    counts = np.bincount(base["router_ids"][iv.ablate_layer].ravel(), minlength=E)
    experts = sorted(np.argsort(-counts, kind="stable")[: iv.ablate_count].tolist())
    with Recorder(model) as rec, disabled_experts(model, iv.ablate_layer, experts):
        ablated = logits_of(model, p0)
    if rec.routing_mismatch:
        raise SystemExit(f"{layout}: cannot trust the ablation: {rec.routing_mismatch}")
    router_ids = rec.arrays()["router_ids"]
    if np.isin(router_ids[iv.ablate_layer], experts).any():
        raise SystemExit(f"{layout}: a disabled expert was still routed to")
    out["ablate.input_ids"] = st_io.Tensor.i32(p0)
    out["ablate.layer"] = st_io.Tensor.i32([iv.ablate_layer])
    out["ablate.experts"] = st_io.Tensor.i32(experts)
    out["ablate.logits"] = st_io.Tensor.f32(ablated)
    out["ablate.router_ids"] = st_io.Tensor.i32(router_ids)
    log(
        f"  {layout} ablate: layer {iv.ablate_layer} experts {experts} (used {counts[experts].tolist()} times of "
        f"{base['router_ids'].shape[1]} tokens); logits moved by up to {rel(ablated, base['logits']):.3f} std"
    )

    steer_ids = inputs["steer"]
    plain = logits_of(model, steer_ids)
    with steering(model, iv.steer_layer, torch.from_numpy(steer_vector)):
        steered = logits_of(model, steer_ids)
    out["steer.input_ids"] = st_io.Tensor.i32(steer_ids)
    out["steer.layer"] = st_io.Tensor.i32([iv.steer_layer])
    out["steer.vector"] = st_io.Tensor.f32(steer_vector)
    out["steer.logits"] = st_io.Tensor.f32(steered)
    log(f"  {layout} steer: layer {iv.steer_layer}, |v| {np.linalg.norm(steer_vector):.2f}; logits moved by up to {rel(steered, plain):.3f} std")

    source, target = inputs["patch_source"], inputs["patch_target"]
    with residual_capture(model, iv.patch_layer) as captured:
        logits_of(model, source)
    plain = logits_of(model, target)
    with residual_patch(model, iv.patch_layer, iv.patch_position, captured["value"][iv.patch_position]):
        patched = logits_of(model, target)
    before = np.abs(patched[: iv.patch_position] - plain[: iv.patch_position]).max()
    out["patch.source_ids"] = st_io.Tensor.i32(source)
    out["patch.target_ids"] = st_io.Tensor.i32(target)
    out["patch.layer"] = st_io.Tensor.i32([iv.patch_layer])
    out["patch.position"] = st_io.Tensor.i32([iv.patch_position])
    out["patch.logits"] = st_io.Tensor.f32(patched)
    log(
        f"  {layout} patch: layer {iv.patch_layer} position {iv.patch_position}; earlier positions moved by {before:.1e}, "
        f"later by up to {rel(patched[iv.patch_position:], plain[iv.patch_position:]):.3f} std"
    )

    shared_ids = inputs["shared_off"]
    plain = logits_of(model, shared_ids)
    with shared_expert_off(model):
        off = logits_of(model, shared_ids)
    out["shared_off.input_ids"] = st_io.Tensor.i32(shared_ids)
    out["shared_off.logits"] = st_io.Tensor.f32(off)
    log(f"  {layout} shared_off: logits moved by up to {rel(off, plain):.3f} std")
    return out


def run_fixture(spec: FixtureSpec, fixtures: Path, out: Path) -> None:
    t0 = time.time()
    models = {}
    for layout in spec.layouts:
        text, weights, detected = read_checkpoint(fixtures / spec.name / layout)
        if detected != layout:
            raise SystemExit(f"{fixtures / spec.name / layout} looks like the {detected} layout")
        models[layout] = build_model(text, weights)
        log(f"  {layout}: built from {len(weights)} tensors ({implementations(models[layout])})")
    rng = np.random.default_rng(10_000 + spec.seed)
    vocab = spec.text_config["vocab_size"]
    p0, greedy_runs = choose_p0(spec, models, rng)
    prompts = [p0] + [rng.integers(0, vocab, n) for n in spec.prompt_lengths[1:]]
    (out / spec.name).mkdir(parents=True, exist_ok=True)
    for layout, model in models.items():
        path = out / spec.name / f"ref_{layout}.safetensors"
        st_io.write(path, reference_file(spec, layout, model, prompts, greedy_runs[layout]))
        log(f"  wrote {path} ({path.stat().st_size / 2**20:.2f} MiB)")
    if len(models) == 2:
        a, b = (logits_of(m, p0) for m in models.values())
        log(f"  hf vs mlx p0 logits: correlation {np.corrcoef(a.ravel(), b.ravel())[0, 1]:.3f} (quantization only)")

    if spec.interventions:
        iv = spec.interventions
        inputs = {
            "steer": rng.integers(0, vocab, iv.steer_tokens),
            "patch_source": rng.integers(0, vocab, iv.patch_tokens),
            "patch_target": rng.integers(0, vocab, iv.patch_tokens),
            "shared_off": rng.integers(0, vocab, iv.shared_off_tokens),
        }
        # One vector for both layouts: a random direction scaled to the mean residual norm after the
        # layer (hf model, steering prompt).
        first = next(iter(models.values()))
        arrays, _ = recorded_prefill(first, inputs["steer"])
        norm = float(np.linalg.norm(arrays["hidden"][iv.steer_layer], axis=-1).mean())
        direction = rng.standard_normal(spec.text_config["hidden_size"])
        vector = (direction / np.linalg.norm(direction) * norm).astype(np.float32)
        for layout, model in models.items():
            path = out / spec.name / f"interventions_{layout}.safetensors"
            st_io.write(path, interventions_file(spec, layout, model, p0, inputs, vector))
            log(f"  wrote {path} ({path.stat().st_size / 2**20:.2f} MiB)")
    log(f"  {spec.name} done in {time.time() - t0:.1f} s")


def check_from_pretrained(spec: FixtureSpec, fixtures: Path, out: Path) -> bool:
    """transformers' own loader on the HF folder must give the reference logits."""
    import transformers

    folder = fixtures / spec.name / "hf"
    cls = {
        "qwen3_5_moe_text": transformers.Qwen3_5MoeForCausalLM,
        "qwen3_5_moe": transformers.Qwen3_5MoeForConditionalGeneration,
        "qwen3_5_text": transformers.Qwen3_5ForCausalLM,
    }[spec.top_level]
    try:
        model, info = cls.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager", output_loading_info=True)
    except TypeError:  # versions before the dtype argument
        model, info = cls.from_pretrained(folder, torch_dtype=torch.float32, attn_implementation="eager", output_loading_info=True)
    model.eval()
    missing = [k for k in info.get("missing_keys", []) if ".visual." not in k and not k.startswith("visual.")]
    unexpected = [k for k in info.get("unexpected_keys", []) if not k.startswith("mtp.")]
    mismatched = info.get("mismatched_keys", [])
    ref = st_io.read(out / spec.name / "ref_hf.safetensors")
    ids = ref["p0.input_ids"].data.astype(np.int64)
    with torch.no_grad():
        logits = model(input_ids=torch.from_numpy(ids)[None]).logits[0].float().numpy()
    diff = rel(logits, ref["p0.logits"].float32())
    ok = not missing and not unexpected and not mismatched and diff < 1e-5
    log(
        f"  {cls.__name__}.from_pretrained({folder}): missing {missing[:5]}, unexpected {unexpected[:5]}, "
        f"mismatched {list(mismatched)[:5]}; p0 logits differ by {diff:.1e} std -> {'OK' if ok else 'FAILED'}"
    )
    return ok


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fixtures", type=Path, default=Path("test/fixtures"), help="folder holding <name>/hf and <name>/mlx")
    ap.add_argument("--out", type=Path, required=True, help="folder that receives <name>/ref_*.safetensors")
    ap.add_argument("--only", default=",".join(FIXTURES), help=f"comma-separated fixture names (default: {','.join(FIXTURES)})")
    args = ap.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)
    torch.set_grad_enabled(False)
    log(environment())
    failed = []
    for name in args.only.split(","):
        if name not in FIXTURES:
            raise SystemExit(f"unknown fixture {name!r}; known: {', '.join(FIXTURES)}")
        log(f"== {name}")
        try:
            run_fixture(FIXTURES[name], args.fixtures, args.out)
        except (Exception, SystemExit):
            traceback.print_exc()
            failed.append(name)
    for name in args.only.split(","):
        if name in failed:
            continue
        log(f"== {name}: transformers from_pretrained check")
        try:
            if not check_from_pretrained(FIXTURES[name], args.fixtures, args.out):
                failed.append(f"{name} (from_pretrained)")
        except Exception:
            traceback.print_exc()
            failed.append(f"{name} (from_pretrained)")
    log(f"finished; failed: {failed or 'none'}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
