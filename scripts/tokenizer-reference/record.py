"""Records the reference outputs that test/tokenizer.test.ts and test/chat.test.ts compare against.

For each tokenizer folder (NAME=DIR arguments, or by default every entry of
test/data/tokenizer-dirs.json): the ids, offsets and decodings that Python `tokenizers` gives for
every string of test/data/tokenizer-corpus.json, and the prompts that transformers'
apply_chat_template renders for every conversation of test/data/chat-conversations.json.
Writes OUT/tokenizer-NAME.json and OUT/chat-NAME.json; copy them to test/data/tokenizer-reference/
and test/data/chat-reference/.

Run from the repository root on any machine with `pip install transformers`, with the folders that
git ignores (node_modules/...) in place:
  HF_HUB_OFFLINE=1 python3 scripts/tokenizer-reference/record.py OUT [NAME=DIR ...]
"""
import json
import os
import sys
import traceback

import tokenizers
import transformers
from tokenizers import Tokenizer


def load_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def record_tokenizer(tok, corpus):
    rows = []
    for entry in corpus:
        enc = tok.encode(entry["text"], add_special_tokens=False)
        rows.append({
            "ids": enc.ids,
            "offsets": [list(o) for o in enc.offsets],  # code-point offsets into the input
            "decoded": tok.decode(enc.ids, skip_special_tokens=False),
            "decodedSkipSpecial": tok.decode(enc.ids, skip_special_tokens=True),
        })
    return rows


def hf_tokenizer(folder):
    """transformers' tokenizer for the folder, as apply_chat_template users get it."""
    try:
        return transformers.AutoTokenizer.from_pretrained(folder), "AutoTokenizer"
    except Exception:
        traceback.print_exc()
    tok = transformers.PreTrainedTokenizerFast(tokenizer_file=os.path.join(folder, "tokenizer.json"))
    jinja = os.path.join(folder, "chat_template.jinja")
    if os.path.exists(jinja):
        with open(jinja, encoding="utf-8") as f:
            tok.chat_template = f.read()
    else:
        tok.chat_template = load_json(os.path.join(folder, "tokenizer_config.json"))["chat_template"]
    return tok, "PreTrainedTokenizerFast"


def record_chat(tok, hf, conversations):
    rows = []
    for conv in conversations:
        try:
            text = hf.apply_chat_template(conv["messages"], tokenize=False, **conv["options"])
            rows.append({"text": text, "ids": tok.encode(text, add_special_tokens=False).ids})
        except Exception as e:
            traceback.print_exc()
            rows.append({"error": f"{type(e).__name__}: {e}"})
    return rows


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    corpus = load_json("test/data/tokenizer-corpus.json")["strings"]
    conversations = load_json("test/data/chat-conversations.json")["conversations"]
    versions = {"tokenizers": tokenizers.__version__, "transformers": transformers.__version__}
    specs = [a.split("=", 1) for a in sys.argv[2:]] or [
        (t["name"], t["dir"]) for t in load_json("test/data/tokenizer-dirs.json")["tokenizers"]
    ]
    for name, folder in specs:
        tok = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
        strings = record_tokenizer(tok, corpus)
        with open(os.path.join(out, f"tokenizer-{name}.json"), "w", encoding="utf-8") as f:
            json.dump({"tokenizer": name, "versions": versions, "strings": strings}, f, ensure_ascii=False)
        hf, how = hf_tokenizer(folder)
        chats = record_chat(tok, hf, conversations)
        with open(os.path.join(out, f"chat-{name}.json"), "w", encoding="utf-8") as f:
            json.dump({"tokenizer": name, "versions": versions, "loadedWith": how, "conversations": chats}, f,
                      ensure_ascii=False, indent=1)
        errors = sum("error" in c for c in chats)
        print(f"{name}: {len(strings)} strings, {len(chats)} conversations ({errors} errors), via {how}", flush=True)


if __name__ == "__main__":
    main()
