"""The fill-in-the-middle prompt as llama-server's format_infill lays it out, on a tokenizer whose
tokens are characters: the repo-level layout, the cut to the context, and a model without FIM."""

from __future__ import annotations

import pytest

from localspec.serving.errors import APIError
from localspec.serving.fim import BATCH, LOOKUP_MAX, Extra, Fill, layout

PRE, SUF, MID, PAD, REP, SEP, BOS = 1000, 1001, 1002, 1003, 1004, 1005, 1006
QWEN = {"pre": PRE, "suf": SUF, "mid": MID, "pad": PAD, "rep": REP, "sep": SEP, "eot": None}
CODELLAMA = {"pre": PRE, "suf": SUF, "mid": MID, "pad": None, "rep": None, "sep": None, "eot": None}


def chars(text: str) -> list[int]:
    return [ord(c) for c in text]


def text(ids: list[int]) -> str:
    names = {PRE: "<P>", SUF: "<S>", MID: "<M>", REP: "<R>", SEP: "<F>", BOS: "<B>"}
    return "".join(names.get(t) or chr(t) for t in ids)


def lay(fill: Fill, vocab=QWEN, n_ctx=8192, n_predict=16, bos=None):
    return layout(fill, vocab, chars, n_ctx=n_ctx, n_predict=n_predict, bos=bos)


def test_the_repo_level_layout_of_format_infill():
    fill = Fill("def f(", "):\n", (Extra("x = 1\n", "a.py"), Extra("y = 2\n")), prompt="a")
    out = lay(fill)
    assert text(out.ids) == "<R>myproject\n<F>a.py\nx = 1\n<F>tmp\ny = 2\n<F>filename\n<P>def f(a<S>):\n<M>"
    assert not out.truncated and out.lookup_text == []


def test_a_model_without_repo_tokens_gets_snippet_lines_and_its_bos():
    out = lay(Fill("a", "b", (Extra("c"),)), vocab=CODELLAMA, bos=BOS)
    assert text(out.ids) == "\n\n--- snippet ---\n\nc<B><P>a<S>b<M>"


def test_the_cut_keeps_the_prefix_nearest_the_cursor_and_the_suffix_start():
    prefix, suffix = "p" * 3000 + "NEAR", "FAR" + "s" * 3000
    out = lay(Fill(prefix, suffix, prompt="xy"), n_ctx=4096)
    body = text(out.ids).split("<F>filename\n", 1)[1]
    pre, suf = body.removeprefix("<P>").removesuffix("<M>").split("<S>")
    assert len(pre) == 3 * BATCH // 4 + 2 and pre.endswith("NEARxy")
    assert len(suf) == BATCH // 4 - 2 - 2 and suf.startswith("FAR")
    assert out.truncated
    assert len(out.lookup_text) == len(prefix) - 3 * BATCH // 4 + len(suffix) - len(suf)


def test_extra_chunks_go_first_and_the_oldest_tokens_first():
    chunks = tuple(Extra(c * 1000, f"{c}.py") for c in "abc")
    n_ctx, n_predict = 2048, 64
    out = lay(Fill("x", "y", chunks), n_ctx=n_ctx, n_predict=n_predict)
    fim_part = [PRE, "x", SUF, "y", MID]
    room = n_ctx - len(fim_part) - 2 * n_predict  # what the context leaves the extra chunks
    head = text(out.ids).split("<P>", 1)[0]
    assert len(out.ids) - len(fim_part) == room  # the chunks fill exactly their room
    assert head.endswith("c" * 1000 + "<F>filename\n") and "<R>" not in head and "a.py" not in head
    assert out.truncated and out.lookup_text[:4] == [REP, *chars("myp")]
    assert len(out.ids) + n_predict <= n_ctx


def test_a_small_context_still_fits_the_answer():
    out = lay(Fill("p" * 5000, "s" * 5000, (Extra("e" * 100),)), n_ctx=512, n_predict=32)
    assert len(out.ids) + 32 <= 512 and out.truncated
    assert len(out.lookup_text) <= LOOKUP_MAX


@pytest.mark.parametrize("missing, named", [("pre", "prefix"), ("mid", "middle")])
def test_a_model_without_fim_tokens_is_one_clear_400(missing, named):
    with pytest.raises(APIError) as e:
        lay(Fill("a", "b"), vocab={**QWEN, missing: None})
    assert e.value.status == 400 and named in e.value.message and "fill-in-the-middle" in e.value.message
    with pytest.raises(APIError) as e:
        lay(Fill("a", "b"), vocab={k: None for k in QWEN})
    assert "prefix, suffix, middle" in e.value.message
