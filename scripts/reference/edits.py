"""Interventions on a transformers Qwen3_5MoeForCausalLM, as context managers that install forward
hooks (or swap one router's forward) and remove them on exit. Semantics are in README.md."""

from contextlib import contextmanager

import torch

from hf_model import decoder_layers, layer_output, read_router_output, replace_layer_output, routing


@contextmanager
def disabled_experts(model, layer: int, experts: list[int]):
    """In `layer`, the router logits of `experts` are -inf before the softmax, so top-k and the
    renormalisation run over the remaining experts."""
    gate = decoder_layers(model)[layer].mlp.gate
    cfg = model.config
    original = gate.forward
    probe = original(torch.zeros(1, gate.weight.shape[1], dtype=gate.weight.dtype))
    sig = read_router_output(probe, cfg.num_experts, cfg.num_experts_per_tok)

    def forward(hidden_states, *args, **kwargs):
        logits = torch.nn.functional.linear(hidden_states.reshape(-1, gate.weight.shape[1]), gate.weight)
        masked, weights, ids = routing(logits, cfg.num_experts_per_tok, experts)
        full = torch.softmax(masked, dim=-1, dtype=torch.float32).to(logits.dtype) if sig.logits_are_probs else masked
        out: list = [None] * sig.size
        out[sig.logits_at], out[sig.weights_at], out[sig.ids_at] = full, weights, ids
        return tuple(out)

    own_forward = gate.__dict__.get("forward")
    gate.forward = forward
    gate._disabled_experts = tuple(experts)  # read by hf_model.Recorder's routing check
    try:
        yield
    finally:
        if own_forward is None:
            del gate.forward  # back to the class's forward
        else:
            gate.forward = own_forward
        del gate._disabled_experts


@contextmanager
def _layer_hook(model, layer: int, edit):
    handle = decoder_layers(model)[layer].register_forward_hook(
        lambda module, args, output: replace_layer_output(output, edit(layer_output(output)))
    )
    try:
        yield
    finally:
        handle.remove()


def steering(model, layer: int, vector: torch.Tensor):
    """Adds `vector` to the residual stream after `layer` (the decoder layer's output), at every position."""
    return _layer_hook(model, layer, lambda h: h + vector.to(h.dtype))


def residual_patch(model, layer: int, position: int, value: torch.Tensor):
    """Replaces the residual stream after `layer` at `position` with `value`."""

    def edit(h):
        h = h.clone()
        h[:, position] = value.to(h.dtype)
        return h

    return _layer_hook(model, layer, edit)


@contextmanager
def residual_capture(model, layer: int):
    """Yields a dict whose "value" becomes the residual stream after `layer` ([T, hidden]) of the
    forward run inside the block."""
    captured: dict = {}

    def hook(module, args, output):
        captured["value"] = layer_output(output).detach()[0].clone()

    handle = decoder_layers(model)[layer].register_forward_hook(hook)
    try:
        yield captured
    finally:
        handle.remove()


@contextmanager
def shared_expert_off(model):
    """Every layer's shared expert contributes nothing: its output is zero, so the sigmoid-gated
    term sigmoid(x·w_gate) * shared(x) is zero."""
    handles = [
        layer.mlp.shared_expert.register_forward_hook(lambda module, args, output: torch.zeros_like(output))
        for layer in decoder_layers(model)
    ]
    try:
        yield
    finally:
        for h in handles:
            h.remove()
