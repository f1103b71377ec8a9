"""Held-out perplexity and routing statistics of a Qwen3_5MoeForCausalLM with transformers.

Perplexity = exp(total NLL / predicted tokens) over segments that each start fresh (no cache), the
first token of a segment being context only: the same definition the engine's test uses. Routing:
for every layer, how many tokens pick each expert in their top-k (all real positions of a segment).
"""

import math

import numpy as np
import torch
import torch.nn.functional as F

from tiny_data import DOMAINS


def set_experts_implementation(model, impl: str) -> str:
    if hasattr(model, "set_experts_implementation"):
        model.set_experts_implementation(impl)
    else:
        model.config._experts_implementation = impl
    return getattr(model.config, "_experts_implementation", impl)


@torch.no_grad()
def evaluate_segments(model, segments: list, batch_size: int, device, pad_id: int) -> dict:
    """segments: dicts with 'domain', 'ids' and optionally 'half'. Returns NLL sums, token counts and
    expert counts per (domain, half) group, plus per-layer expert counts over everything."""
    cfg = model.config
    E, k, L = cfg.num_experts, cfg.num_experts_per_tok, cfg.num_hidden_layers
    groups = sorted({(s["domain"], s.get("half", 0)) for s in segments})
    gindex = {g: i for i, g in enumerate(groups)}
    nll = np.zeros(len(groups))
    predicted = np.zeros(len(groups), dtype=np.int64)
    positions = np.zeros(len(groups), dtype=np.int64)
    counts = np.zeros((L, len(groups), E), dtype=np.int64)
    order = sorted(range(len(segments)), key=lambda i: -len(segments[i]["ids"]))
    model.eval()
    for b in range(0, len(order), batch_size):
        chunk = [segments[i] for i in order[b : b + batch_size]]
        T = max(len(s["ids"]) for s in chunk)
        ids = np.full((len(chunk), T), pad_id, dtype=np.int64)
        valid = np.zeros((len(chunk), T), dtype=bool)
        for r, s in enumerate(chunk):
            ids[r, : len(s["ids"])] = s["ids"]
            valid[r, : len(s["ids"])] = True
        x = torch.from_numpy(ids).to(device)
        out = model(input_ids=x, use_cache=False, output_router_logits=True)
        logp = F.log_softmax(out.logits.float(), dim=-1)
        tok_nll = -logp[:, :-1].gather(-1, x[:, 1:, None])[..., 0]  # [B, T-1]
        vmask = torch.from_numpy(valid).to(device)
        pred_mask = vmask[:, 1:]
        row_group = torch.tensor([gindex[(s["domain"], s.get("half", 0))] for s in chunk], device=device)
        nll += torch.zeros(len(groups), device=device, dtype=torch.float64).index_add_(
            0, row_group, (tok_nll.double() * pred_mask).sum(1)
        ).cpu().numpy()
        predicted += np.bincount(row_group.cpu().numpy(), weights=pred_mask.sum(1).cpu().numpy(), minlength=len(groups)).astype(np.int64)
        positions += np.bincount(row_group.cpu().numpy(), weights=vmask.sum(1).cpu().numpy(), minlength=len(groups)).astype(np.int64)
        flat_valid = vmask.reshape(-1)
        flat_group = row_group[:, None].expand(-1, T).reshape(-1)
        for layer, logits in enumerate(out.router_logits):
            top = logits.float().topk(k, dim=-1).indices  # [B*T, k]
            keys = (flat_group[:, None] * E + top)[flat_valid].reshape(-1)
            counts[layer] += torch.bincount(keys, minlength=len(groups) * E).reshape(len(groups), E).cpu().numpy()
    return {"groups": groups, "nll": nll, "predicted": predicted, "positions": positions, "counts": counts}


def perplexities(ev: dict) -> dict:
    """Overall and per-domain perplexity."""
    out = {}
    for dom in DOMAINS:
        idx = [i for i, g in enumerate(ev["groups"]) if g[0] == dom]
        n = int(ev["predicted"][idx].sum())
        if n:
            out[dom] = {"ppl": math.exp(ev["nll"][idx].sum() / n), "tokens": n}
    n = int(ev["predicted"].sum())
    out["all"] = {"ppl": math.exp(ev["nll"].sum() / n), "tokens": n, "nll_sum": float(ev["nll"].sum())}
    return out


def total_variation(p: np.ndarray, q: np.ndarray) -> float:
    return float(0.5 * np.abs(p / p.sum() - q / q.sum()).sum())


def routing_summary(ev: dict) -> dict:
    """Expert shares per layer (fraction of tokens whose top-k contains the expert), per domain, and
    how far apart the domains' expert-load distributions are (total variation), with the distance
    between the two halves of one domain as the baseline."""
    counts, groups, positions = ev["counts"], ev["groups"], ev["positions"]
    L, _, E = counts.shape
    dom_idx = {dom: [i for i, g in enumerate(groups) if g[0] == dom] for dom in DOMAINS}
    dom_counts = {dom: counts[:, idx, :].sum(1) for dom, idx in dom_idx.items() if idx}
    dom_tokens = {dom: int(positions[idx].sum()) for dom, idx in dom_idx.items() if idx}
    total = int(positions.sum())
    share_all = counts.sum(1) / total  # [L, E]
    summary = {
        "tokens": total,
        "share_all": share_all.round(5).tolist(),
        "min_share_per_layer": share_all.min(1).round(5).tolist(),
        "max_share_per_layer": share_all.max(1).round(5).tolist(),
        "share_per_domain": {d: (c / dom_tokens[d]).round(5).tolist() for d, c in dom_counts.items()},
        "tokens_per_domain": dom_tokens,
        "tv_between_domains": {},
        "tv_within_domain": {},
    }
    doms = list(dom_counts)
    for i in range(len(doms)):
        for j in range(i + 1, len(doms)):
            a, b = doms[i], doms[j]
            summary["tv_between_domains"][f"{a}|{b}"] = [total_variation(dom_counts[a][l], dom_counts[b][l]) for l in range(L)]
    for dom, idx in dom_idx.items():
        halves = {groups[i][1]: counts[:, i, :] for i in idx}
        if 0 in halves and 1 in halves:
            summary["tv_within_domain"][dom] = [total_variation(halves[0][l], halves[1][l]) for l in range(L)]
    return summary


@torch.no_grad()
def greedy(model, prompt_ids: list, steps: int, device) -> list:
    ids = list(prompt_ids)
    for _ in range(steps):
        x = torch.tensor([ids], device=device)
        logits = model(input_ids=x, use_cache=False).logits[0, -1].float()
        ids.append(int(logits.argmax()))
    return ids[len(prompt_ids) :]
