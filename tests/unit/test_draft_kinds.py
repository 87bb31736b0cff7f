"""A kind of drafter is a unit (localspec/draft_kinds): a dummy kind registered in one line - its name
in the settings, its blocks recognised in a target's header, its card label and tuner-cache key,
its context opened and its own DraftSource drafting - runs end to end on the fake backend, lossless,
its drafts counted under its name; and the registry agrees with the settings' names."""

from __future__ import annotations

from contextlib import ExitStack
from importlib.metadata import EntryPoint
from pathlib import Path

import numpy as np
import pytest

from localspec import draft_kinds
from localspec.config import settings as settings_mod
from localspec.config.settings import Settings
from localspec.decode.sampling import SamplingParams
from localspec.decode.sources.model import ModelSource
from localspec.decode.state import SeqState, SpecConfig
from localspec.decode.stats import Counters
from localspec.draft_kinds.base import DrafterKind, Opened, Opening
from localspec.draft_len.fixed import FixedK
from localspec.engine.scheduler import Schedulable, Scheduler
from localspec.errors import LocalspecError
from localspec.gguf.file import read_header

from ..fake_backend import FakeContext, markov_tables
from ..gguf_bytes import Gguf, kv_u32
from ..helpers import drain, plain

GREEDY = SamplingParams(temperature=0.0)


class DummySource(ModelSource):
    """Its own source: drafts as a draft model does, and counts the rounds it proposed in."""

    rounds = 0

    def propose(self, plans, clock):  # noqa: ANN001
        type(self).rounds += 1
        super().propose(plans, clock)


class Dummy(DrafterKind):
    name = "dummy"
    source = DummySource
    in_header = True

    def __init__(self, table: np.ndarray) -> None:
        self.table = table

    def layers_in(self, header) -> int:  # noqa: ANN001
        return int(header.get("{arch}.dummy_layers", 0) or 0)

    def note(self, layers: int) -> str:
        return f"{layers} dummy layer(s)"

    def check(self, s: Settings) -> None:
        if s.mmproj is not None:
            raise LocalspecError("--draft dummy takes no images")

    def open(self, o: Opening) -> Opened:
        ctx = FakeContext(self.table, n_ctx=o.target_ctx.n_ctx, n_seq=o.target_ctx.n_seq)
        ctx.source = "dummy"  # what the stats call its drafts
        return Opened(ctx)

    def cache_key(self, s: Settings) -> str:
        return "dummy-v1"


class Job(Schedulable):
    def __init__(self, prompt: list[int], n: int) -> None:
        self.prompt, self.n, self.got, self.state = prompt, n, [], None

    def start(self, seq: int) -> SeqState:
        self.state = SeqState.start(
            seq, self.prompt, GREEDY, SpecConfig(), np.random.default_rng(0), Counters(), FixedK(3),
            max_new=self.n,
        )  # fmt: skip
        return self.state

    def deliver(self, steps) -> bool:  # noqa: ANN001
        self.got += [s.token for s in steps]
        return True


@pytest.fixture
def dummy(monkeypatch):
    t, d = markov_tables(v=16, noise=1.0, seed=3)
    kind = Dummy(d)
    # its entry point (pyproject.toml's one line), as the settings and the registry read it
    names = (*settings_mod.drafter_names(), kind.name)
    monkeypatch.setattr(settings_mod, "drafter_names", lambda: names)
    monkeypatch.setattr(draft_kinds, "KINDS", (*draft_kinds.KINDS, kind))
    monkeypatch.setattr(draft_kinds, "BY_NAME", {k.name: k for k in draft_kinds.KINDS})
    return t, kind


def test_the_registry_names_what_the_settings_accept():
    assert [k.name for k in draft_kinds.KINDS] == list(settings_mod.drafter_names())  # one list
    with pytest.raises(LocalspecError, match="draft_source must be one of model, mtp"):
        Settings(draft_source="dummy")  # not registered: refused in one line
    assert Settings(draft="mtp").draft_source == "mtp"  # a kind with no file: `--draft NAME`


def test_a_registered_kind_is_a_setting_with_no_other_edit(dummy):
    assert Settings(draft_source="dummy").drafter == "dummy"
    s = Settings(draft="dummy")  # it loads no --draft GGUF: the name is its --draft-source
    assert (s.draft, s.draft_source) == (None, "dummy")


def test_a_registered_dummy_drafter_runs_end_to_end_on_the_fake_backend(dummy, tmp_path):
    t, kind = dummy
    target_file = tmp_path / "t.gguf"
    g = Gguf()
    g.kvs.append(kv_u32("llama.dummy_layers", 2))
    target_file.write_bytes(g.bytes())
    assert draft_kinds.in_target(target_file) is kind  # recognised from the header
    assert draft_kinds.header_layers(read_header(target_file))["dummy"] == 2
    assert draft_kinds.describe(target_file).endswith("; 2 dummy layer(s)")

    s = Settings(target=target_file, draft_source="dummy")
    assert s.drafter == "dummy" and not s.speculative and draft_kinds.kind_of(s) is kind
    assert draft_kinds.label(s) == "dummy" and draft_kinds.cache_key(s) == "dummy-v1"
    assert draft_kinds.kind_of(s.replace(lookup="only")) is None  # lookup drafts only: no drafter
    with pytest.raises(LocalspecError, match="takes no images"):
        kind.check(s.replace(mmproj=Path("p.gguf")))

    target = FakeContext(t, n_seq=2)
    with ExitStack() as stack:
        opened = kind.open(Opening(s, None, target, None, None, stack, print))
    sched = Scheduler(target, opened.ctx, 2, drafting=draft_kinds.source_of(s))
    jobs = [Job([1, 2, 3], 24), Job([5, 6], 24)]
    for job in jobs:
        sched.add(job)
    drain(sched)
    for job in jobs:  # lossless: greedy speculative output is the target's own
        assert job.got == plain(t, job.prompt, n=24)
        by_source = job.state.counters.sources
        assert set(by_source) == {"dummy"} and by_source["dummy"].drafted > 0
    assert DummySource.rounds > 0


def test_a_plugin_that_fails_to_load_is_one_line_naming_it(monkeypatch):
    broken = EntryPoint("broken", "no_such_package.kind:Kind", settings_mod.DRAFTERS)
    monkeypatch.setattr(draft_kinds, "drafter_entry_points", lambda: (broken,))
    with pytest.raises(
        LocalspecError, match=r"the drafter kind 'broken' \(no_such_package.kind:Kind\) failed to load"
    ):
        draft_kinds._registered()
