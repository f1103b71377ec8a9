"""The embedded model's tokenizer: byte-level BPE in Qwen3.5's pre-tokenizer style (docs/model.md §5:
NFC, the Split regex with \\p{M}, ByteLevel without prefix space, ByteLevel decoder), trained with the
`tokenizers` library on the training text; ChatML special tokens appended after the BPE vocabulary as
Qwen does. Also writes tokenizer_config.json (with our own ChatML chat template that understands
`enable_thinking`) and generation_config.json.
"""

import json
import os

# Qwen3.5-family pre-tokenizer regex (docs/model.md §5).
QWEN35_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
    r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
THINK_TOKENS = ["<think>", "</think>"]  # matched atomically, but kept by skip_special_tokens (as in Qwen)
EOT, IM_END = "<|endoftext|>", "<|im_end|>"

# ChatML. Earlier assistant turns lose their <think>...</think> part; the generation prompt opens a
# thinking block, or an empty one when enable_thinking is false.
CHAT_TEMPLATE = (
    "{%- set ns = namespace(last_user=-1) -%}"
    "{%- for m in messages -%}{%- if m['role'] == 'user' -%}{%- set ns.last_user = loop.index0 -%}{%- endif -%}{%- endfor -%}"
    "{%- for m in messages -%}"
    "{%- set content = m['content'] if m['content'] is string else '' -%}"
    "{%- if m['role'] == 'assistant' and loop.index0 < ns.last_user and '</think>' in content -%}"
    "{%- set content = content.split('</think>')[-1].lstrip('\\n') -%}"
    "{%- endif -%}"
    "{{- '<|im_start|>' + m['role'] + '\\n' + content + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- if enable_thinking is defined and enable_thinking is false -%}{{- '<think>\\n\\n</think>\\n\\n' -}}"
    "{%- else -%}{{- '<think>\\n' -}}{%- endif -%}"
    "{%- endif -%}"
)


def train_tokenizer(texts, bpe_vocab_size: int):
    """Returns a tokenizers.Tokenizer trained on the iterable of strings."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN35_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=bpe_vocab_size,
        min_frequency=2,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
    )
    tok.train_from_iterator(texts, trainer=trainer)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in THINK_TOKENS])
    return tok


def token_ids(tok) -> dict:
    ids = {t: tok.token_to_id(t) for t in SPECIAL_TOKENS + THINK_TOKENS}
    missing = [t for t, i in ids.items() if i is None]
    if missing:
        raise RuntimeError(f"tokenizer lacks {missing}")
    return ids


def write_tokenizer_files(tok, directory: str, max_length: int) -> None:
    """tokenizer.json, tokenizer_config.json, generation_config.json."""
    ids = token_ids(tok)
    tok.save(os.path.join(directory, "tokenizer.json"))
    added = {}
    for t in SPECIAL_TOKENS + THINK_TOKENS:
        added[str(ids[t])] = {
            "content": t,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": t in SPECIAL_TOKENS,
        }
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "add_bos_token": False,
        "add_prefix_space": False,
        "bos_token": None,
        "eos_token": IM_END,
        "pad_token": EOT,
        "unk_token": None,
        "model_max_length": max_length,
        "clean_up_tokenization_spaces": False,
        "split_special_tokens": False,
        "errors": "replace",
        "added_tokens_decoder": added,
        "chat_template": CHAT_TEMPLATE,
    }
    with open(os.path.join(directory, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=1, ensure_ascii=False)
        f.write("\n")
    generation = {
        "bos_token_id": ids[EOT],
        "eos_token_id": [ids[IM_END], ids[EOT]],
        "pad_token_id": ids[EOT],
        "do_sample": True,
        "temperature": 0.7,
        "top_k": 20,
        "top_p": 0.95,
    }
    with open(os.path.join(directory, "generation_config.json"), "w") as f:
        json.dump(generation, f, indent=1)
        f.write("\n")
