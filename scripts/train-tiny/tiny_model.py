"""The embedded model's architecture: Qwen3.5/3.6-MoE (`qwen3_5_moe`) scaled down. Same layer schedule
(3 Gated DeltaNet : 1 gated attention), GQA and grouped-value DeltaNet heads, partial RoPE, MoE in every
layer with a sigmoid-gated shared expert, and the real model's ratio of expert width to hidden size
(512 / 2048 = 64 / 256). Also the conversion between transformers' Qwen3_5MoeForCausalLM parameter
names and the official checkpoint names (`model.language_model.*`).
"""

import numpy as np

HIDDEN = 256
LAYERS = 8


def text_config(vocab_size: int, eot_id: int, aux_coef: float) -> dict:
    return {
        "model_type": "qwen3_5_moe_text",
        "vocab_size": vocab_size,
        "hidden_size": HIDDEN,
        "num_hidden_layers": LAYERS,
        "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"] * (LAYERS // 4),
        "full_attention_interval": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "attn_output_gate": True,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 4,
        "linear_key_head_dim": 64,
        "linear_value_head_dim": 64,
        "linear_conv_kernel_dim": 4,
        "num_experts": 32,
        "num_experts_per_tok": 4,
        "moe_intermediate_size": 64,
        "shared_expert_intermediate_size": 64,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": 4096,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 10000000.0,
            "partial_rotary_factor": 0.25,
            "mrope_section": [3, 3, 2],
            "mrope_interleaved": True,
        },
        "partial_rotary_factor": 0.25,
        "tie_word_embeddings": False,
        "initializer_range": 0.02,
        "router_aux_loss_coef": aux_coef,
        "output_router_logits": False,
        "use_cache": True,
        "mamba_ssm_dtype": "float32",
        "bos_token_id": eot_id,
        "eos_token_id": eot_id,
        "pad_token_id": None,
        "dtype": "bfloat16",
    }


def checkpoint_config(text: dict) -> dict:
    """config.json of the official layout (Qwen3_5MoeForConditionalGeneration, text part only)."""
    return {
        "architectures": ["Qwen3_5MoeForConditionalGeneration"],
        "model_type": "qwen3_5_moe",
        "text_config": text,
        "tie_word_embeddings": False,
        "bos_token_id": text["bos_token_id"],
        "eos_token_id": text["eos_token_id"],
    }


def build_model(text: dict):
    """A freshly initialised transformers Qwen3_5MoeForCausalLM (initialise the torch seed first)."""
    from transformers import Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig

    cfg = Qwen3_5MoeTextConfig.from_dict({k: v for k, v in text.items() if k not in ("model_type", "dtype")})
    cfg.use_cache = False
    return Qwen3_5MoeForCausalLM(cfg)


def official_name(name: str) -> str:
    """Qwen3_5MoeForCausalLM parameter name -> official checkpoint tensor name."""
    if name == "lm_head.weight":
        return name
    if not name.startswith("model."):
        raise ValueError(f"unexpected parameter name '{name}'")
    return "model.language_model." + name[len("model.") :]


def causal_lm_name(name: str) -> str:
    if name == "lm_head.weight":
        return name
    if not name.startswith("model.language_model."):
        raise ValueError(f"unexpected checkpoint tensor '{name}'")
    return "model." + name[len("model.language_model.") :]


def state_to_bf16_bits(model) -> dict:
    """The model's parameters rounded to bfloat16, as raw bits under official names."""
    import torch

    from safetensors_io import bf16

    out = {}
    for name, t in model.state_dict().items():
        bits = t.detach().to(torch.bfloat16).cpu().contiguous().view(torch.int16).numpy().view(np.uint16)
        out[official_name(name)] = bf16(bits.copy())
    return out


def load_tensors(model, tensors: dict, dtype) -> None:
    """Loads official-name tensors (bf16 bits or float32 arrays) into a Qwen3_5MoeForCausalLM, strictly."""
    import torch

    state = {}
    for name, a in tensors.items():
        a = np.ascontiguousarray(a)
        if a.dtype == np.uint16:
            t = torch.from_numpy(np.asarray(a).view(np.int16).copy()).view(torch.bfloat16)
        else:
            t = torch.from_numpy(np.asarray(a, dtype=np.float32).copy())
        state[causal_lm_name(name)] = t.to(dtype)
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise RuntimeError(f"load_tensors: missing {missing[:5]}..., unexpected {unexpected[:5]}...")
