"""The fixtures this generator makes: model configs, checkpoint layouts, prompts and edits.

Each fixture is a tiny random model of the exact text architecture of the Qwen3.5 family: qwen3_5_moe
(t2, t3) or the dense qwen3_5 (t4). Sizes are chosen to
exercise the shapes real checkpoints have (value heads = 2-4 x key heads, GQA groups > 1, partial RoPE,
many experts) while keeping the committed files small.
"""

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Quant:
    """An MLX quantization: bits and group size."""

    bits: int
    group_size: int


@dataclass(frozen=True)
class MlxLayout:
    default: Quant
    # (module suffix, quantization): every module whose path ends with the suffix gets it. Listed per
    # module in config.json `quantization`, as mlx-community does.
    overrides: tuple[tuple[str, Quant], ...]


@dataclass(frozen=True)
class Interventions:
    """Edits replayed in transformers (semantics in README.md)."""

    ablate_layer: int
    ablate_count: int  # how many of the layer's most used experts (on p0) to disable
    steer_layer: int
    steer_tokens: int
    patch_layer: int
    patch_position: int
    patch_tokens: int
    shared_off_tokens: int


@dataclass(frozen=True)
class FixtureSpec:
    name: str
    seed: int
    text_config: dict
    # "qwen3_5_moe": multimodal wrapper config with text_config, keys model.language_model.*;
    # "qwen3_5_moe_text": text-only config, keys model.* (Qwen3_5MoeForCausalLM);
    # "qwen3_5_text": the dense model's text-only config, keys model.* (Qwen3_5ForCausalLM).
    top_level: str
    prompt_lengths: tuple[int, ...]
    greedy_steps: int = 24
    hf_shards: int = 1
    hf_f32: tuple[str, ...] = ()  # name suffixes stored F32 in the HF checkpoint (Qwen3.5 A_log, norm)
    hf_extra_mtp: bool = False  # add mtp.* tensors that loaders must skip
    vision_config: dict | None = None
    mlx: MlxLayout | None = None
    interventions: Interventions | None = None
    extra_config: dict = field(default_factory=dict)

    @property
    def layouts(self) -> tuple[str, ...]:
        return ("hf", "mlx") if self.mlx else ("hf",)


def _layer_types(n: int, interval: int) -> list[str]:
    return ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(n)]


def _text_config(**kw) -> dict:
    rotary = kw.pop("partial_rotary_factor")
    mrope = kw.pop("mrope_section")
    theta = kw.pop("rope_theta")
    model_type = kw.pop("model_type", "qwen3_5_moe_text")
    cfg = {
        "model_type": model_type,
        **kw,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-06,
        "max_position_embeddings": 4096,
        "tie_word_embeddings": False,
        "attn_output_gate": True,
        "attention_bias": False,
        "full_attention_interval": 4,
        "layer_types": _layer_types(kw["num_hidden_layers"], 4),
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": theta,
            "partial_rotary_factor": rotary,
            "mrope_section": mrope,
            "mrope_interleaved": True,
        },
        "partial_rotary_factor": rotary,
        "dtype": "bfloat16",
    }
    return cfg


# t2: real head ratios. 8 layers, GQA group 4, DeltaNet value heads = 2 x key heads, 32 experts top-8,
# a 160-token prompt (three 64-token chunks, past 128), MLX with mixed bits and group sizes.
T2 = FixtureSpec(
    name="t2",
    seed=2,
    top_level="qwen3_5_moe",
    text_config=_text_config(
        vocab_size=2048,
        hidden_size=128,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=2,
        head_dim=64,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        linear_key_head_dim=64,
        linear_value_head_dim=64,
        linear_conv_kernel_dim=4,
        num_experts=32,
        num_experts_per_tok=8,
        moe_intermediate_size=64,
        shared_expert_intermediate_size=128,
        partial_rotary_factor=0.25,
        mrope_section=[3, 3, 2],
        rope_theta=10000000.0,
        bos_token_id=None,
        eos_token_id=[2047],
    ),
    # A small but complete vision_config, as real configs carry one: loaders must ignore it.
    vision_config={
        "model_type": "qwen3_5_moe_vision",
        "depth": 1,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_heads": 2,
        "patch_size": 16,
        "temporal_patch_size": 2,
        "spatial_merge_size": 2,
        "in_channels": 3,
        "num_position_embeddings": 64,
        "out_hidden_size": 128,
        "hidden_act": "gelu_pytorch_tanh",
        "deepstack_visual_indexes": [],
    },
    prompt_lengths=(160, 2, 1),
    mlx=MlxLayout(
        default=Quant(4, 64),
        overrides=(
            ("mlp.gate", Quant(8, 64)),
            ("mlp.shared_expert_gate", Quant(8, 64)),
            ("linear_attn.out_proj", Quant(4, 32)),
            ("lm_head", Quant(8, 32)),
        ),
    ),
    interventions=Interventions(
        ablate_layer=1,
        ablate_count=2,
        steer_layer=3,
        steer_tokens=80,
        patch_layer=2,
        patch_position=40,
        patch_tokens=80,
        shared_off_tokens=80,
    ),
)

# t3: a Qwen3.5-era text-only checkpoint: top-level qwen3_5_moe_text, keys model.layers.*, A_log and
# linear_attn.norm in F32, two shards with an index, mtp.* tensors to skip. Other sizes again: hidden 96,
# GQA group 3, DeltaNet value heads = 3 x key heads, head_dim 32 (8 rotary dims), 16 experts top-2, an
# int eos_token_id, and a prompt of exactly one 64-token chunk.
T3 = FixtureSpec(
    name="t3",
    seed=3,
    top_level="qwen3_5_moe_text",
    text_config=_text_config(
        vocab_size=1000,
        hidden_size=96,
        num_hidden_layers=4,
        num_attention_heads=6,
        num_key_value_heads=2,
        head_dim=32,
        linear_num_key_heads=2,
        linear_num_value_heads=6,
        linear_key_head_dim=32,
        linear_value_head_dim=32,
        linear_conv_kernel_dim=4,
        num_experts=16,
        num_experts_per_tok=2,
        moe_intermediate_size=48,
        shared_expert_intermediate_size=64,
        partial_rotary_factor=0.25,
        mrope_section=[2, 1, 1],
        rope_theta=1000000.0,
        bos_token_id=None,
        eos_token_id=999,
    ),
    extra_config={
        "architectures": ["Qwen3_5MoeForCausalLM"],
        "mtp_num_hidden_layers": 1,
        "mtp_use_dedicated_embeddings": False,
        "mamba_ssm_dtype": "float32",
        "output_router_logits": False,
        "router_aux_loss_coef": 0.001,
        "initializer_range": 0.02,
        "use_cache": True,
        "pad_token_id": None,
    },
    prompt_lengths=(130, 2, 1, 64),
    hf_shards=2,
    hf_f32=("linear_attn.A_log", "linear_attn.norm.weight"),
    hf_extra_mtp=True,
)

# t4: the dense hybrid qwen3_5 (Qwen3_5ForCausalLM): a SwiGLU MLP of intermediate_size in every layer
# instead of the experts. Text-only config and keys model.*, both layouts. Other sizes again: hidden 64,
# 4 query / 1 KV heads (GQA group 4) of head_dim 32 (8 rotary dims), DeltaNet 2 key / 4 value heads of
# dim 32, MLP width 192, vocab 512; prompts of 100, 2 and 1 tokens.
T4 = FixtureSpec(
    name="t4",
    seed=4,
    top_level="qwen3_5_text",
    text_config=_text_config(
        model_type="qwen3_5_text",
        vocab_size=512,
        hidden_size=64,
        intermediate_size=192,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=32,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        linear_key_head_dim=32,
        linear_value_head_dim=32,
        linear_conv_kernel_dim=4,
        partial_rotary_factor=0.25,
        mrope_section=[2, 1, 1],
        rope_theta=10000000.0,
        bos_token_id=None,
        eos_token_id=[511],
    ),
    extra_config={"architectures": ["Qwen3_5ForCausalLM"]},
    prompt_lengths=(100, 2, 1),
    mlx=MlxLayout(default=Quant(4, 32), overrides=(("lm_head", Quant(8, 32)),)),
)

FIXTURES = {s.name: s for s in (T2, T3, T4)}
