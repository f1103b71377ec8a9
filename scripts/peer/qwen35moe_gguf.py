"""What llama.cpp's `qwen35moe` loader expects, derived from its source (src/models/qwen35moe.cpp,
src/llama-arch.cpp, src/llama-model.cpp, gguf-py/gguf/constants.py of the node-llama-cpp@3.22.1 bundle),
and how each of our checkpoint tensors maps onto it.

Facts this relies on:
- numpy shapes are ggml's `ne` reversed: a [out, in] matrix is ggml {in, out}; experts are [E, out, in].
- RMSNorm weights are applied as plain multipliers, so HF's five zero-centred norms get +1
  (input/post-attention, final, q_norm, k_norm); the gated DeltaNet norm (ssm_norm) does not.
- ssm_a holds -exp(A_log); ssm_dt.bias holds dt_bias; ssm_conv1d is [channels, kernel].
- The loader views attn_q as per-head [query(head_dim) | gate(head_dim)], the HF layout as stored.
- ggml broadcasts the 16 DeltaNet K heads over the 32 V heads *tiled* (V head j uses K head j % 16),
  while the model pairs them *grouped* (V head j uses K head j // 2): every V-head-indexed tensor is
  permuted from grouped order [k0v0, k0v1, k1v0, ...] to tiled order [k0v0, k1v0, ..., k0v1, ...].
- Separate ffn_gate_exps / ffn_up_exps (not the fused ffn_gate_up_exps) is what llama.cpp's own
  converter writes; ffn_gate_inp_shexp is a vector [hidden].
- No tokenizer: tokenizer.ggml.model "none" with {arch}.vocab_size makes llama.cpp create that many
  dummy tokens, enough for llama-bench (random ids) and llama-probe (ids given).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from checkpoint_reader import Checkpoint

ARCH = "qwen35moe"


@dataclass
class TextConfig:
    vocab: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    rotary_dim: int
    rope_theta: float
    mrope_section: list[int]
    eps: float
    context: int
    experts: int
    experts_per_token: int
    expert_ffn: int
    shared_ffn: int
    k_heads: int
    v_heads: int
    k_head_dim: int
    v_head_dim: int
    conv_kernel: int
    recurrent: list[bool]
    full_attention_interval: int

    @staticmethod
    def from_json(text: dict, source: str) -> "TextConfig":
        def need(key: str):
            if key not in text:
                raise KeyError(f"{source}: text config field '{key}' is missing")
            return text[key]

        layers = need("num_hidden_layers")
        interval = text.get("full_attention_interval", 4)
        layer_types = text.get("layer_types") or [
            "full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(layers)]
        if len(layer_types) != layers:
            raise ValueError(f"{source}: layer_types has {len(layer_types)} entries, num_hidden_layers is {layers}")
        rope = text.get("rope_parameters") or {}
        head_dim = text.get("head_dim") or need("hidden_size") // need("num_attention_heads")
        factor = rope.get("partial_rotary_factor", text.get("partial_rotary_factor", 0.25))
        cfg = TextConfig(
            vocab=need("vocab_size"), hidden=need("hidden_size"), layers=layers,
            heads=need("num_attention_heads"), kv_heads=need("num_key_value_heads"), head_dim=head_dim,
            rotary_dim=int(head_dim * factor), rope_theta=float(rope.get("rope_theta", text.get("rope_theta", 1e7))),
            mrope_section=list(rope.get("mrope_section", [11, 11, 10])), eps=float(text.get("rms_norm_eps", 1e-6)),
            context=int(text.get("max_position_embeddings", 262144)), experts=need("num_experts"),
            experts_per_token=need("num_experts_per_tok"), expert_ffn=need("moe_intermediate_size"),
            shared_ffn=need("shared_expert_intermediate_size"), k_heads=need("linear_num_key_heads"),
            v_heads=need("linear_num_value_heads"), k_head_dim=need("linear_key_head_dim"),
            v_head_dim=need("linear_value_head_dim"), conv_kernel=need("linear_conv_kernel_dim"),
            recurrent=[t == "linear_attention" for t in layer_types], full_attention_interval=interval)
        if cfg.k_head_dim != cfg.v_head_dim:
            raise ValueError(f"{source}: llama.cpp's qwen35moe needs linear_key_head_dim == linear_value_head_dim")
        if cfg.v_heads % cfg.k_heads:
            raise ValueError(f"{source}: linear_num_value_heads must be a multiple of linear_num_key_heads")
        if len(cfg.mrope_section) > 4 or sum(cfg.mrope_section) * 2 != cfg.rotary_dim:
            raise ValueError(f"{source}: rope mrope_section {cfg.mrope_section} does not cover rotary dim {cfg.rotary_dim}")
        return cfg


def write_metadata(writer, cfg: TextConfig, name: str, file_type: int) -> None:
    writer.add_name(name)
    writer.add_file_type(file_type)
    writer.add_quantization_version(2)
    writer.add_context_length(cfg.context)
    writer.add_embedding_length(cfg.hidden)
    writer.add_block_count(cfg.layers)
    writer.add_head_count(cfg.heads)
    writer.add_head_count_kv(cfg.kv_heads)
    writer.add_key_length(cfg.head_dim)
    writer.add_value_length(cfg.head_dim)
    writer.add_rope_dimension_count(cfg.rotary_dim)
    writer.add_rope_freq_base(cfg.rope_theta)
    writer.add_rope_dimension_sections((cfg.mrope_section + [0, 0, 0, 0])[:4])
    writer.add_layer_norm_rms_eps(cfg.eps)
    writer.add_expert_count(cfg.experts)
    writer.add_expert_used_count(cfg.experts_per_token)
    writer.add_expert_feed_forward_length(cfg.expert_ffn)
    writer.add_expert_shared_feed_forward_length(cfg.shared_ffn)
    writer.add_ssm_conv_kernel(cfg.conv_kernel)
    writer.add_ssm_inner_size(cfg.v_head_dim * cfg.v_heads)
    writer.add_ssm_state_size(cfg.k_head_dim)
    writer.add_ssm_time_step_rank(cfg.v_heads)
    writer.add_ssm_group_count(cfg.k_heads)
    writer.add_full_attention_interval(cfg.full_attention_interval)
    writer.add_recurrent_layers(cfg.recurrent)
    writer.add_vocab_size(cfg.vocab)
    writer.add_tokenizer_model("none")


def grouped_to_tiled(x: np.ndarray, axis: int, k_heads: int, v_per_k: int, head_dim: int) -> np.ndarray:
    """Permutes V-head-indexed entries along `axis` from grouped to tiled order (module docstring)."""
    axis %= x.ndim
    shape = x.shape
    split = x.reshape(*shape[:axis], k_heads, v_per_k, head_dim, *shape[axis + 1:])
    return np.ascontiguousarray(np.swapaxes(split, axis, axis + 1)).reshape(shape)


@dataclass
class Entry:
    """One GGUF tensor: name, numpy shape, whether it is a weight matrix (quantizable) and, when it is,
    the bits our checkpoint stores it at (None: unquantized), and how to produce it. `chunks` splits
    stacked experts so only a slice is dequantized at a time."""
    name: str
    shape: tuple[int, ...]
    matrix: bool
    source_bits: int | None
    produce: Callable[[int], np.ndarray]  # chunk index -> float32 values of that chunk
    chunks: int = 1


def plan(ck: Checkpoint, cfg: TextConfig) -> list[Entry]:
    H, E, I, S = cfg.hidden, cfg.experts, cfg.expert_ffn, cfg.shared_ffn
    Hk, Hv, Dk, Dv = cfg.k_heads, cfg.v_heads, cfg.k_head_dim, cfg.v_head_dim
    v_per_k = Hv // Hk
    key_dim, value_dim = Hk * Dk, Hv * Dv
    shift = 1.0 if ck.norms_zero_centred else 0.0

    def whole(module: str, transform: Callable[[np.ndarray], np.ndarray] = lambda a: a):
        return lambda chunk: transform(ck.weight(module))

    def matrix(name: str, module: str, shape: tuple[int, ...], transform=lambda a: a) -> Entry:
        return Entry(name, shape, True, ck.bits(module), whole(module, transform))

    def vector(name: str, module: str, shape: tuple[int, ...], transform=lambda a: a) -> Entry:
        return Entry(name, shape, False, None, whole(module, lambda a: transform(a).reshape(shape)))

    def tiled_rows(head_dim: int):
        return lambda a: grouped_to_tiled(a, 0, Hk, v_per_k, head_dim)

    def qkv(a: np.ndarray) -> np.ndarray:
        return np.concatenate([a[:2 * key_dim], grouped_to_tiled(a[2 * key_dim:], 0, Hk, v_per_k, Dv)])

    entries = [matrix("token_embd.weight", "embed_tokens", (cfg.vocab, H))]
    for i in range(cfg.layers):
        L, b = f"layers.{i}.", f"blk.{i}."
        entries += [vector(b + "attn_norm.weight", L + "input_layernorm", (H,), lambda a: a + shift),
                    vector(b + "post_attention_norm.weight", L + "post_attention_layernorm", (H,), lambda a: a + shift)]
        if cfg.recurrent[i]:
            la = L + "linear_attn."
            entries += [
                matrix(b + "attn_qkv.weight", la + "in_proj_qkv", (2 * key_dim + value_dim, H), qkv),
                matrix(b + "attn_gate.weight", la + "in_proj_z", (value_dim, H), tiled_rows(Dv)),
                vector(b + "ssm_conv1d.weight", la + "conv1d", (2 * key_dim + value_dim, cfg.conv_kernel),
                       lambda a: qkv(a.reshape(2 * key_dim + value_dim, cfg.conv_kernel))),
                vector(b + "ssm_dt.bias", la + "dt_bias", (Hv,), tiled_rows(1)),
                vector(b + "ssm_a", la + "A_log", (Hv,), lambda a: -np.exp(tiled_rows(1)(a))),
                matrix(b + "ssm_beta.weight", la + "in_proj_b", (Hv, H), tiled_rows(1)),
                matrix(b + "ssm_alpha.weight", la + "in_proj_a", (Hv, H), tiled_rows(1)),
                vector(b + "ssm_norm.weight", la + "norm", (Dv,)),
                matrix(b + "ssm_out.weight", la + "out_proj", (H, value_dim),
                       lambda a: grouped_to_tiled(a, 1, Hk, v_per_k, Dv)),
            ]
        else:
            sa = L + "self_attn."
            entries += [
                matrix(b + "attn_q.weight", sa + "q_proj", (2 * cfg.heads * cfg.head_dim, H)),
                matrix(b + "attn_k.weight", sa + "k_proj", (cfg.kv_heads * cfg.head_dim, H)),
                matrix(b + "attn_v.weight", sa + "v_proj", (cfg.kv_heads * cfg.head_dim, H)),
                matrix(b + "attn_output.weight", sa + "o_proj", (H, cfg.heads * cfg.head_dim)),
                vector(b + "attn_q_norm.weight", sa + "q_norm", (cfg.head_dim,), lambda a: a + shift),
                vector(b + "attn_k_norm.weight", sa + "k_norm", (cfg.head_dim,), lambda a: a + shift),
            ]
        mlp = L + "mlp."
        entries.append(matrix(b + "ffn_gate_inp.weight", mlp + "gate", (E, H)))
        entries += expert_entries(ck, b, mlp, E, I, H)
        entries += [
            vector(b + "ffn_gate_inp_shexp.weight", mlp + "shared_expert_gate", (H,)),
            matrix(b + "ffn_gate_shexp.weight", mlp + "shared_expert.gate_proj", (S, H)),
            matrix(b + "ffn_up_shexp.weight", mlp + "shared_expert.up_proj", (S, H)),
            matrix(b + "ffn_down_shexp.weight", mlp + "shared_expert.down_proj", (H, S)),
        ]
    entries += [vector("output_norm.weight", "norm", (H,), lambda a: a + shift),
                matrix("output.weight", ck.lm_head, (cfg.vocab, H))]
    return entries


def expert_entries(ck: Checkpoint, b: str, mlp: str, E: int, I: int, H: int) -> list[Entry]:
    per = 16  # experts dequantized at a time: at the 35B shape 64 MiB of float32 per slice
    chunks = -(-E // per)
    if ck.has(mlp + "switch_mlp.gate_proj"):  # MLX: stacked, separate gate/up
        def stacked(module: str):
            return lambda c: ck.weight(module, c * per, min(per, E - c * per))
        names = [("gate", "switch_mlp.gate_proj", (E, I, H)), ("up", "switch_mlp.up_proj", (E, I, H)),
                 ("down", "switch_mlp.down_proj", (E, H, I))]
        return [Entry(f"{b}ffn_{k}_exps.weight", shape, True, ck.bits(mlp + m), stacked(mlp + m), chunks)
                for k, m, shape in names]
    if ck.has(mlp + "experts.gate_up_proj"):  # HF: fused gate_up [E, 2I, H], gate rows first
        def fused(rows: slice):
            return lambda c: ck.weight(mlp + "experts.gate_up_proj", c * per, min(per, E - c * per))[:, rows]
        down = lambda c: ck.weight(mlp + "experts.down_proj", c * per, min(per, E - c * per))
        return [Entry(b + "ffn_gate_exps.weight", (E, I, H), True, None, fused(slice(0, I)), chunks),
                Entry(b + "ffn_up_exps.weight", (E, I, H), True, None, fused(slice(I, 2 * I)), chunks),
                Entry(b + "ffn_down_exps.weight", (E, H, I), True, None, down, chunks)]
    raise ValueError(f"{ck.folder}: {ck.prefix}{mlp}: neither switch_mlp.* (MLX) nor experts.gate_up_proj (HF) "
                     "experts; per-expert tensors are not supported by this converter")
