"""Images on an M-RoPE model (Qwen-VL's layout): a synthetic `qwen2vl` text model with SmolLM2's
vocabulary and a synthetic `qwen2vl_merger` projector (tools/synthetic/mrope.py). An image of 16
rows on a 4 x 4 grid takes 4 positions, so the text after it sits 12 positions below its cache
index: llama.Context keeps the map, and these tests hold it to llama.cpp's own helper."""

from __future__ import annotations

import ctypes
import io

import llama_cpp as C
import llama_cpp.mtmd_cpp as M
import numpy as np
import pytest

from localspec.config.settings import Settings
from localspec.engine import Engine
from localspec.images import Limits, decode_image
from localspec.llama import Context, ImageRun, Model, Projector
from tools.synthetic.arch import write_qwen35
from tools.synthetic.mrope import MMPROJ, TEXT, write_pair

from ..conftest import MODELS
from ..helpers import (
    ask_image,
    assert_answer_follows_the_image,
    assert_near_argmax,
    image_followup,
    png,
    responses_of,
    teacher_forced_gaps,
)

ASK = "What is in this picture?"
LIMITS = Limits(1 << 20, 1 << 20)
ROWS = 16  # a 64 px image: 8 px patches merged 2 x 2 -> a 4 x 4 grid (4 positions)
# logits of one prefix decoded in other batches differ by a few thousandths (f16 KV, other sums);
# a row at a wrong position, or a stale cell left in the cache, moves them by whole units
TOL = 0.05


@pytest.fixture(scope="module")
def pair(smollm2_path, tmp_path_factory):
    """models/'s files when `python -m tools.synthetic.mrope models/` wrote them, else the same
    (seeded) files in a temporary folder."""
    if (MODELS / TEXT).exists() and (MODELS / MMPROJ).exists():
        return MODELS / TEXT, MODELS / MMPROJ
    return write_pair(MODELS, tmp_path_factory.mktemp("mrope"))


@pytest.fixture(scope="module")
def vision(pair):
    with Model(pair[0]) as model, Projector(pair[1], model, n_threads=2) as proj:
        yield model, proj


def image(seed: int, size: int = 64, height: int | None = None):
    if height is None:
        return decode_image(png(seed, size), LIMITS)
    from PIL import Image  # noqa: PLC0415

    out = io.BytesIO()
    Image.open(io.BytesIO(png(seed, size))).crop((0, 0, size, height)).save(out, format="PNG")
    return decode_image(out.getvalue(), LIMITS)


def prompt_of(model, proj, img, after: str = ASK) -> list[int]:
    ids = model.tokenize("User: ", add_special=True)
    for piece in proj.pieces(img):
        ids += list(piece.ids) if isinstance(piece, ImageRun) else piece
    return ids + model.tokenize(after, add_special=False)


def test_positions_are_llama_cpps_own(vision, pair):
    """The last prompt row equals the one llama.cpp's mtmd helper computes for the same tokens."""
    model, proj = vision
    assert proj.mrope
    img = image(1, 96, 48)  # 6 x 3 merged patches: 18 rows, 6 positions (a grid wider than tall)
    ids = prompt_of(model, proj, img)
    with Context(model, n_ctx=256, projector=proj) as ctx:
        ours = np.array(ctx.eval(ids, 0)[0])
        first = next(i for i, t in enumerate(ids) if t < 0)  # the image's first row
        assert sum(t < 0 for t in ids) == 18
        assert ctx.position(0, first + 18) == ctx.position(0, first) + 6
        assert ctx.position(0, len(ids)) == len(ids) - (18 - 6)
    ref = _mtmd_helper_row(model, pair[1], img, ids, 6)
    assert np.abs(ours - ref).max() < 1e-2 and ours.argmax() == ref.argmax()


def test_an_image_cut_between_decodes_reads_as_one(vision, pair):
    """Beside running streams a causal image's rows are cut by the prefill chunk (decode/round.py):
    cut twice inside its rows, the prompt's last row is still the one llama.cpp's helper computes."""
    model, proj = vision
    img = image(1, 96, 48)
    ids = prompt_of(model, proj, img)
    first = next(i for i, t in enumerate(ids) if t < 0)
    with Context(model, n_ctx=256, projector=proj) as ctx:
        assert not ctx.images_whole
        ctx.eval(ids[: first + 7], 0)
        ctx.eval(ids[first + 7 : first + 11], first + 7)
        ours = np.array(ctx.eval(ids[first + 11 :], first + 11)[0])
    ref = _mtmd_helper_row(model, pair[1], img, ids, 6)
    assert np.abs(ours - ref).max() < 1e-2 and ours.argmax() == ref.argmax()


def _mtmd_helper_row(model, mmproj, img, ids, n_pos: int) -> np.ndarray:  # noqa: ANN001
    """llama.cpp's way (llama-server's): the text as tokens, the image through
    mtmd_helper_eval_chunk_single, which places its rows and says where the text goes on."""
    params = C.llama_context_default_params()
    params.n_ctx, params.n_batch, params.n_ubatch = 256, 256, 256
    lctx = C.llama_init_from_model(model.ptr, params)
    mp = M.mtmd_context_params_default()
    mp.n_threads, mp.print_timings = 2, False
    mctx = M.mtmd_init_from_file(str(mmproj).encode(), model.ptr, mp)
    chunks, bitmap = M.mtmd_input_chunks_init(), None
    try:
        data = np.ascontiguousarray(img.pixels, np.uint8)
        bitmap = M.mtmd_bitmap_init(
            img.width, img.height, data.ctypes.data_as(ctypes.POINTER(ctypes.c_ubyte))
        )
        marker = M.mtmd_default_marker()
        text = M.mtmd_input_text(marker, len(marker), False, True)
        assert M.mtmd_tokenize(mctx, chunks, ctypes.byref(text), (M.mtmd_bitmap_p_ctypes * 1)(bitmap), 1) == 0
        parts = [M.mtmd_input_chunks_get(chunks, i) for i in range(M.mtmd_input_chunks_size(chunks))]
        image_chunk = next(
            c for c in parts if M.mtmd_input_chunk_get_type(c) == M.MTMD_INPUT_CHUNK_TYPE_IMAGE
        )
        first, n_past = next(i for i, t in enumerate(ids) if t < 0), 0
        n_past = _decode_text(lctx, ids[:first], n_past)
        new_past = C.llama_pos()
        rc = M.mtmd_helper_eval_chunk_single(
            mctx, lctx, image_chunk, n_past, 0, 256, False, ctypes.byref(new_past)
        )
        assert rc == 0 and new_past.value == n_past + n_pos
        _decode_text(lctx, [t for t in ids[first:] if t >= 0], new_past.value)
        return np.ctypeslib.as_array(C.llama_get_logits_ith(lctx, -1), shape=(model.n_vocab,)).copy()
    finally:
        M.mtmd_input_chunks_free(chunks)
        if bitmap:
            M.mtmd_bitmap_free(bitmap)
        M.mtmd_free(mctx)
        C.llama_free(lctx)


def _decode_text(lctx, tokens: list[int], pos: int) -> int:  # noqa: ANN001
    batch = C.llama_batch_init(len(tokens), 0, 1)
    try:
        for i, t in enumerate(tokens):
            batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.seq_id[i][0] = t, pos + i, 1, 0
            batch.logits[i] = i == len(tokens) - 1
        batch.n_tokens = len(tokens)
        assert C.llama_decode(lctx, batch) == 0
    finally:
        C.llama_batch_free(batch)
    return pos + len(tokens)


def test_a_rollback_after_an_image_cuts_the_right_rows(vision):
    """A rejected draft after the image, and a cut inside it (its rows go as one), leave the cache as
    a fresh evaluation of what is kept: the next rows are the same."""
    model, proj = vision
    ids = prompt_of(model, proj, image(2))
    more = model.tokenize(" A cat on a mat, sleeping", add_special=False)
    first = next(i for i, t in enumerate(ids) if t < 0)
    with Context(model, n_ctx=256, projector=proj) as ctx, Context(model, n_ctx=256, projector=proj) as fresh:
        want = np.array(fresh.eval(ids + more[:2], 0)[0])
        ctx.eval(ids, 0)
        ctx.eval(more, len(ids))  # a draft of several tokens ...
        ctx.truncate(len(ids) + 1)  # ... of which one is accepted
        got = np.array(ctx.eval(more[1:2], len(ids) + 1)[0])
        assert np.abs(got - want).max() < TOL
        ctx.truncate(first + 5)  # inside the image: back to its first row
        assert ctx.past() == first
        got = np.array(ctx.eval(ids[first:] + more[:2], first)[0])
        assert np.abs(got - want).max() < TOL


def test_a_copied_prefix_ends_where_the_source_had_it(vision):
    """n > 1 sharing: a sequence copies the prompt's rows from one that holds more (its answer)."""
    model, proj = vision
    ids = prompt_of(model, proj, image(2))
    more = model.tokenize(" A cat on a mat, sleeping", add_special=False)
    with (
        Context(model, n_ctx=256, n_seq=2, projector=proj) as ctx,
        Context(model, n_ctx=256, projector=proj) as fresh,
    ):
        want = np.array(fresh.eval(ids + more[3:5], 0)[0])
        ctx.eval(ids + more, 0, seq=0)
        ctx.copy_prefix(0, 1, len(ids))
        got = np.array(ctx.eval(more[3:5], len(ids), seq=1)[0])
        assert np.abs(got - want).max() < TOL


@pytest.fixture(scope="module")
def eng(pair):
    text, mmproj = pair
    with Engine(
        Settings.load(target=text, draft=text, mmproj=mmproj, n_ctx=1024, n_threads=2, parallel=2)
    ) as e:
        yield e


def answer(eng, img, **kw):
    return ask_image(eng, img, ASK, **kw)


def test_the_answer_depends_on_the_image_and_only_on_it(eng):
    a = assert_answer_follows_the_image(lambda seed: answer(eng, image(seed), spec=False))
    assert sum(t < 0 for t in a.prompt_tokens) == ROWS
    wide = answer(eng, image(3, 96), spec=False)  # 6 x 6 patches... on a 6 x 6 grid: 36 rows, 6 positions
    assert sum(t < 0 for t in wide.prompt_tokens) == 36


@pytest.mark.slow
def test_speculation_with_an_image_is_lossless(eng):
    """A text-only draft (the same model reading fillers for the image) drafts after it; every
    rejection rolls the target back past the image's positions, and the output is plain decoding's."""
    for seed in (4, 5):
        plain = answer(eng, image(seed), spec=False)
        spec = answer(eng, image(seed), draft_max="4")
        assert spec.stats.speculative and spec.stats.n_drafted > spec.stats.n_accepted > 0, spec.stats
        assert_near_argmax(teacher_forced_gaps(eng, spec.prompt_tokens, spec.tokens), seed)
        assert spec.tokens == plain.tokens or _tie(eng, plain, spec)


def _tie(eng, plain, spec) -> bool:  # noqa: ANN001
    i = next(i for i, (x, y) in enumerate(zip(spec.tokens, plain.tokens)) if x != y)
    return teacher_forced_gaps(eng, plain.prompt_tokens, plain.tokens)[i] <= 0.25


def test_a_followup_with_the_same_image_prefills_only_its_new_text(eng):
    img = image(6)
    msgs, second = image_followup(eng, img, ASK, answer(eng, img, spec=False))
    eng.clear_cache()
    alone = eng.generate(msgs, temperature=0, max_tokens=4, spec=False)
    assert alone.tokens == second.tokens  # the reused rows sit where a fresh prefill puts them


def test_two_choices_share_the_image_prefix(eng):
    """n > 1: the second sequence copies the first one's cache, image rows and positions."""
    img = image(7)
    one = answer(eng, img, spec=False)
    eng.clear_cache()
    msgs = [{"role": "user", "content": [{"type": "image", "image": img}, {"type": "text", "text": ASK}]}]
    two = responses_of([eng.submit(msgs, temperature=0, max_tokens=16, spec=False) for _ in range(2)])
    assert sorted(r.stats.n_prefilled for r in two) == [1, len(one.prompt_tokens)]
    for r in two:
        assert r.tokens == one.tokens


@pytest.mark.slow
def test_a_hybrid_mrope_model_with_an_image(pair, smollm2_path, tmp_path):
    """Qwen3.5's shape: gated-delta-net layers beside attention, interleaved M-RoPE (`qwen35`), with
    the same projector: the prompt's last row is llama.cpp's helper's, and speculation after the image
    (rolled back through llama.cpp's n_rs_seq) is plain decoding."""
    text = write_qwen35(smollm2_path, tmp_path / "qwen35.gguf", seed=1)
    with Model(text) as model, Projector(pair[1], model, n_threads=2) as proj:
        img = image(1, 96, 48)
        ids = prompt_of(model, proj, img)
        with Context(model, n_ctx=256, projector=proj) as ctx:
            ours = np.array(ctx.eval(ids, 0)[0])
        ref = _mtmd_helper_row(model, pair[1], img, ids, 6)
        assert np.abs(ours - ref).max() < TOL
    with Engine(Settings.load(target=text, draft=text, mmproj=pair[1], n_ctx=1024, n_threads=2)) as e:
        plain = answer(e, image(4), spec=False)
        e.clear_cache()
        spec = answer(e, image(4), draft_max="4")
        assert spec.stats.n_drafted > spec.stats.n_accepted > 0, spec.stats
        assert spec.tokens == plain.tokens or _tie(e, plain, spec)
