"""`localspec pair --mmproj` and `check-pair --mmproj` as a user runs them, with SmolLM2 and the
synthetic projector for its width (models/mmproj-smollm2-test.gguf): the projector goes into the pair
folder and its pair.toml, and a run of the pair sees images through it."""

from __future__ import annotations

import json
import os

from ..helpers import localspec, png


def test_pair_with_a_projector_is_checked_and_seen_through_its_pair_toml(tmp_path, smollm2_path, mmproj_path):
    from localspec.config.pair_toml import read_pair

    out = tmp_path / "seeing"
    smol = str(smollm2_path)
    p = localspec(
        "pair", smol, smol, "--out-dir", str(out), "--target-type", "q8_0", "--mmproj", str(mmproj_path)
    )
    assert p.returncode == 0, p.stderr
    assert 'mmproj = "mmproj-smollm2-test.gguf"' in (out / "pair.toml").read_text()  # relative: it can move
    placed, src = out / "mmproj-smollm2-test.gguf", mmproj_path.resolve()
    assert placed.read_bytes() == src.read_bytes()
    if os.stat(out).st_dev == os.stat(src).st_dev:  # one filesystem: a hard link, not a second copy
        assert os.path.samefile(placed, src)

    moved = tmp_path / "moved"
    out.rename(moved)
    pair = read_pair(moved)
    assert pair.mmproj == moved / "mmproj-smollm2-test.gguf"
    check = localspec("check-pair", str(pair.target), str(pair.draft), "--mmproj", str(pair.mmproj))
    assert check.returncode == 0, check.stderr
    assert "mmproj: " in check.stdout and "(mlp, 64 px images): makes 576-wide embeddings" in check.stdout

    (tmp_path / "a.png").write_bytes(png(1))
    # a fixed --draft-max: the pair's "auto" would calibrate first
    ask = ["run", "What is in this picture?", "--chat", "--temperature", "0", "--max-tokens", "8", "--json",
           "--draft-max", "4", "--image", str(tmp_path / "a.png")]  # fmt: skip
    by_pair = localspec(*ask, "--pair", str(moved))
    by_hand = localspec(
        *ask, "--target", str(pair.target), "--draft", str(pair.draft), "--mmproj", str(pair.mmproj)
    )
    assert by_pair.returncode == 0 and by_hand.returncode == 0, by_pair.stderr + by_hand.stderr
    a, b = json.loads(by_pair.stdout), json.loads(by_hand.stdout)
    assert a["text"] and a["text"] == b["text"] and a["n_prompt_tokens"] == b["n_prompt_tokens"]


def test_pair_from_a_checkpoint_checks_the_projector_against_the_converted_target(tmp_path, mmproj_path):
    """A checkpoint's width is known once converted: a projector for another width is refused then,
    and the converted files go (SmolLM2's projector, 576 wide, with a 64-wide model)."""
    from ..fixtures_hf import tiny_hf

    hf, out = str(tiny_hf(tmp_path / "hf", "LlamaForCausalLM")), tmp_path / "pair"
    p = localspec("pair", hf, hf, "--out-dir", str(out), "--mmproj", str(mmproj_path))
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert "makes 576-wide embeddings, but the target is 64 wide" in p.stderr, p.stderr
    assert not [f for f in out.rglob("*") if f.is_file()]


def test_pair_and_check_pair_take_the_drafts_own_projector(tmp_path, smollm2_path, mmproj_path):
    """`--draft-mmproj`: checked against the draft, linked in as draft-NAME (both repos may name
    theirs mmproj-F16.gguf), named in pair.toml, and loaded from it; one for another width is one line."""
    from localspec.config.pair_toml import read_pair
    from localspec.config.settings import Settings
    from localspec.convert.synthetic_mmproj import ProjectorShape, write_mmproj

    out, smol, mp = tmp_path / "both", str(smollm2_path), str(mmproj_path)
    p = localspec("pair", smol, smol, "--out-dir", str(out), "--target-type", "q8_0", "--mmproj", mp,
                  "--draft-mmproj", mp)  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert 'draft_mmproj = "draft-mmproj-smollm2-test.gguf"' in (out / "pair.toml").read_text()
    pair = read_pair(out)
    assert pair.draft_mmproj == out / "draft-mmproj-smollm2-test.gguf" and pair.mmproj != pair.draft_mmproj
    s = Settings.load(pair=out)
    assert (s.mmproj, s.draft_mmproj) == (pair.mmproj, pair.draft_mmproj)

    check = localspec("check-pair", smol, smol, "--mmproj", mp, "--draft-mmproj", mp)
    assert check.returncode == 0, check.stderr
    assert (
        "draft_mmproj: " in check.stdout and "makes 576-wide embeddings, as the draft takes" in check.stdout
    )

    wide = write_mmproj(tmp_path / "mmproj-640.gguf", shape=ProjectorShape(n_embd_text=640))
    for cmd in (
        ("check-pair", smol, smol),
        ("pair", smol, smol, "--out-dir", str(tmp_path / "no"), "--mmproj", mp),
    ):
        bad = localspec(*cmd, "--draft-mmproj", str(wide))
        assert bad.returncode == 1 and "Traceback" not in bad.stderr, bad.stderr
        assert "makes 640-wide embeddings, but the draft is 576 wide" in bad.stderr, bad.stderr
    assert not (tmp_path / "no").exists() or not [f for f in (tmp_path / "no").rglob("*") if f.is_file()]
