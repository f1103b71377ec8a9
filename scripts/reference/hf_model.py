"""transformers' Qwen3_5MoeForCausalLM (or, for the dense qwen3_5, Qwen3_5ForCausalLM) built from
canonical float32 weights, run in float32 on the CPU with eager attention and the torch fallbacks, plus
forward hooks that record the residual stream and, in a mixture of experts, the router of every layer."""

import importlib.util
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

# Config keys that describe the file rather than the model.
_NOT_MODEL_CONFIG = {"model_type", "architectures", "quantization", "quantization_config", "dtype", "transformers_version"}


def environment() -> str:
    import transformers

    fast = [p for p in ("fla", "causal_conv1d", "kernels") if importlib.util.find_spec(p) is not None]
    return (
        f"torch {torch.__version__}, transformers {transformers.__version__}, "
        f"{torch.get_num_threads()} CPU threads, optional kernel packages present: {fast or 'none'}"
    )


def model_classes(text_config: dict):
    """(causal LM class, text config class) for a text config's model_type."""
    import transformers

    if text_config["model_type"] == "qwen3_5_text":
        return transformers.Qwen3_5ForCausalLM, transformers.Qwen3_5TextConfig
    return transformers.Qwen3_5MoeForCausalLM, transformers.Qwen3_5MoeTextConfig


def build_model(text_config: dict, weights: dict[str, np.ndarray]):
    model_class, config_class = model_classes(text_config)
    fields = {k: v for k, v in text_config.items() if k not in _NOT_MODEL_CONFIG}
    try:
        config = config_class.from_dict(fields)
    except Exception as e:  # a config class that rejects unknown keys: keep the ones it knows
        known = set(config_class().to_dict())
        print(f"  config rejected extra keys ({e}); dropping {sorted(set(fields) - known)}")
        config = config_class.from_dict({k: v for k, v in fields.items() if k in known})
    # Eager attention and the plain per-expert loop: the reference implementations.
    for attr in ("_attn_implementation", "_experts_implementation"):
        try:
            setattr(config, attr, "eager")
        except Exception:
            pass
    torch.manual_seed(0)
    model = model_class(config).float().eval()
    if model.config._attn_implementation != "eager":
        model.set_attn_implementation("eager")
    if model.config._attn_implementation != "eager":
        raise SystemExit(f"attention implementation is {model.config._attn_implementation}, expected eager")
    if getattr(model.config, "_experts_implementation", None) not in (None, "eager") and hasattr(model, "set_experts_implementation"):
        model.set_experts_implementation("eager")
    params = dict(model.named_parameters())
    missing = sorted(set(params) - set(weights))
    unexpected = sorted(set(weights) - set(params))
    if missing or unexpected:
        raise SystemExit(f"checkpoint/model mismatch: missing {missing[:8]}, unexpected {unexpected[:8]}")
    with torch.no_grad():
        for name, param in params.items():
            if tuple(param.shape) != weights[name].shape:
                raise SystemExit(f"{name}: model wants {tuple(param.shape)}, checkpoint has {weights[name].shape}")
            if param.dtype != torch.float32:
                raise SystemExit(f"{name} is {param.dtype}, expected float32")
            param.copy_(torch.from_numpy(np.ascontiguousarray(weights[name])))
    return model


def implementations(model) -> str:
    cfg = model.config
    return f"attention {cfg._attn_implementation}, experts {getattr(cfg, '_experts_implementation', None)}"


def decoder_layers(model) -> list:
    return list(model.model.layers)


def layer_output(output) -> torch.Tensor:
    """A decoder layer returns the residual stream, or a tuple starting with it in some versions."""
    return output[0] if isinstance(output, (tuple, list)) else output


def replace_layer_output(output, value: torch.Tensor):
    if isinstance(output, (tuple, list)):
        return (value, *output[1:])
    return value


def routing(logits: torch.Tensor, k: int, disabled=()) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(masked logits, renormalized top-k weights, top-k ids): softmax over all experts in float32
    (disabled experts at -inf), top-k in descending order, weights renormalized to sum 1."""
    masked = logits.clone()
    if len(disabled):
        masked[:, list(disabled)] = float("-inf")
    probs = torch.softmax(masked, dim=-1, dtype=torch.float32)
    top, ids = torch.topk(probs, k, dim=-1)
    top = top / top.sum(dim=-1, keepdim=True)
    return masked, top.to(logits.dtype), ids


@dataclass
class RouterSignature:
    """Where the router module's outputs are in its returned tuple (found from one real call)."""

    logits_at: int
    logits_are_probs: bool
    weights_at: int
    ids_at: int
    size: int


def read_router_output(output, num_experts: int, k: int) -> RouterSignature:
    if not isinstance(output, (tuple, list)):
        raise SystemExit(f"router returned {type(output).__name__}; expected a tuple (logits, weights, ids)")
    ids_at = [i for i, t in enumerate(output) if torch.is_tensor(t) and not t.is_floating_point()]
    full = [i for i, t in enumerate(output) if torch.is_tensor(t) and t.is_floating_point() and t.shape[-1] == num_experts]
    top = [i for i, t in enumerate(output) if torch.is_tensor(t) and t.is_floating_point() and t.shape[-1] == k]
    if len(ids_at) != 1 or len(full) != 1 or len(top) != 1:
        shapes = [tuple(t.shape) if torch.is_tensor(t) else type(t).__name__ for t in output]
        raise SystemExit(f"cannot read the router's output {shapes}")
    probs = output[full[0]].float()
    is_probs = bool(torch.all(probs >= 0)) and bool(torch.allclose(probs.sum(-1), torch.ones_like(probs[:, 0])))
    return RouterSignature(full[0], is_probs, top[0], ids_at[0], len(output))


def has_router(model) -> bool:
    """A mixture of experts (its MLP has a router `gate`), not a dense MLP (gate_proj, up_proj, down_proj)."""
    return hasattr(decoder_layers(model)[0].mlp, "gate")


class Recorder:
    """Records, for one forward call, the residual stream after each decoder layer and, in a mixture
    of experts, each layer's router (logits computed from the router's input, ids and weights as the
    router returned them). Also checks that routing() reproduces the router exactly, since the ablation
    relies on it."""

    def __init__(self, model):
        self.model = model
        self.layers = decoder_layers(model)
        cfg = model.config
        self.routed = has_router(model)
        self.num_experts = cfg.num_experts if self.routed else 0
        self.k = cfg.num_experts_per_tok if self.routed else 0
        self.hidden: list = [None] * len(self.layers)
        self.router_logits: list = [None] * len(self.layers)
        self.router_ids: list = [None] * len(self.layers)
        self.router_weights: list = [None] * len(self.layers)
        self.routing_mismatch: str | None = None  # set when routing() differs from the router
        self._handles: list = []

    def __enter__(self) -> "Recorder":
        for i, layer in enumerate(self.layers):
            self._handles.append(layer.register_forward_hook(self._layer_hook(i)))
            if self.routed:
                self._handles.append(layer.mlp.gate.register_forward_hook(self._router_hook(i)))
        return self

    def __exit__(self, *exc) -> None:
        for h in self._handles:
            h.remove()

    def _layer_hook(self, i: int):
        def hook(module, args, output):
            self.hidden[i] = layer_output(output).detach()[0].clone()

        return hook

    def _router_hook(self, i: int):
        def hook(module, args, output):
            x = args[0].reshape(-1, module.weight.shape[1])
            logits = F.linear(x, module.weight)
            sig = read_router_output(output, self.num_experts, self.k)
            ids = output[sig.ids_at]
            weights = output[sig.weights_at]
            self.router_logits[i] = logits.detach().clone()
            self.router_ids[i] = ids.detach().clone()
            self.router_weights[i] = weights.detach().clone()
            disabled = getattr(module, "_disabled_experts", ())
            _, my_weights, my_ids = routing(logits, self.k, disabled)
            if not torch.equal(my_ids, ids) or not torch.equal(my_weights, weights):
                self.routing_mismatch = (
                    f"layer {i}: routing() does not reproduce the router (ids equal: {torch.equal(my_ids, ids)}, "
                    f"max weight diff {float((my_weights - weights).abs().max())})"
                )

        return hook

    def arrays(self) -> dict[str, np.ndarray]:
        if not self.routed:
            return {"hidden": torch.stack(self.hidden).numpy()}
        return {
            "hidden": torch.stack(self.hidden).numpy(),
            "router_logits": torch.stack(self.router_logits).numpy(),
            "router_ids": torch.stack(self.router_ids).to(torch.int32).numpy(),
            "router_weights": torch.stack(self.router_weights).float().numpy(),
        }


@torch.no_grad()
def logits_of(model, ids) -> np.ndarray:
    """Teacher-forced logits [T, vocab] of one forward over the whole prompt, no cache."""
    out = model(input_ids=torch.tensor([list(ids)], dtype=torch.long), use_cache=False)
    return out.logits[0].float().numpy()


@torch.no_grad()
def recorded_prefill(model, ids) -> tuple[dict[str, np.ndarray], Recorder]:
    with Recorder(model) as rec:
        logits = logits_of(model, ids)
    return {"logits": logits, **rec.arrays()}, rec


@torch.no_grad()
def greedy(model, ids, steps: int) -> tuple[np.ndarray, np.ndarray, float]:
    """Greedy decode through the KV/recurrent cache: (ids [steps], logits [steps, vocab] after feeding
    each id, smallest top-1/top-2 gap over the prefill's last position and every step, in units of the
    logits' std)."""
    out = model(input_ids=torch.tensor([list(ids)], dtype=torch.long), use_cache=True)
    cache = out.past_key_values
    last = out.logits[0, -1].float()
    gaps = [_gap(last)]
    fed, logits = [], []
    for _ in range(steps):
        token = int(torch.argmax(last))
        fed.append(token)
        out = model(input_ids=torch.tensor([[token]], dtype=torch.long), past_key_values=cache, use_cache=True)
        cache = out.past_key_values
        last = out.logits[0, -1].float()
        logits.append(last.numpy().copy())
        gaps.append(_gap(last))
    return np.array(fed, dtype=np.int32), np.stack(logits), min(gaps)


def _gap(logits: torch.Tensor) -> float:
    top2 = torch.topk(logits, 2).values
    return float((top2[0] - top2[1]) / logits.std())
