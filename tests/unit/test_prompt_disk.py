"""The prompt cache on disk (engine/prompt_disk) over the fake backend, whose "KV state" is the tokens
it holds: a fresh scheduler (a restart) loads a saved prefix into both contexts and evaluates only
what follows it, with the same output; a file changed, cut short or written for another key is
refused with one line and changes nothing; the folder stays under its cap, least recently used out."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from localspec.engine.prompt_disk import entry
from localspec.engine.prompt_disk.store import SUFFIX, Store
from localspec.engine.prompt_disk.warm import PromptDisk
from localspec.engine.scheduler import Scheduler

from ..fake_backend import FakeContext, markov_tables
from ..helpers import FakeJob, drain

KEY = {"model": "fake", "n_ctx": 1024}
MIN = 32


def prompt_of(n, seed=0):
    return [int(x) for x in np.random.default_rng(seed).integers(0, 16, n)]


class Run:
    """One process's life: fresh contexts, stores over `folder` and a scheduler."""

    def __init__(self, folder: Path, *, key=KEY, cap=1 << 20, draft=True):
        t, d = markov_tables(v=16, noise=1.0, seed=3)
        self.lines: list[str] = []
        self.target = FakeContext(t, n_ctx=1024)
        self.draft = FakeContext(d, n_ctx=1024) if draft else None
        ctxs = [c for c in (self.target, self.draft) if c is not None]
        self.stores = [
            Store(folder, key | {"role": i}, cap_bytes=cap, max_tokens=1024, log=self.lines.append)
            for i in range(len(ctxs))
        ]
        self.disk = PromptDisk(list(zip(ctxs, self.stores)), min_tokens=MIN, log=self.lines.append)
        self.sched = Scheduler(self.target, self.draft, 1, disk=self.disk)

    def job(self, prompt, n=20):
        job = FakeJob(prompt, n=n, k=3)
        self.sched.add(job)
        drain(self.sched)
        assert self.disk.flush(10)
        return job


def test_a_restart_loads_the_saved_prefix_into_both_contexts_and_evaluates_only_the_rest(tmp_path):
    prompt = prompt_of(300)
    first = Run(tmp_path).job(prompt)
    assert first.counters.n_prefilled == len(prompt)
    assert len(list(tmp_path.glob(f"*{SUFFIX}"))) == 2  # the target's prefix, the draft's

    again = Run(tmp_path)
    second = again.job(prompt)
    assert second.got == first.got
    assert second.counters.n_prefilled == 1  # only the first verify's token
    assert second.counters.n_draft_prefilled <= 1  # the draft's, saved as its job left
    evals = [pos for _, kind, _, pos in again.target.seq_calls if kind == "eval"]
    assert "restore" in {c[1] for c in again.target.seq_calls} and min(evals) == len(prompt) - 1
    assert not again.lines[1:], again.lines  # nothing refused

    longer = prompt + prompt_of(50, seed=9)  # a next turn: the saved prefix, then what is new
    third = Run(tmp_path).job(longer)
    assert third.counters.n_prefilled == 50 + 1


def test_a_short_prompt_is_neither_saved_nor_loaded(tmp_path):
    Run(tmp_path).job(prompt_of(MIN - 2))
    assert not list(tmp_path.glob(f"*{SUFFIX}"))


def _target_file(folder: Path, run: Run) -> Path:
    return next(folder.glob(f"{run.stores[0].prefix}-*{SUFFIX}"))


def _spoil_state(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-5] ^= 0x01  # one bit of the state
    path.write_bytes(bytes(data))


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-7])


@pytest.mark.parametrize("spoil", [_spoil_state, _truncate], ids=["one-byte-changed", "truncated"])
def test_a_damaged_file_is_refused_with_one_line_and_changes_nothing(tmp_path, spoil):
    prompt = prompt_of(200, seed=4)
    first_run = Run(tmp_path)
    first = first_run.job(prompt)
    path = _target_file(tmp_path, first_run)
    spoil(path)

    again = Run(tmp_path)
    second = again.job(prompt)
    refused = [line for line in again.lines if " refused (" in line]
    assert len(refused) == 1 and path.name in refused[0], again.lines
    assert second.got == first.got
    assert second.counters.n_prefilled == len(prompt)  # evaluated as if it were not there
    assert "restore" not in {c[1] for c in again.target.seq_calls}  # llama.cpp never saw it


def test_a_file_written_for_another_key_is_refused(tmp_path):
    prompt = prompt_of(200, seed=5)
    ours = Run(tmp_path)
    first = ours.job(prompt)
    path = _target_file(tmp_path, ours)
    other = tmp_path / "other"
    Run(other, key=KEY | {"model": "another"}).job(prompt)
    path.write_bytes(next(other.glob(f"*{SUFFIX}")).read_bytes())  # another model's file, under our name

    again = Run(tmp_path)
    second = again.job(prompt)
    assert [line for line in again.lines if " refused (" in line] == [
        f"prompt cache: {path.name} refused (written for another model, llama.cpp build or context "
        "settings); removed, the prompt is evaluated instead"
    ]
    assert second.got == first.got and second.counters.n_prefilled == len(prompt)


def test_the_folder_stays_under_its_cap_least_recently_used_out(tmp_path):
    run = Run(tmp_path, draft=False)
    prompts = [prompt_of(200, seed=10 + i) for i in range(3)]
    run.job(prompts[0])
    one = _target_file(tmp_path, run).stat().st_size
    run.stores[0].cap_bytes = int(2.5 * one)  # room for two
    run.job(prompts[1])
    assert run.job(prompts[0]).counters.n_prefilled == 1  # loaded: now the most recently used
    run.job(prompts[2])
    files = list(tmp_path.glob(f"*{SUFFIX}"))
    assert len(files) == 2 and sum(p.stat().st_size for p in files) <= 2.5 * one
    assert run.stores[0].best(prompts[0], 199)[1] == 199  # kept
    assert run.stores[0].best(prompts[1], 199)[1] < MIN  # the least recently used went
    assert Run(tmp_path, draft=False).job(prompts[1]).counters.n_prefilled == 200


def test_the_checksum_covers_every_byte_after_the_framing(tmp_path):
    key = entry.canonical(KEY)
    path = tmp_path / "x.lsc"
    path.write_bytes(
        b"".join(bytes(c) for c in entry.chunks(key, np.arange(40, dtype=np.int32), bytearray(b"s" * 64)))
    )
    tokens, state = entry.read_verified(path, key, 1 << 20, 1024)
    assert tokens.tolist() == list(range(40)) and bytes(state) == b"s" * 64
    data = path.read_bytes()
    # the magic, the version, the header's length, the digest, the header, a token, the state
    for i in (0, 9, 13, 20, 60, len(data) - 100, len(data) - 1):
        bad = bytearray(data)
        bad[i] ^= 0x40
        path.write_bytes(bytes(bad))
        with pytest.raises(entry.Refused):
            entry.read_verified(path, key, 1 << 20, 1024)


def test_what_a_killed_writer_left_half_written_goes_at_the_next_save(tmp_path):
    dead = tmp_path / f".abc-def{SUFFIX}.{2**22 + 12345}.partial"  # above pid_max's default: no such process
    dead.write_bytes(b"x" * 1000)
    Run(tmp_path, draft=False).job(prompt_of(100, seed=30))
    assert not dead.exists() and len(list(tmp_path.glob(f"*{SUFFIX}"))) == 1
