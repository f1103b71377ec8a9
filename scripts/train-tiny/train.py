"""Trains moelens-tiny, the embedded default model: tokenizer, model, exports, evaluation, model card.

Runs where torch, transformers 5.x (with Qwen3_5MoeForCausalLM), tokenizers and numpy are installed,
in a few minutes on a CUDA GPU:

  PYTHONUNBUFFERED=1 python3 scripts/train-tiny/train.py --data .train-data --out out

Stages, each of which leaves its results in --out before the next starts (so a run cut short still
returns what it made): tokenizer -> training (held-out loss tracked, best checkpoint kept) -> HF bf16
export (sharded, official names) -> MLX 4-bit export -> transformers evaluation of both layouts
(held-out perplexity, routing statistics, greedy sample) -> model card and held-out token file.

Reproducible: seeded data sampling and initialisation; the step count is chosen from the measured
step time unless --steps is given, and is recorded (pass it back with --steps to repeat a run; GPU
atomics in index_add_ still make runs differ in the last bits). --dry-run trains a few steps only.
"""

import argparse
import json
import math
import os
import shutil
import signal
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from mlx_export import hf_to_mlx, mlx_to_hf_float32  # noqa: E402
from safetensors_io import read_checkpoint, read_safetensors, write_safetensors, write_sharded  # noqa: E402
from tiny_data import DOMAINS, WindowSampler, domain_streams, encode_documents, fixed_windows, heldout_segments, read_documents, tiny_heldout  # noqa: E402
from tiny_model import build_model, checkpoint_config, load_tensors, state_to_bf16_bits, text_config  # noqa: E402
from tiny_tokenizer import EOT, token_ids, train_tokenizer, write_tokenizer_files  # noqa: E402

T0 = time.time()
MAX_SHARD_BYTES = 15 * 2**20  # HF shards stay under 16 MiB each: small files to copy and to commit
TINY_PLAN = {"prose": 4, "code": 2, "arithmetic": 2}
TINY_TOKENS = 384


def log(*args):
    print(f"[{time.time() - T0:7.1f}s]", *args, flush=True)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=".train-data", help="folder with train.jsonl.gz, heldout.jsonl.gz, sources.json")
    p.add_argument("--out", default=os.environ.get("OUT", "out"), help="where results and exports go")
    p.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "moelens-tiny-work"), help="folder for the export directories")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--bpe-vocab", type=int, default=8000, help="BPE vocabulary size before the 5 added tokens")
    p.add_argument("--seq-len", type=int, default=512)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--aux-coef", type=float, default=0.01, help="per-layer load-balancing loss weight")
    p.add_argument("--mix", default="prose=0.45,code=0.35,arithmetic=0.2", help="domain sampling weights")
    p.add_argument("--steps", type=int, default=0, help="training steps (0: fit --train-seconds and --max-epochs)")
    p.add_argument("--max-epochs", type=float, default=8.0, help="cap on passes over the prose training tokens")
    p.add_argument("--train-seconds", type=float, default=300.0, help="time budget of the training loop")
    p.add_argument("--deadline", type=float, default=540.0, help="seconds after start by which everything must be written")
    p.add_argument("--experts-impl", default="auto", help="transformers experts backend: auto (fastest that works), eager, grouped_mm")
    p.add_argument("--dry-run", action="store_true", help="a few steps of a tiny run, to check the pipeline")
    return p.parse_args()


class Outputs:
    """Packs the export folders into --out as they are made."""

    def __init__(self, out: str, work: str):
        self.out, self.work = out, work
        self.hf = os.path.join(work, "moelens-tiny-hf")
        self.mlx = os.path.join(work, "moelens-tiny")
        for d in (out, self.hf, self.mlx):
            os.makedirs(d, exist_ok=True)

    def pack(self, name: str, folder: str, skip=()):
        path = os.path.join(self.out, name)
        with tarfile.open(path + ".tmp", "w:gz") as tar:
            for f in sorted(os.listdir(folder)):
                if f not in skip:
                    tar.add(os.path.join(folder, f), arcname=os.path.join(os.path.basename(folder), f))
        os.replace(path + ".tmp", path)
        log(f"packed {name}: {os.path.getsize(path) / 1e6:.2f} MB")

    def pack_hf(self):
        # Shards travel as separate files (each under 16 MiB); the rest as a small archive.
        shards = [f for f in os.listdir(self.hf) if f.endswith(".safetensors")]
        for f in shards:
            shutil.copy(os.path.join(self.hf, f), os.path.join(self.out, f))
        self.pack("moelens-tiny-hf-meta.tar.gz", self.hf, skip=set(shards))

    def write_json(self, name: str, obj, folder=None):
        with open(os.path.join(folder or self.out, name), "w") as f:
            json.dump(obj, f, indent=1)
            f.write("\n")


def lr_at(step: int, steps: int, peak: float, warmup: int) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    t = (step - warmup) / max(1, steps - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))


def balance_loss(router_logits, E: int, k: int):
    """Switch-style load balancing per layer (E * sum_e f_e P_e), averaged over layers: keeps every
    expert of every layer in use."""
    import torch

    total = 0.0
    for logits in router_logits:
        p = torch.softmax(logits.float(), dim=-1)
        top = p.topk(k, dim=-1).indices
        f = torch.zeros(E, device=p.device).index_add_(0, top.reshape(-1), torch.ones(top.numel(), device=p.device)) / top.numel()
        total = total + E * (f * p.mean(0)).sum()
    return total / len(router_logits)


@dataclass
class Data:
    """The tokenizer and the tokenized training and held-out documents."""

    tok: object
    eot: int
    vocab: int
    train_docs: list
    held_docs: list
    held_enc: list
    streams: dict
    held_streams: dict


def prepare_data(args, outs: Outputs, results: dict) -> Data:
    """Reads the documents, trains the tokenizer, writes its files into both exports, tokenizes."""
    train_docs = read_documents(os.path.join(args.data, "train.jsonl.gz"))
    held_docs = read_documents(os.path.join(args.data, "heldout.jsonl.gz"))
    with open(os.path.join(args.data, "sources.json")) as f:
        sources = json.load(f)
    if args.dry_run:
        train_docs, held_docs = train_docs[::10], held_docs[::4]
    tok = train_tokenizer((d["text"] for d in train_docs), args.bpe_vocab)
    special = token_ids(tok)
    eot = special[EOT]
    n_tokens = tok.get_vocab_size(with_added_tokens=True)
    vocab = (n_tokens + 63) // 64 * 64
    log(f"tokenizer: {n_tokens} tokens (BPE {n_tokens - len(special)}), vocab padded to {vocab}", special)
    for d in (outs.hf, outs.mlx):
        write_tokenizer_files(tok, d, max_length=4096)
    results["tokenizer"] = {"tokens": n_tokens, "vocab_size": vocab, "special": special}
    outs.pack("moelens-tiny-hf-meta.tar.gz", outs.hf)

    train_enc = encode_documents(tok, train_docs, eot)
    held_enc = encode_documents(tok, held_docs, eot)
    streams = domain_streams(train_docs, train_enc)
    held_streams = domain_streams(held_docs, held_enc)
    results["data"] = {
        "train_tokens": {d: int(len(s)) for d, s in streams.items()},
        "heldout_tokens": {d: int(len(s)) for d, s in held_streams.items()},
        "sources": sources,
    }
    log("tokens", results["data"]["train_tokens"], "held-out", results["data"]["heldout_tokens"])
    return Data(tok, eot, vocab, train_docs, held_docs, held_enc, streams, held_streams)


class Trainer:
    """The model being trained, its optimizer settings, training steps and held-out loss."""

    def __init__(self, args, data: Data, device, results: dict):
        import torch

        self.args, self.data, self.device, self.results = args, data, device, results
        torch.manual_seed(args.seed)
        np.random.seed(args.seed)
        self.text = text_config(data.vocab, data.eot, args.aux_coef)
        self.model = build_model(self.text).to(device)
        n_params = sum(p.numel() for p in self.model.parameters())
        self.E, self.k = self.text["num_experts"], self.text["num_experts_per_tok"]
        log(f"model: {n_params / 1e6:.2f} M parameters")
        results["model"] = {"parameters": n_params, "text_config": self.text}

        self.mix = dict((kv.split("=")[0], float(kv.split("=")[1])) for kv in args.mix.split(","))
        self.seq, self.batch = args.seq_len, args.batch
        count = 8 if args.dry_run else 32
        self.eval_windows = {d: torch.from_numpy(fixed_windows(data.held_streams[d], count, self.seq)).to(device) for d in DOMAINS}
        self.opt = None

    def make_optimizer(self):
        import torch

        decay = [p for p in self.model.parameters() if p.ndim >= 2]
        no_decay = [p for p in self.model.parameters() if p.ndim < 2]
        return torch.optim.AdamW(
            [{"params": decay, "weight_decay": self.args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=self.args.lr,
            betas=(0.9, 0.95),
            eps=1e-8,
            fused=self.device.type == "cuda",
        )

    def step(self, opt, x_cpu, lr):
        """One optimizer step on a batch of windows; returns the cross-entropy and the balance loss."""
        import torch
        import torch.nn.functional as F

        x = torch.from_numpy(x_cpu).to(self.device, non_blocking=True)
        for g in opt.param_groups:
            g["lr"] = lr
        with torch.autocast(self.device.type, dtype=torch.bfloat16):
            out = self.model(input_ids=x[:, :-1], use_cache=False, output_router_logits=True)
        ce = F.cross_entropy(out.logits.float().reshape(-1, self.data.vocab), x[:, 1:].reshape(-1))
        aux = balance_loss(out.router_logits, self.E, self.k)
        (ce + self.args.aux_coef * aux).backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return ce, aux

    def heldout_loss(self) -> dict:
        import torch
        import torch.nn.functional as F

        self.model.eval()
        losses = {}
        with torch.no_grad():
            for d, w in self.eval_windows.items():
                with torch.autocast(self.device.type, dtype=torch.bfloat16):
                    logits = self.model(input_ids=w[:, :-1], use_cache=False).logits
                losses[d] = float(F.cross_entropy(logits.float().reshape(-1, self.data.vocab), w[:, 1:].reshape(-1)))
        self.model.train()
        return losses

    def pick_experts_backend(self) -> tuple:
        """Times a few steps with each transformers experts backend, keeps the fastest that works, and
        starts again from the same initial weights. Returns (backend, seconds per step of each)."""
        import torch

        from tiny_eval import set_experts_implementation

        args = self.args
        initial = {n: t.detach().clone() for n, t in self.model.state_dict().items()}
        candidates = ["grouped_mm", "eager"] if args.experts_impl == "auto" else [args.experts_impl]
        timings = {}
        probe = WindowSampler(self.data.streams, self.mix, self.seq, args.seed + 1)
        repeats = 2 if args.dry_run else 4
        self.model.train()
        for impl in candidates:
            try:
                set_experts_implementation(self.model, impl)
                opt = self.make_optimizer()
                self.step(opt, probe.batch(self.batch), 1e-5)
                if self.device.type == "cuda":
                    torch.cuda.synchronize()
                t = time.time()
                for _ in range(repeats):
                    ce, _ = self.step(opt, probe.batch(self.batch), 1e-5)
                if self.device.type == "cuda":
                    torch.cuda.synchronize()
                if not bool(torch.isfinite(ce)):
                    raise FloatingPointError(f"loss {float(ce)}")
                timings[impl] = (time.time() - t) / repeats
                log(f"experts backend {impl}: {timings[impl] * 1000:.0f} ms/step, loss {float(ce):.3f}")
            except Exception as e:  # a backend this torch/transformers build cannot run
                log(f"experts backend {impl} failed: {type(e).__name__}: {str(e)[:300]}")
            self.model.zero_grad(set_to_none=True)  # a failed step may leave gradients behind
        if not timings:
            raise RuntimeError("no experts backend works")
        impl = min(timings, key=timings.get)
        set_experts_implementation(self.model, impl)
        self.model.load_state_dict(initial)
        return impl, timings

    def plan_steps(self, impl: str, timings: dict) -> int:
        """--steps, or as many steps as fit the time budget (evaluations included) and --max-epochs.
        Records the training setup in the results."""
        args = self.args
        t_eval = time.time()
        self.heldout_loss()
        t_eval = time.time() - t_eval
        prose_epoch_steps = self.data.streams["prose"].size / (self.batch * self.seq * self.mix["prose"] / sum(self.mix.values()))
        if args.steps:
            steps = args.steps
        elif args.dry_run:
            steps = 20
        else:
            seconds = min(args.train_seconds, args.deadline - 160 - (time.time() - T0))
            by_time = int(seconds / (timings[impl] * 1.03 + t_eval / 50))
            steps = max(100, min(by_time, int(args.max_epochs * prose_epoch_steps)))
        self.results["training"] = {
            "steps": steps,
            "batch": self.batch,
            "seq_len": self.seq,
            "tokens_per_step": self.batch * self.seq,
            "experts_impl": impl,
            "backend_ms_per_step": {name: v * 1000 for name, v in timings.items()},
            "prose_epochs": steps / prose_epoch_steps,
            "mix": self.mix,
            "warmup": min(100, steps // 10),
            "lr": args.lr,
            "history": [],
        }
        log(f"training {steps} steps ({steps / prose_epoch_steps:.2f} prose epochs), backend {impl}, eval every {max(10, steps // 25)}")
        return steps

    def train(self, steps: int) -> None:
        """The training loop: evaluates every steps/25 steps and ends with the weights of the best
        held-out loss; stops early when the time budget runs out."""
        args = self.args
        training = self.results["training"]
        eval_every = max(10, steps // 25)
        warmup = training["warmup"]
        sampler = WindowSampler(self.data.streams, self.mix, self.seq, args.seed)
        self.opt = self.make_optimizer()
        best, best_state, best_step = float("inf"), None, -1
        t_train = time.time()
        stopped_early = False
        self.model.train()
        for step in range(steps):
            ce, aux = self.step(self.opt, sampler.batch(self.batch), lr_at(step, steps, args.lr, warmup))
            if (step + 1) % eval_every == 0 or step + 1 == steps:
                losses = self.heldout_loss()
                mean = float(np.mean(list(losses.values())))
                entry = {"step": step + 1, "train_ce": float(ce), "aux": float(aux), "heldout": losses, "heldout_mean": mean, "seconds": time.time() - t_train}
                training["history"].append(entry)
                log(f"step {step + 1}/{steps} ce {float(ce):.3f} aux {float(aux):.3f} held-out {json.dumps({d: round(v, 3) for d, v in losses.items()})}")
                if mean < best:
                    best, best_step = mean, step + 1
                    best_state = {n: t.detach().clone() for n, t in self.model.state_dict().items()}
            if time.time() - T0 > args.deadline - 150:
                log(f"stopping at step {step + 1}: time budget")
                stopped_early = True
                break
        training.update({"seconds": time.time() - t_train, "best_step": best_step, "best_heldout_mean": best, "stopped_early": stopped_early})
        if best_state is not None:
            self.model.load_state_dict(best_state)
        log(f"training done in {time.time() - t_train:.0f}s; best held-out mean CE {best:.4f} at step {best_step}")


def export(outs: Outputs, model, text: dict, results: dict) -> dict:
    """Writes the HF bf16 export (sharded) and the MLX 4-bit export; returns the HF tensors."""
    config = checkpoint_config(text)
    hf_tensors = state_to_bf16_bits(model)
    files = write_sharded(outs.hf, hf_tensors, MAX_SHARD_BYTES)
    outs.write_json("config.json", config, outs.hf)
    outs.pack_hf()
    log("HF export:", files)
    mlx_tensors, mlx_config = hf_to_mlx(hf_tensors, config)
    size = write_safetensors(os.path.join(outs.mlx, "model.safetensors"), mlx_tensors)
    outs.write_json("config.json", mlx_config, outs.mlx)
    outs.pack("moelens-tiny-mlx.tar.gz", outs.mlx)
    results["exports"] = {"hf_files": files, "mlx_bytes": size}
    log(f"MLX export: {size / 1e6:.2f} MB")
    return hf_tensors


def load_export(outs: Outputs, layout: str, text: dict, hf_tensors: dict, dtype):
    """A fresh transformers model with the weights read back from one export."""
    m = build_model(text).to(dtype)
    if layout == "hf_bf16":
        back = read_checkpoint(outs.hf)
        differ = [n for n in hf_tensors if n not in back or not np.array_equal(np.asarray(back[n]), np.asarray(hf_tensors[n]))]
        if differ or len(back) != len(hf_tensors):
            raise RuntimeError(f"HF export does not read back as written: {differ[:5]}")
        load_tensors(m, back, dtype)
    else:
        load_tensors(m, mlx_to_hf_float32(read_safetensors(os.path.join(outs.mlx, "model.safetensors"))), dtype)
    return m


def evaluate_exports(args, outs: Outputs, data: Data, text: dict, hf_tensors: dict, device) -> tuple:
    """transformers on each export as written: held-out perplexity and routing, the small held-out
    set of the embedded model's test, a greedy sample. Returns (evaluations, small held-out set)."""
    import torch

    from tiny_eval import evaluate_segments, greedy, perplexities, routing_summary, set_experts_implementation

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    segments = heldout_segments(data.held_docs, data.held_enc, args.seq_len)
    tiny = tiny_heldout(data.held_docs, data.held_enc, TINY_TOKENS, TINY_PLAN)
    evals = {}
    for layout, dtype in (("hf_bf16", torch.bfloat16), ("mlx_dequant_fp32", torch.float32)):
        m = load_export(outs, layout, text, hf_tensors, dtype).to(device)
        set_experts_implementation(m, "eager")
        full = evaluate_segments(m, segments, 32, device, data.eot)
        small = evaluate_segments(m, [dict(s, half=i % 2) for i, s in enumerate(tiny)], 8, device, data.eot)
        evals[layout] = {
            "heldout": perplexities(full),
            "heldout_routing": routing_summary(full),
            "tiny": perplexities(small),
            "tiny_routing": routing_summary(small),
        }
        prompt = data.tok.encode("The jury said", add_special_tokens=False).ids
        sample = greedy(m, prompt, 40, device)
        evals[layout]["greedy"] = {"prompt": "The jury said", "ids": sample, "text": data.tok.decode(sample, skip_special_tokens=False)}
        log(f"{layout}: held-out ppl", {d: round(v["ppl"], 3) for d, v in evals[layout]["heldout"].items()}, "tiny", round(evals[layout]["tiny"]["all"]["ppl"], 4))
        log(f"{layout}: min expert share per layer", evals[layout]["heldout_routing"]["min_share_per_layer"])
        log(f"{layout}: greedy:", repr(evals[layout]["greedy"]["text"]))
        del m
        if time.time() - T0 > args.deadline - 40:
            log("skipping the rest of the evaluation: time budget")
            break
    return evals, tiny


def write_heldout_file(outs: Outputs, tiny: list, evals: dict) -> None:
    """The held-out token segments with transformers' perplexity on them, for the embedded model's test."""
    heldout_file = {
        "description": "Held-out token segments of moelens-tiny (not seen in training) with transformers' perplexity on them",
        "tokenizer": "models/moelens-tiny/tokenizer.json",
        "perplexity": "exp(mean NLL of ids[1:] given the earlier ids of the same segment), over all segments",
        "segments": tiny,
        "transformers": {layout: {"ppl": ev["tiny"]["all"]["ppl"], "nll_sum": ev["tiny"]["all"]["nll_sum"], "tokens": ev["tiny"]["all"]["tokens"], "per_domain": ev["tiny"]} for layout, ev in evals.items()},
    }
    outs.write_json("heldout-tiny.json", heldout_file, outs.mlx)


def check_tokenizer(outs: Outputs, tok, results: dict) -> None:
    """transformers' AutoTokenizer on the written files gives our ids and renders the chat template."""
    try:
        from transformers import AutoTokenizer

        hf_tok = AutoTokenizer.from_pretrained(outs.mlx)
        probe_text = "The jury said 12 + 30 = 42.\nconst x = f(y);"
        same = hf_tok(probe_text)["input_ids"] == tok.encode(probe_text, add_special_tokens=False).ids
        chat = hf_tok.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True, enable_thinking=False)
        results["tokenizer"]["transformers_check"] = {"same_ids": same, "chat": chat}
        log("transformers tokenizer: same ids", same, "chat", repr(chat))
    except Exception as e:
        results["tokenizer"]["transformers_check"] = {"error": f"{type(e).__name__}: {e}"}
        log("transformers tokenizer check failed:", e)


def main():
    args = parse_args()
    import tokenizers
    import torch
    import transformers

    signal.signal(signal.SIGTERM, lambda *_: sys.exit("SIGTERM: stopping"))
    outs = Outputs(args.out, args.work)
    # Where the files went is no property of the model: the output folders are left out.
    results = {"args": {k: v for k, v in vars(args).items() if k not in ("out", "work")}}
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    log(f"torch {torch.__version__}, device {device}", torch.cuda.get_device_name(0) if device.type == "cuda" else "")
    results["versions"] = {"torch": torch.__version__, "transformers": transformers.__version__, "tokenizers": tokenizers.__version__, "numpy": np.__version__}

    data = prepare_data(args, outs, results)
    trainer = Trainer(args, data, device, results)
    steps = trainer.plan_steps(*trainer.pick_experts_backend())
    trainer.train(steps)
    outs.write_json("results.json", results)

    hf_tensors = export(outs, trainer.model, trainer.text, results)
    text = trainer.text
    del trainer  # frees the model and optimizer before the evaluation loads the exports
    evals, tiny = evaluate_exports(args, outs, data, text, hf_tensors, device)
    results["evaluation"] = evals
    outs.write_json("results.json", results)

    write_heldout_file(outs, tiny, evals)
    check_tokenizer(outs, data.tok, results)
    from model_card import write_model_card

    for folder in (outs.hf, outs.mlx):
        write_model_card(os.path.join(folder, "README.md"), results, layout="hf" if folder == outs.hf else "mlx")
    outs.write_json("results.json", results)
    outs.pack_hf()
    outs.pack("moelens-tiny-mlx.tar.gz", outs.mlx)
    log("done")


if __name__ == "__main__":
    main()
