"""The stand-in pair builder: widening keeps the function, the noise is seeded, builds are idempotent."""

from __future__ import annotations

import numpy as np
import pytest

from localspec.convert import standin


@pytest.fixture(scope="module")
def prompt_tokens(smollm2):
    return smollm2.tokenize("The capital of France is Paris. The capital of Italy is")


def _logits(path, toks):  # noqa: ANN001, ANN202
    from localspec.llama import Context, Model

    with Model(path) as m, Context(m, n_ctx=128) as c:
        return c.eval(toks, 0, len(toks)).copy(), m.n_params, m.meta("llama.feed_forward_length")


def test_widening_without_noise_keeps_the_function(smollm2_path, tmp_path, prompt_tokens):
    from localspec.llama import quantize

    quantize(smollm2_path, tmp_path / "ref.gguf", "f16")
    standin._write_widened(smollm2_path, tmp_path / "w.gguf", r=4, sigma=0.0, seed=0, progress=None)
    ref, n_ref, _ = _logits(tmp_path / "ref.gguf", prompt_tokens)
    wide, n_wide, n_ff = _logits(tmp_path / "w.gguf", prompt_tokens)
    assert n_ff == str(1536 * 4)
    assert n_wide > 2.5 * n_ref  # the FFN is 3/4 of the parameters outside the embeddings
    # r copies each carrying 1/r: exact in f16 (r is a power of two), only the summation order changes
    assert np.abs(wide - ref).max() < 0.05 * ref.std()
    assert (wide.argmax(1) == ref.argmax(1)).all()


def test_noise_is_seeded_and_relative(smollm2_path):
    from gguf import GGUFReader

    reader = GGUFReader(smollm2_path)
    i, t = next((i, t) for i, t in enumerate(reader.tensors) if t.name == "blk.3.ffn_down.weight")

    def make(sigma: float, seed: int) -> np.ndarray:
        return standin._plan(t, i, r=4, sigma=sigma, seed=seed).produce()

    clean, a, b, c = make(0.0, 0), make(0.3, 1), make(0.3, 1), make(0.3, 2)
    assert clean.shape == (576, 1536 * 4)
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    assert abs((a - clean).std() / clean.std() - 0.3) < 0.01  # noise relative to the tensor's own spread
    np.testing.assert_allclose(clean[:, :4].sum(axis=1), clean[:, 0] * 4, rtol=1e-6)  # 4 copies of neuron 0


def test_build_is_atomic_and_idempotent(smollm2_path, tmp_path):
    from localspec.config.pair_toml import read_pair
    from localspec.config.settings import Settings

    lines: list[str] = []
    (tmp_path / "target-q4_k_m.gguf").write_bytes(b"an earlier builder's target")
    toml = standin.build_standin(smollm2_path, tmp_path, r=2, sigma=0.1, seed=3, log=lines.append)
    pair = read_pair(toml)
    assert pair.info["stand_in"] is True and pair.info["r"] == 2 and pair.info["sigma"] == 0.1
    # INT4 in every matrix (llama.cpp's file type 2 is Q4_0), and the old Q4_K_M file is gone
    assert pair.info["target_quant"] == "q4_0" and pair.info["target_file_type"] == 2
    assert pair.target.name == standin.TARGET_NAME and pair.draft.name == standin.DRAFT_NAME
    assert pair.runtime == {"draft_max": "auto"}
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["pair.toml", standin.TARGET_NAME, standin.DRAFT_NAME]
    )
    assert Settings.load(pair=tmp_path).draft == pair.draft
    stamp = pair.target.stat().st_mtime_ns
    lines.clear()
    assert standin.build_standin(smollm2_path, tmp_path, r=2, sigma=0.1, seed=3, log=lines.append) == toml
    assert "already built" in lines[0] and pair.target.stat().st_mtime_ns == stamp
    # another recipe is another pair: the recorded one no longer matches
    recipe = {
        "r": 2,
        "sigma": 0.1,
        "seed": 4,
        "source_sha256": pair.info["source_sha256"],
        "builder": standin.BUILDER_VERSION,
    }
    assert not standin._up_to_date(toml, recipe)
    assert standin._up_to_date(toml, {**recipe, "seed": 3})


def test_a_broken_link_or_a_file_in_the_way_is_one_clear_line(smollm2_path, tmp_path):
    from localspec.errors import LocalspecError

    link = tmp_path / "default"
    link.symlink_to(tmp_path / "gone")
    with pytest.raises(LocalspecError, match="broken link"):
        standin.build_standin(smollm2_path, link, log=lambda _: None)
    link.unlink()
    link.write_text("not a folder")
    with pytest.raises(LocalspecError, match="not a folder"):
        standin.build_standin(smollm2_path, link, log=lambda _: None)


def test_nothing_under_models_but_its_readme_is_tracked():
    # a worktree's models/default symlink was once committed and broke every fresh clone's `make models`
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        pytest.skip("not a git checkout")
    tracked = subprocess.run(
        ["git", "ls-files", "models"], cwd=root, capture_output=True, text=True, check=True
    )
    assert tracked.stdout.split() == ["models/README.md"]
