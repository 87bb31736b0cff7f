"""Images through the engine on real SmolLM2 with the synthetic projector (models/mmproj-smollm2-test.gguf,
random weights: the answers mean nothing, but they depend on the pixels). The target evaluates each
image's rows; the draft reads fillers at the same positions, so speculation stays lossless."""

from __future__ import annotations

import pytest

from localspec.config.settings import Settings
from localspec.convert.synthetic_mmproj import ProjectorShape
from localspec.engine import Engine
from localspec.images import Limits, decode_image

from ..helpers import (
    ask_image,
    assert_answer_follows_the_image,
    assert_near_argmax,
    image_followup,
    png,
    teacher_forced_gaps,
)

ASK = "What is in this picture?"
LIMITS = Limits(1 << 20, 1 << 20)


@pytest.fixture(scope="module")
def eng(smollm2_path, mmproj_path):
    with Engine(
        Settings.load(target=smollm2_path, draft=smollm2_path, mmproj=mmproj_path, n_ctx=1024, n_threads=2)
    ) as e:
        yield e


def image(seed: int):
    return decode_image(png(seed), LIMITS)


def answer(eng, img, **kw):
    return ask_image(eng, img, ASK, **kw)


def test_the_answer_depends_on_the_image_and_only_on_it(eng):
    a = assert_answer_follows_the_image(lambda seed: answer(eng, image(seed), spec=False))
    shape = ProjectorShape()
    n_rows = (shape.image_size // shape.patch_size) ** 2
    assert sum(t < 0 for t in a.prompt_tokens) == n_rows  # the image's rows, in the prompt


def test_speculation_with_an_image_is_lossless(eng):
    plain = answer(eng, image(3), spec=False)
    spec = answer(eng, image(3), draft_max="4")
    assert spec.stats.speculative and spec.stats.n_drafted > 0, spec.stats
    assert_near_argmax(teacher_forced_gaps(eng, spec.prompt_tokens, spec.tokens), "spec")
    if spec.tokens != plain.tokens:  # a near-tie flip only: the gaps above bound it
        i = next(i for i, (x, y) in enumerate(zip(spec.tokens, plain.tokens)) if x != y)
        assert teacher_forced_gaps(eng, plain.prompt_tokens, plain.tokens)[i] <= 0.25


def test_a_followup_with_the_same_image_prefills_only_its_new_text(eng):
    img = image(4)
    msgs, _ = image_followup(eng, img, ASK, answer(eng, img, spec=False))
    # a different image at the same place shares nothing from it on: its rows are evaluated
    other = eng.generate(
        [{**msgs[0], "content": [{"type": "image", "image": image(5)}, msgs[0]["content"][1]]}, *msgs[1:]],
        temperature=0, max_tokens=4, spec=False,
    )  # fmt: skip
    n_after_image = len(other.prompt_tokens) - min(i for i, t in enumerate(other.prompt_tokens) if t < 0)
    assert other.stats.n_prefilled >= n_after_image
