"""Can these two models draft for each other? Decided from the GGUF headers, before any weights load.

llama.cpp's rules (common_speculative_are_compatible): same vocabulary type, same add-BOS/BOS id and
add-EOS/EOS id, sizes within 128 tokens, identical token text from id 5 up to the smaller size.
Below id 5 it tolerates differences (special tokens). We apply those rules and also report a full
comparison (every id, token types), so a pair that passes only loosely is visible as such.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from localspec.gguf.file import GGUFHeader, read_header

MAX_SIZE_DIFFERENCE = 128
CHECK_START_ID = 5
_ARRAYS = ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type")
# llama.cpp's vocab type per tokenizer.ggml.model, and its add-BOS default when the key is absent
_VOCAB_TYPES = {"llama": "SPM", "gpt2": "BPE", "bert": "WPM", "t5": "UGM", "rwkv": "RWKV", "plamo2": "PLAMO2"}
_ADD_BOS_PRE = {"llama-bpe", "llama3", "llama-v3"}


@dataclass(frozen=True)
class VocabHeader:
    """The vocabulary facts llama.cpp compares, read from one GGUF header."""

    path: Path
    vocab_type: str
    pre: str | None
    tokens: list[str]
    token_types: list[int]
    bos: int | None
    eos: int | None
    add_bos: bool
    add_eos: bool

    @classmethod
    def read(cls, path: str | Path) -> VocabHeader:
        h = read_header(path, load_arrays=_ARRAYS)
        return cls.from_header(h)

    @classmethod
    def from_header(cls, h: GGUFHeader) -> VocabHeader:
        model = str(h.get("tokenizer.ggml.model", "none"))
        vtype = _VOCAB_TYPES.get(model, model.upper())
        pre = h.get("tokenizer.ggml.pre")
        add_bos = h.get("tokenizer.ggml.add_bos_token")
        if add_bos is None:
            add_bos = vtype == "SPM" or pre in _ADD_BOS_PRE
        return cls(
            path=h.path,
            vocab_type=vtype,
            pre=pre,
            tokens=list(h.get("tokenizer.ggml.tokens") or []),
            token_types=list(h.get("tokenizer.ggml.token_type") or []),
            bos=h.get("tokenizer.ggml.bos_token_id"),
            eos=h.get("tokenizer.ggml.eos_token_id"),
            add_bos=bool(add_bos),
            add_eos=bool(h.get("tokenizer.ggml.add_eos_token", False)),
        )

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)


@dataclass(frozen=True)
class CompatReport:
    ok: bool  # llama.cpp would accept the pair
    identical: bool  # the vocabularies are exactly the same (every id, text and type)
    problems: list[str] = field(default_factory=list)  # reasons the pair is refused
    notes: list[str] = field(default_factory=list)  # differences llama.cpp tolerates
    first_diff: tuple[int, str, str] | None = None  # (id, target text, draft text)
    n_target: int = 0
    n_draft: int = 0

    @property
    def message(self) -> str:
        if self.ok:
            head = f"compatible: {'identical' if self.identical else 'matching'} vocabularies "
            head += f"({self.n_target} target / {self.n_draft} draft tokens)"
            return "; ".join([head, *self.notes])
        return "target and draft cannot be paired: " + "; ".join(self.problems)


def _diff_at(a: list[str], b: list[str], start: int, stop: int) -> int | None:
    if a[start:stop] == b[start:stop]:  # the common case, at C speed
        return None
    return next(i for i in range(start, stop) if a[i] != b[i])


def compare(t: VocabHeader, d: VocabHeader) -> CompatReport:
    problems: list[str] = []
    notes: list[str] = []
    if not t.tokens or not d.tokens:
        missing = t.path if not t.tokens else d.path
        problems.append(f"{missing} has no tokenizer.ggml.tokens (no vocabulary in the GGUF)")
        return CompatReport(False, False, problems, n_target=t.n_tokens, n_draft=d.n_tokens)
    if t.vocab_type != d.vocab_type:
        problems.append(f"vocabulary types differ: target {t.vocab_type}, draft {d.vocab_type}")
    for what, a, b in (
        ("add-BOS", t.add_bos, d.add_bos),
        ("BOS id", t.bos, d.bos),
        ("add-EOS", t.add_eos, d.add_eos),
        ("EOS id", t.eos, d.eos),
    ):
        if a != b:
            problems.append(f"{what} differs: target {a}, draft {b}")
    if abs(t.n_tokens - d.n_tokens) > MAX_SIZE_DIFFERENCE:
        problems.append(
            f"vocabulary sizes differ by {abs(t.n_tokens - d.n_tokens)} (target {t.n_tokens}, draft "
            f"{d.n_tokens}; at most {MAX_SIZE_DIFFERENCE} allowed)"
        )
    n = min(t.n_tokens, d.n_tokens)
    first_diff = None
    i = _diff_at(t.tokens, d.tokens, CHECK_START_ID, n)
    if i is not None:
        first_diff = (i, t.tokens[i], d.tokens[i])
        problems.append(f"token {i} differs: target {t.tokens[i]!r}, draft {d.tokens[i]!r}")
    # the full comparison: what llama.cpp tolerates but a person may want to know
    low = _diff_at(t.tokens, d.tokens, 0, min(CHECK_START_ID, n))
    if low is not None:
        first_diff = first_diff or (low, t.tokens[low], d.tokens[low])
        notes.append(f"special token {low} differs: target {t.tokens[low]!r}, draft {d.tokens[low]!r}")
    if t.n_tokens != d.n_tokens:
        notes.append(f"sizes differ: target {t.n_tokens}, draft {d.n_tokens}")
    if t.pre != d.pre:
        notes.append(f"pre-tokenizers differ: target {t.pre}, draft {d.pre}")
    types_differ = t.token_types[:n] != d.token_types[:n]
    if types_differ:
        notes.append("token types differ")
    identical = not problems and not notes and t.tokens == d.tokens
    return CompatReport(
        not problems, identical, problems, notes if not problems else [], first_diff, t.n_tokens, d.n_tokens
    )


def check_pair(target_path: str | Path, draft_path: str | Path) -> CompatReport:
    """Compare two GGUF vocabularies by llama.cpp's rules (header only: fast, no weights)."""
    return compare(VocabHeader.read(target_path), VocabHeader.read(draft_path))


def vocab_fingerprint(path: str | Path) -> str:
    """sha256 over token texts, token types, BOS/EOS and add-BOS/EOS: equal fingerprints mean equal vocabularies."""
    v = VocabHeader.read(path)
    h = hashlib.sha256()
    h.update(json.dumps([v.vocab_type, v.bos, v.eos, v.add_bos, v.add_eos]).encode())
    for tok in v.tokens:
        h.update(tok.encode("utf-8", "surrogatepass") + b"\0")
    h.update(json.dumps(v.token_types).encode())
    return "sha256:" + h.hexdigest()


def model_facts(path: Path, prefix: str) -> dict[str, Any]:
    """Size, parameter count and quantization of one GGUF, as pair.toml info keys."""
    h = read_header(path)
    return {
        f"{prefix}_bytes": path.stat().st_size,
        f"{prefix}_params": sum(t.n_elements for t in h.tensors),
        f"{prefix}_file_type": int(h.get("general.file_type", -1)),
    }


def pair_facts(target: Path, draft: Path) -> dict[str, Any]:
    """What pair.toml records of a pair's models: the vocabulary fingerprint and each model's facts."""
    return {
        "vocab_fingerprint": vocab_fingerprint(target),
        **model_facts(Path(target), "target"),
        **model_facts(Path(draft), "draft"),
    }
