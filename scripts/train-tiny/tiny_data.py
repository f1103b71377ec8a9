"""Training and held-out data of the embedded model, as token streams: reading the JSON lines that
prepare-data.ts writes, tokenizing them, sampling training windows per domain, and cutting the
held-out documents into evaluation segments.

Every document is preceded by <|endoftext|>, as the model sees it in training.
"""

import gzip
import json

import numpy as np

DOMAINS = ("prose", "code", "arithmetic")


def read_documents(path: str) -> list:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        docs = [json.loads(line) for line in f if line.strip()]
    for i, d in enumerate(docs):
        if d.get("domain") not in DOMAINS or not isinstance(d.get("text"), str):
            raise ValueError(f"{path}: line {i + 1} has no valid domain/text")
    return docs


def encode_documents(tok, docs: list, eot: int) -> list:
    """[<|endoftext|>] + ids of each document (numpy int32)."""
    encodings = tok.encode_batch([d["text"] for d in docs], add_special_tokens=False)
    return [np.asarray([eot] + e.ids, dtype=np.int32) for e in encodings]


def domain_streams(docs: list, encoded: list) -> dict:
    """domain -> one int32 array of that domain's documents, in file order."""
    return {dom: np.concatenate([e for d, e in zip(docs, encoded) if d["domain"] == dom]) for dom in DOMAINS}


class WindowSampler:
    """Random windows of seq_len + 1 tokens; each batch row picks a domain with the mix weights."""

    def __init__(self, streams: dict, mix: dict, seq_len: int, seed: int):
        for dom in DOMAINS:
            if len(streams[dom]) < seq_len + 2:
                raise ValueError(f"domain {dom}: only {len(streams[dom])} training tokens")
        self.streams, self.seq_len = streams, seq_len
        self.domains = list(DOMAINS)
        weights = np.asarray([mix[d] for d in self.domains], dtype=np.float64)
        self.p = weights / weights.sum()
        self.rng = np.random.default_rng(seed)

    def batch(self, batch_size: int) -> np.ndarray:
        rows = np.empty((batch_size, self.seq_len + 1), dtype=np.int64)
        picks = self.rng.choice(len(self.domains), size=batch_size, p=self.p)
        for r, k in enumerate(picks):
            stream = self.streams[self.domains[k]]
            start = int(self.rng.integers(0, len(stream) - self.seq_len - 1))
            rows[r] = stream[start : start + self.seq_len + 1]
        return rows


def fixed_windows(stream: np.ndarray, count: int, seq_len: int) -> np.ndarray:
    """count evenly spaced windows of seq_len + 1 tokens (the held-out loss tracked while training)."""
    last = len(stream) - seq_len - 1
    if last < 0:
        raise ValueError(f"held-out stream of {len(stream)} tokens is shorter than one window")
    starts = np.linspace(0, last, count).astype(np.int64)
    return np.stack([stream[s : s + seq_len + 1] for s in starts]).astype(np.int64)


def heldout_segments(docs: list, encoded: list, seg_len: int) -> list:
    """Each held-out document cut into consecutive segments that predict seg_len tokens each (the
    first token of a segment is context only). Every token after a document's <|endoftext|> is
    predicted exactly once. Segments carry their domain and a half (document parity) for the
    within-domain routing baseline."""
    segments = []
    counters = {dom: 0 for dom in DOMAINS}
    for d, ids in zip(docs, encoded):
        half = counters[d["domain"]] % 2
        counters[d["domain"]] += 1
        for start in range(0, len(ids) - 1, seg_len):
            piece = ids[start : start + seg_len + 1]
            if len(piece) >= 2:
                segments.append({"domain": d["domain"], "genre": d["genre"], "source": d["source"], "half": half, "ids": piece})
    return segments


def tiny_heldout(docs: list, encoded: list, seg_tokens: int, plan: dict) -> list:
    """The small held-out file shipped for the engine's tests: for each domain, `plan[domain]` segments
    of seg_tokens + 1 tokens, starting at held-out documents spread evenly over the domain's list (so
    over its genres); a short document continues into the following ones of the same domain."""
    out = []
    for dom, count in plan.items():
        indices = [i for i, d in enumerate(docs) if d["domain"] == dom]
        streams = {}
        for pos, i in enumerate(indices):
            tail, n = [], 0
            for j in indices[pos:]:
                tail.append(encoded[j])
                n += len(encoded[j])
                if n > seg_tokens:
                    break
            if n > seg_tokens:
                streams[i] = np.concatenate(tail)[: seg_tokens + 1]
        candidates = [i for i in indices if i in streams]
        if len(candidates) < count:
            raise ValueError(f"held-out {dom}: only {len(candidates)} places with {seg_tokens} tokens")
        picks = [candidates[round(j * (len(candidates) - 1) / max(1, count - 1))] for j in range(count)]
        for i in picks:
            out.append({"domain": dom, "genre": docs[i]["genre"], "source": docs[i]["source"], "ids": [int(t) for t in streams[i]]})
    return out
