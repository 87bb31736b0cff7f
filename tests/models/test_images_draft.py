"""A draft that sees the image (--draft-mmproj): SmolLM2 drafting for itself, each with the synthetic
projector (models/mmproj-smollm2-test.gguf). The target's projector numbers each image and hands it to
the draft's, so the draft's token list stays the target's and its cache holds the image's rows too:
speculation stays lossless, and a draft that sees what the target sees drafts the text about it."""

from __future__ import annotations

import pytest

from localspec.config.settings import Settings
from localspec.convert.synthetic_mmproj import ProjectorShape, write_mmproj
from localspec.engine import Engine
from localspec.errors import LocalspecError
from localspec.images import Limits, decode_image

from ..helpers import assert_near_argmax, localspec, png, teacher_forced_gaps

ASK = "Describe this picture."
LIMITS = Limits(1 << 20, 1 << 20)
SPEC = dict(temperature=0, draft_max="4", draft_p_min=0.0)  # a fixed K, drafting every position


def settings(smollm2_path, mmproj_path, draft_mmproj):  # noqa: ANN001, ANN201
    return Settings.load(
        target=smollm2_path, draft=smollm2_path, mmproj=mmproj_path, draft_mmproj=draft_mmproj,
        n_ctx=1024, n_threads=2,
    )  # fmt: skip


@pytest.fixture(scope="module")
def eng(smollm2_path, mmproj_path):
    with Engine(settings(smollm2_path, mmproj_path, mmproj_path)) as e:
        yield e


def ask(img_seed: int) -> list[dict]:
    img = decode_image(png(img_seed), LIMITS)
    return [{"role": "user", "content": [{"type": "image", "image": img}, {"type": "text", "text": ASK}]}]


def acceptance(eng, seeds=(1, 2, 3)) -> tuple[int, int]:  # noqa: ANN001
    """(drafted, accepted) over one 32-token answer per image."""
    stats = [eng.generate(ask(s), max_tokens=32, **SPEC).stats for s in seeds]
    return sum(s.n_drafted for s in stats), sum(s.n_accepted for s in stats)


def test_speculation_with_the_drafts_own_projector_is_lossless(eng):
    plain = eng.generate(ask(3), temperature=0, max_tokens=24, spec=False)
    spec = eng.generate(ask(3), max_tokens=24, **SPEC)
    assert spec.stats.speculative and spec.stats.n_drafted > 0, spec.stats
    assert_near_argmax(teacher_forced_gaps(eng, spec.prompt_tokens, spec.tokens), "spec")
    if spec.tokens != plain.tokens:  # a near-tie flip only: the gaps above bound it
        i = next(i for i, (x, y) in enumerate(zip(spec.tokens, plain.tokens)) if x != y)
        assert teacher_forced_gaps(eng, plain.prompt_tokens, plain.tokens)[i] <= 0.25


def test_a_draft_that_sees_the_image_accepts_what_a_blind_one_misses(eng, smollm2_path, mmproj_path):
    drafted, accepted = acceptance(eng)
    with Engine(settings(smollm2_path, mmproj_path, None)) as blind:  # the text-only draft
        b_drafted, b_accepted = acceptance(blind)
    seeing, text_only = accepted / drafted, b_accepted / b_drafted
    print(f"acceptance with the draft's projector {seeing:.2f} ({accepted}/{drafted}), "
          f"text only {text_only:.2f} ({b_accepted}/{b_drafted})")  # fmt: skip
    assert seeing >= 0.95  # the model drafting for itself, seeing what it sees: ~all
    assert seeing >= text_only + 0.15


def test_a_followup_with_the_same_image_prefills_only_new_text_in_the_draft_too(eng):
    first = eng.generate(ask(4), max_tokens=8, **SPEC)
    assert first.stats.n_draft_prefilled >= from_image(first) - 1  # a new image: its rows, once
    msgs = [
        *ask(4),
        {"role": "assistant", "content": first.text},
        {"role": "user", "content": "And its colours?"},
    ]
    second = eng.generate(msgs, max_tokens=8, **SPEC)
    shared = next(
        (i for i, (x, y) in enumerate(zip(first.prompt_tokens, second.prompt_tokens)) if x != y),
        len(first.prompt_tokens),
    )
    assert shared > max(i for i, t in enumerate(first.prompt_tokens) if t < 0)  # the image is shared
    assert second.stats.n_drafted > 0
    assert 0 < second.stats.n_draft_prefilled <= len(second.prompt_tokens) - shared + 1, second.stats
    # another image at the same place: the draft evaluates its rows and all that follows them
    other = eng.generate([{**msgs[0], "content": ask(5)[0]["content"]}, *msgs[1:]], max_tokens=8, **SPEC)
    assert other.stats.n_draft_prefilled >= from_image(other) - 1, other.stats


def from_image(r) -> int:  # noqa: ANN001
    """The prompt's tokens from its first image's first row on."""
    return len(r.prompt_tokens) - min(i for i, t in enumerate(r.prompt_tokens) if t < 0)


def test_a_draft_projector_for_another_width_is_one_clear_line(tmp_path, smollm2_path, mmproj_path):
    wide = write_mmproj(tmp_path / "mmproj-640.gguf", shape=ProjectorShape(n_embd_text=640))
    with pytest.raises(LocalspecError) as e:
        Engine(settings(smollm2_path, mmproj_path, wide))
    assert "makes 640-wide embeddings, but the draft is 576 wide" in str(e.value)
    p = localspec("run", "hi", "--target", str(smollm2_path), "--draft", str(smollm2_path),
                  "--mmproj", str(mmproj_path), "--draft-mmproj", str(wide))  # fmt: skip
    assert p.returncode != 0 and "Traceback" not in p.stderr
    assert [ln for ln in p.stderr.splitlines() if "640-wide" in ln] and len(
        p.stderr.strip().splitlines()
    ) == 1, p.stderr
    with pytest.raises(LocalspecError, match="--draft-mmproj needs --mmproj"):
        Engine(Settings.load(target=smollm2_path, draft=smollm2_path, draft_mmproj=mmproj_path))


def test_a_draft_projector_that_cuts_images_otherwise_is_refused_at_load(tmp_path, smollm2_path, mmproj_path):
    fine = write_mmproj(tmp_path / "mmproj-8px.gguf", shape=ProjectorShape(patch_size=8))  # 64 rows, not 16
    with pytest.raises(LocalspecError, match="cuts an image into 64 rows, the target's into 16"):
        Engine(settings(smollm2_path, mmproj_path, fine))
