"""Fill-in-the-middle: the one FIM request every dialect parses into (`Fill`: the text before and
after the cursor, the other files sent as context, the text already typed after the middle
token), and its prompt as llama-server's format_infill lays it out, from the model's own FIM tokens:

    [FIM_REP]myproject\\n [FIM_SEP]name\\n chunk ... [FIM_SEP]filename\\n
    [BOS] [FIM_PRE] prefix prompt [FIM_SUF] suffix [FIM_MID]

cut to the context as llama-server cuts it: the prefix keeps its 3/4 of a batch nearest the cursor,
the suffix the rest of the batch from its start (the batch: llama-server's default, 2048 tokens,
less where the context and the answer leave less), and the extra chunks what the context leaves
after those and twice the answer, the oldest tokens dropped first (llama-server leaves them what is
left after a whole batch: in a 2048-token context, nothing). The text the cut dropped is given
back (`lookup_text`): the lookup drafts from it too."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

from localspec.serving.errors import APIError

REPO = "myproject\n"  # llama-server's project name (a request cannot name it)
FILE = "filename\n"  # and the current file's
# llama-server's separator for a model without FIM_SEP, "\n\n--- snippet ---\n\n"
SNIPPET = "\n\n--- snippet ---\n\n"
BATCH = 2048  # llama-server's default n_batch: the part of the context the prefix and suffix share
LOOKUP_MAX = 8192  # tokens of cut text the lookup indexes at most (indexing costs on the request path)
NEEDED = {"pre": "prefix", "suf": "suffix", "mid": "middle"}


@dataclass(frozen=True)
class Extra:
    """A chunk of another file sent as context (llama.vim's ring buffer, llama.vscode's chunks)."""

    text: str
    filename: str = "tmp"


@dataclass(frozen=True)
class Fill:
    prefix: str  # the text before the cursor
    suffix: str = ""  # the text after it
    extra: tuple[Extra, ...] = ()
    prompt: str = ""  # the text typed after the middle token (llama.vim: the current line's start)


@dataclass(frozen=True)
class Layout:
    ids: list[int]
    truncated: bool  # the cut dropped something
    lookup_text: list[int] = field(default_factory=list)  # what it dropped, for the lookup


def fim_tokens(vocab: Mapping[str, int | None]) -> Mapping[str, int | None]:
    """The model's FIM tokens (Model.fim_tokens), or one 400 naming the ones it lacks."""
    missing = [name for key, name in NEEDED.items() if vocab.get(key) is None]
    if missing:
        raise APIError(
            400,
            f"this model has no fill-in-the-middle tokens (missing: {', '.join(missing)}); serve a "
            "model trained for it (Qwen2.5-Coder, CodeLlama, StarCoder2, DeepSeek-Coder...)",
            param="input_suffix",
        )
    return vocab


def layout(
    fill: Fill,
    vocab: Mapping[str, int | None],
    tokenize: Callable[[str], list[int]],
    *,
    n_ctx: int,
    n_predict: int,
    bos: int | None,
) -> Layout:
    """The FIM prompt's tokens (format_infill); `tokenize`: text -> ids, no special tokens read;
    `bos`: the token to start with when the model adds one."""
    vocab = fim_tokens(vocab)
    n_batch = max(0, min(BATCH, n_ctx - n_predict - 2))  # what is left fits the answer
    prefix, suffix, prompt = tokenize(fill.prefix), tokenize(fill.suffix), tokenize(fill.prompt)
    extra = _extra(fill.extra, vocab, tokenize)
    n_prefix = min(len(prefix), 3 * (n_batch // 4))
    n_suffix = min(len(suffix), max(0, n_batch // 4 - (2 + len(prompt))))
    ids = [bos] if bos is not None else []
    ids += [vocab["pre"], *prefix[len(prefix) - n_prefix :], *prompt, vocab["suf"], *suffix[:n_suffix]]
    ids.append(vocab["mid"])
    n_extra = min(max(0, n_ctx - len(ids) - 2 * n_predict), len(extra))
    dropped = extra[: len(extra) - n_extra] + prefix[: len(prefix) - n_prefix] + suffix[n_suffix:]
    return Layout(extra[len(extra) - n_extra :] + ids, bool(dropped), dropped[-LOOKUP_MAX:])


def _extra(chunks: tuple[Extra, ...], vocab: Mapping[str, int | None], tokenize) -> list[int]:  # noqa: ANN001
    """The repo-level context before the prefix: the repo's name, then each chunk under its file's
    name, then the current file's (a model without FIM_REP / FIM_SEP: chunks between snippet lines)."""
    rep, sep = vocab.get("rep"), vocab.get("sep")
    out: list[int] = [rep, *tokenize(REPO)] if rep is not None else []
    for chunk in chunks:
        out += [sep, *tokenize(chunk.filename + "\n")] if sep is not None else tokenize(SNIPPET)
        out += tokenize(chunk.text)
    if sep is not None:
        out += [sep, *tokenize(FILE)]
    return out
