"""The projector names image chunks from an LRU, not a lifetime counter (issue 60, #5: once 262,143
distinct images had been seen every new one was a 400 until restart). With room for two names, four
distinct images in turn are all answered, each as it was the first time: a name comes back only
from an image nothing holds, no request and no cache, so no cached prefix of an old image is ever
taken for a new one. SmolLM2 with the synthetic projector (its answers depend on the pixels)."""

from __future__ import annotations

import pytest

from localspec.config.settings import Settings
from localspec.engine import Engine
from localspec.images import Limits, decode_image
from localspec.llama import vision

from ..helpers import ask_image, png

LIMITS = Limits(1 << 20, 1 << 20)


@pytest.fixture()
def eng(smollm2_path, mmproj_path, monkeypatch):
    monkeypatch.setattr(vision, "MAX_INDEX", 2)
    monkeypatch.setattr(vision, "RECENT", 1)  # the recent images' chunks are held: one of them
    s = Settings.load(target=smollm2_path, draft=smollm2_path, mmproj=mmproj_path, n_ctx=1024, n_threads=2)
    with Engine(s) as e:
        yield e


def test_new_images_keep_coming_past_the_index_space_and_each_answer_is_its_own(eng):
    first = {seed: ask_image(eng, decode_image(png(seed), LIMITS), "Describe it.", spec=False).tokens
             for seed in range(4)}  # fmt: skip
    assert len({tuple(t) for t in first.values()}) > 1  # the answers follow the images
    for seed in (3, 0, 2, 1):  # names handed round again: an old prefix must not be matched
        again = ask_image(eng, decode_image(png(seed), LIMITS), "Describe it.", spec=False)
        assert again.tokens == first[seed], seed
    spec = ask_image(eng, decode_image(png(0), LIMITS), "Describe it.", draft_max="4")
    assert spec.text  # the draft's cache is watched as well: speculation answers too
