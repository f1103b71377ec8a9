"""Random weights for a spec, by canonical name (the parameter names of transformers'
Qwen3_5MoeForCausalLM or, for the dense qwen3_5, Qwen3_5ForCausalLM: model.*, lm_head.weight), as
float32 masters before any storage rounding.

Scales keep activations O(1) through the layers. Norm weights, A_log, dt_bias and the conv taps are
random rather than their init values so that convention mistakes (1+w vs w, tap order, decay sign)
change the outputs. A_log spans [-4, 1], so some DeltaNet heads remember ~100 tokens (across chunk
boundaries) and others forget within a few.
"""

import numpy as np

ZERO_CENTRED_NORMS = (
    "input_layernorm.weight",
    "post_attention_layernorm.weight",
    "self_attn.q_norm.weight",
    "self_attn.k_norm.weight",
)
FINAL_NORM = "model.norm.weight"


def is_zero_centred_norm(name: str) -> bool:
    return name == FINAL_NORM or name.endswith(ZERO_CENTRED_NORMS)


def is_dense(cfg: dict) -> bool:
    """The dense qwen3_5 (a SwiGLU MLP per layer) rather than qwen3_5_moe."""
    return cfg["model_type"] == "qwen3_5_text"


def shapes(cfg: dict) -> dict[str, tuple[int, ...]]:
    """Every parameter's canonical name and shape, in a fixed order."""
    H = cfg["hidden_size"]
    V = cfg["vocab_size"]
    hd = cfg["head_dim"]
    nh = cfg["num_attention_heads"]
    nkv = cfg["num_key_value_heads"]
    Hk, Hv = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
    Dk, Dv = cfg["linear_key_head_dim"], cfg["linear_value_head_dim"]
    K = cfg["linear_conv_kernel_dim"]
    conv_dim = 2 * Hk * Dk + Hv * Dv

    out: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (V, H)}
    for i, kind in enumerate(cfg["layer_types"]):
        p = f"model.layers.{i}."
        out[p + "input_layernorm.weight"] = (H,)
        if kind == "linear_attention":
            a = p + "linear_attn."
            out[a + "in_proj_qkv.weight"] = (conv_dim, H)
            out[a + "in_proj_z.weight"] = (Hv * Dv, H)
            out[a + "in_proj_b.weight"] = (Hv, H)
            out[a + "in_proj_a.weight"] = (Hv, H)
            out[a + "conv1d.weight"] = (conv_dim, 1, K)
            out[a + "A_log"] = (Hv,)
            out[a + "dt_bias"] = (Hv,)
            out[a + "norm.weight"] = (Dv,)
            out[a + "out_proj.weight"] = (H, Hv * Dv)
        elif kind == "full_attention":
            a = p + "self_attn."
            out[a + "q_proj.weight"] = (nh * hd * 2, H)
            out[a + "k_proj.weight"] = (nkv * hd, H)
            out[a + "v_proj.weight"] = (nkv * hd, H)
            out[a + "o_proj.weight"] = (H, nh * hd)
            out[a + "q_norm.weight"] = (hd,)
            out[a + "k_norm.weight"] = (hd,)
        else:
            raise ValueError(f"layer {i}: unknown layer type {kind}")
        out[p + "post_attention_layernorm.weight"] = (H,)
        m = p + "mlp."
        if is_dense(cfg):
            I = cfg["intermediate_size"]
            out[m + "gate_proj.weight"] = (I, H)
            out[m + "up_proj.weight"] = (I, H)
            out[m + "down_proj.weight"] = (H, I)
            continue
        E = cfg["num_experts"]
        I = cfg["moe_intermediate_size"]
        Is = cfg["shared_expert_intermediate_size"]
        out[m + "gate.weight"] = (E, H)
        out[m + "experts.gate_up_proj"] = (E, 2 * I, H)
        out[m + "experts.down_proj"] = (E, H, I)
        out[m + "shared_expert.gate_proj.weight"] = (Is, H)
        out[m + "shared_expert.up_proj.weight"] = (Is, H)
        out[m + "shared_expert.down_proj.weight"] = (H, Is)
        out[m + "shared_expert_gate.weight"] = (1, H)
    out[FINAL_NORM] = (H,)
    out["lm_head.weight"] = (V, H)
    return out


def _sample(name: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    if name == "model.embed_tokens.weight":
        return rng.standard_normal(shape)
    if is_zero_centred_norm(name):
        return np.clip(rng.normal(0.0, 0.15, shape), -0.45, 0.45)
    if name.endswith("linear_attn.norm.weight"):
        return 1.0 + np.clip(rng.normal(0.0, 0.15, shape), -0.45, 0.45)
    if name.endswith("A_log"):
        return rng.uniform(-4.0, 1.0, shape)
    if name.endswith("dt_bias"):
        return rng.uniform(-0.5, 0.5, shape)
    if name.endswith("conv1d.weight"):
        return rng.normal(0.0, 0.4, shape)
    fan_in = shape[-1]
    if name == "lm_head.weight":
        return rng.normal(0.0, 2.5 / np.sqrt(fan_in), shape)
    if name.endswith("mlp.gate.weight"):
        # A peaked router, so that top-k choices are rarely near-ties.
        return rng.normal(0.0, 2.0 / np.sqrt(fan_in), shape)
    return rng.normal(0.0, 1.0 / np.sqrt(fan_in), shape)


def random_weights(cfg: dict, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {name: _sample(name, shape, rng).astype(np.float32) for name, shape in shapes(cfg).items()}


def mtp_shapes(cfg: dict) -> dict[str, tuple[int, ...]]:
    """A few tensors of a multi-token-prediction head, as Qwen3.5 checkpoints carry (to be skipped)."""
    H = cfg["hidden_size"]
    return {
        "mtp.fc.weight": (H, 2 * H),
        "mtp.pre_fc_norm_embedding.weight": (H,),
        "mtp.pre_fc_norm_hidden.weight": (H,),
        "mtp.layers.0.input_layernorm.weight": (H,),
        "mtp.layers.0.mlp.gate.weight": (cfg.get("num_experts", 1), H),
        "mtp.norm.weight": (H,),
    }
