"""The FIM benchmark's problems check their own checker: each reference middle passes its test, an
empty middle fails it; and the summary's arithmetic."""

from __future__ import annotations

import pytest

from localspec.bench.fim import Sample, load_problems, markdown, passes, summary

PROBLEMS = load_problems()


@pytest.mark.parametrize("p", PROBLEMS, ids=[p.id for p in PROBLEMS])
def test_the_reference_middle_passes_and_an_empty_one_fails(p):
    assert passes(p, p.middle)
    assert not passes(p, "")
    assert p.middle not in p.prefix + p.suffix  # the answer is not given away verbatim


def test_each_hole_is_on_an_indented_line():
    assert all(p.indent in (4, 8) for p in PROBLEMS)


def test_a_problem_with_extra_files_sees_them():
    p = next(p for p in PROBLEMS if p.extra)
    assert p.setup and all(c.filename in p.setup for c in p.extra)


def test_the_summary():
    s = [Sample("a", "plain", 0, 10.0, 100.0 * i, 5, 0.0, i % 2 == 0, "") for i in range(1, 11)]
    (row,) = summary(s)
    assert row["requests"] == 10 and row["pass_rate"] == 0.5
    assert row["median_ms"] == 550.0 and row["p90_ms"] == 1000.0 and row["ttft_ms"] == 10.0
    assert "| plain | 10 | 50% | 550 ms | 1000 ms |" in markdown([row])
