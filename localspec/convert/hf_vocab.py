"""A Hugging Face tokenizer.json as GGUF tokenizer metadata, in the form llama.cpp expects.

Two families: byte-level BPE (GPT-2 style: Llama 3, SmolLM2, Qwen) becomes tokenizer.ggml.model
"gpt2" with merges and a named pre-tokenizer; BPE with byte fallback (converted SentencePiece:
Llama 2, Mistral 7B) becomes "llama", where llama.cpp merges by score, so score = -id (SentencePiece
BPE ids are in merge order). Special ids, add-BOS/EOS and the chat template come from gguf.SpecialVocab.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from gguf import GGUFValueType, Keys, SpecialVocab, TokenType

from localspec.convert.gguf_stream import KV
from localspec.errors import LocalspecError

_U32, _STR, _BOOL, _ARR = GGUFValueType.UINT32, GGUFValueType.STRING, GGUFValueType.BOOL, GGUFValueType.ARRAY


def _pre_tokenizer_name(tok: dict[str, Any], arch: str) -> str:
    """llama.cpp's name for this pre-tokenizer (it selects the split regex at load time).

    llama.cpp's own converter hashes a tokenization of a probe text; we read the pre-tokenizer
    definition instead, which needs no tokenizer library and names the same regexes."""
    pre = tok.get("pre_tokenizer") or {}
    parts = pre.get("pretokenizers", [pre]) if pre.get("type") == "Sequence" else [pre]
    kinds = [p.get("type") for p in parts]
    regex = "".join(str((p.get("pattern") or {}).get("Regex", "")) for p in parts if p.get("type") == "Split")
    if regex:
        if r"\p{N}{1,3}" in regex:
            return "llama-bpe"  # Llama 3.x
        if r"\p{N}" in regex and r"[^\r\n\p{L}\p{N}]?\p{L}+" in regex:
            return "qwen2"
    elif kinds == ["Digits", "ByteLevel"] and parts[0].get("individual_digits"):
        return "smollm"  # GPT-2 regex after splitting digits one by one (SmolLM/StarCoder family)
    elif kinds == ["ByteLevel"] and parts[0].get("use_regex", True):
        return "gpt-2"
    raise LocalspecError(
        f"unrecognised pre-tokenizer in tokenizer.json ({' + '.join(map(str, kinds)) or 'none'}) for {arch}; "
        "supported: Llama 3 (llama-bpe), Qwen2/3 (qwen2), SmolLM2 (smollm), GPT-2 byte-level (gpt-2)"
    )


def tokenizer_kvs(folder: Path, arch: str, n_vocab: int) -> list[KV]:
    """GGUF tokenizer keys for the HF tokenizer in `folder`, padded to the model's n_vocab rows."""
    path = folder / "tokenizer.json"
    if not path.exists():
        raise LocalspecError(f"{folder} has no tokenizer.json (a fast tokenizer is needed to convert)")
    try:
        tok = json.loads(path.read_text(encoding="utf-8"))
        model = tok["model"]
        vocab: dict[str, int] = model["vocab"]
    except (json.JSONDecodeError, KeyError, TypeError):
        raise LocalspecError(f"{path} is corrupt or not a Hugging Face tokenizer") from None
    if model.get("type") != "BPE":
        raise LocalspecError(f"{path}: only BPE tokenizers are supported (found {model.get('type')})")
    spm = bool(model.get("byte_fallback"))

    tokens: dict[int, str] = {i: t for t, i in vocab.items()}
    types: dict[int, int] = {}
    for added in tok.get("added_tokens", []):
        i = int(added["id"])
        tokens[i] = added["content"]
        types[i] = TokenType.CONTROL if added.get("special") else TokenType.USER_DEFINED
    size = max(n_vocab, max(tokens) + 1)
    texts, ttypes, scores = [], [], []
    for i in range(size):
        text = tokens.get(i)
        if text is None:  # rows the embedding has but the tokenizer never produces
            texts.append(f"[PAD{i}]")
            ttypes.append(int(TokenType.UNUSED))
        else:
            texts.append(text)
            kind = types.get(i, TokenType.NORMAL)
            if spm and re.fullmatch(r"<0x[0-9A-Fa-f]{2}>", text):
                kind = TokenType.BYTE
            ttypes.append(int(kind))
        scores.append(-float(i))

    special = SpecialVocab(folder, load_merges=not spm, n_vocab=size)
    kvs = [
        KV(Keys.Tokenizer.MODEL, "llama" if spm else "gpt2", _STR),
        KV(Keys.Tokenizer.PRE, "default" if spm else _pre_tokenizer_name(tok, arch), _STR),
        KV(Keys.Tokenizer.LIST, texts, _ARR, _STR),
        KV(Keys.Tokenizer.TOKEN_TYPE, ttypes, _ARR, GGUFValueType.INT32),
    ]
    if spm:
        kvs.append(KV(Keys.Tokenizer.SCORES, scores, _ARR, GGUFValueType.FLOAT32))
    elif special.merges:
        kvs.append(KV(Keys.Tokenizer.MERGES, list(special.merges), _ARR, _STR))
    else:
        raise LocalspecError(f"{path} has no BPE merges")
    for typ, tid in special.special_token_ids.items():
        key = getattr(Keys.Tokenizer, f"{typ.upper()}_ID", None)  # pad -> tokenizer.ggml.padding_token_id
        if key is not None:
            kvs.append(KV(key, int(tid), _U32))
    # written explicitly: llama.cpp's default when absent depends on the pre-tokenizer
    add = {"bos": spm, "eos": False, **special.add_special_token}
    kvs += [KV(f"tokenizer.ggml.add_{typ}_token", bool(add[typ]), _BOOL) for typ in ("bos", "eos")]
    template = special.chat_template
    if isinstance(template, list):  # named templates: the default one plus tokenizer.chat_template.NAME
        for entry in template:
            name = entry.get("name")
            key = Keys.Tokenizer.CHAT_TEMPLATE if name == "default" else f"tokenizer.chat_template.{name}"
            kvs.append(KV(key, entry["template"], _STR))
    elif template:
        kvs.append(KV(Keys.Tokenizer.CHAT_TEMPLATE, template, _STR))
    return kvs
