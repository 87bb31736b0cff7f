"""The prompt cache on disk on real models: a new Engine (a restart) loads the prefix the last one
saved and evaluates only the prompt's last token, with the same greedy answer; the target's and
the draft's states both come back (the stand-in pair); a file with one byte changed, cut short,
or written by another model is refused with one line and the answer does not change; the folder
stays under its cap."""

from __future__ import annotations

from pathlib import Path

import pytest

from localspec.config.settings import Settings
from localspec.engine import Engine
from localspec.engine.prompt_disk.store import SUFFIX

MIN = 256
WORDS = "river stone lamp orchard violin harbor thunder maple lantern copper meadow falcon".split()


def long_prompt(n_lines: int = 30, seed: int = 0) -> str:
    lines = [
        f"Note {i}: the {WORDS[(i * 7 + seed) % len(WORDS)]} near the {WORDS[(i * 5 + seed + 3) % len(WORDS)]} "
        f"was counted {i * 13 + seed} times."
        for i in range(n_lines)
    ]
    return "\n".join(lines) + "\nSummary of the notes above in one sentence:"


def run(folder: Path, prompt: str, lines: list[str] | None = None, **kw):  # noqa: ANN003, ANN201
    """One process's life: an Engine over the cache folder, one greedy answer, closed (saves flushed)."""
    s = Settings.load(
        n_ctx=1024, prompt_cache=True, prompt_cache_dir=folder, prompt_cache_min=MIN, n_threads=1, **kw
    )
    log = (lines if lines is not None else []).append
    with Engine(s, log=log) as eng:
        return eng.generate(prompt, temperature=0, max_tokens=12, seed=1)


def files(folder: Path) -> list[Path]:
    return sorted(folder.glob(f"*{SUFFIX}"), key=lambda p: p.stat().st_mtime_ns)


def test_a_restart_evaluates_only_what_follows_the_saved_prefix(smollm2_path, tmp_path):
    prompt = long_prompt()
    first = run(tmp_path, prompt, target=smollm2_path)
    n = len(first.prompt_tokens)
    assert n > MIN + 100 and first.stats.n_prefilled == n
    assert len(files(tmp_path)) == 1
    lines: list[str] = []
    second = run(tmp_path, prompt, lines, target=smollm2_path)
    assert second.tokens == first.tokens
    assert second.stats.n_prefilled == 1  # the last prompt token, in the first verify
    assert not [line for line in lines if " refused (" in line]
    turn = prompt + " The notes count objects.\nNow list three of the objects:"
    third = run(tmp_path, turn, target=smollm2_path)  # a next turn: the saved prefix, then what is new
    assert third.stats.n_prefilled == len(third.prompt_tokens) - (n - 1)


def test_the_target_and_the_draft_both_come_back(standin_pair, tmp_path):
    prompt = long_prompt(22, seed=2)
    first = run(tmp_path, prompt, pair=standin_pair, draft_max=3)
    assert first.stats.n_draft_prefilled > MIN  # the draft caught up on the prompt, and was saved as it left
    assert len(files(tmp_path)) == 2
    second = run(tmp_path, prompt, pair=standin_pair, draft_max=3)
    assert second.tokens == first.tokens
    assert second.stats.n_prefilled == 1
    assert second.stats.n_draft_prefilled <= 2  # its cache came back too: only its catch-up's last tokens


def _flip_last_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))


def _cut(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


@pytest.mark.parametrize("spoil", [_flip_last_byte, _cut], ids=["one-byte-changed", "truncated"])
def test_a_damaged_file_is_refused_with_one_line(smollm2_path, tmp_path, spoil):
    prompt = long_prompt(25, seed=4)
    first = run(tmp_path, prompt, target=smollm2_path)
    (path,) = files(tmp_path)
    spoil(path)
    lines: list[str] = []
    second = run(tmp_path, prompt, lines, target=smollm2_path)
    refused = [line for line in lines if " refused (" in line]
    assert len(refused) == 1 and path.name in refused[0], lines
    assert second.tokens == first.tokens
    assert second.stats.n_prefilled == len(first.prompt_tokens)  # evaluated as if it were not there
    assert len(files(tmp_path)) == 1  # removed, and the evaluated prompt saved afresh


def test_another_models_file_is_refused_with_one_line(smollm2_path, gemma_path, tmp_path):
    prompt = long_prompt(25, seed=5)
    first = run(tmp_path, prompt, target=smollm2_path)
    (ours,) = files(tmp_path)
    theirs = tmp_path / "gemma"
    run(theirs, prompt, target=gemma_path)
    (foreign,) = files(theirs)
    ours.write_bytes(foreign.read_bytes())  # gemma's state under SmolLM2's name
    lines: list[str] = []
    second = run(tmp_path, prompt, lines, target=smollm2_path)
    assert [line for line in lines if " refused (" in line] == [
        f"prompt cache: {ours.name} refused (written for another model, llama.cpp build or context "
        "settings); removed, the prompt is evaluated instead"
    ]
    assert second.tokens == first.tokens and second.stats.n_prefilled == len(first.prompt_tokens)


def test_the_folder_stays_under_its_cap(smollm2_path, tmp_path):
    run(tmp_path, long_prompt(25, seed=6), target=smollm2_path)
    (one,) = files(tmp_path)
    cap = 1.5 * one.stat().st_size  # room for one prefix of this size, not two
    for seed in (7, 8):
        run(tmp_path, long_prompt(25, seed=seed), target=smollm2_path, prompt_cache_gib=cap / (1 << 30))
    left = files(tmp_path)
    assert len(left) == 1 and sum(p.stat().st_size for p in left) <= cap
    again = run(tmp_path, long_prompt(25, seed=8), target=smollm2_path)  # the newest stayed
    assert again.stats.n_prefilled == 1
