"""`bench --round-overhead` (localspec/bench/round_cost.py): its zero-cost rounds are the worst
case it says they are, and a sequence that reaches an end of text keeps being measured."""

from __future__ import annotations

import pytest

from localspec.bench import round_cost as rc


def _decoders(pool, n_seq: int, cls=rc.ZeroCostDecoder):  # noqa: ANN001, ANN202
    return cls(pool, n_ctx=512, n_seq=n_seq), cls(pool, n_ctx=512, n_seq=n_seq)


@pytest.mark.parametrize("mode", ["greedy", "coupled", "pq"])
def test_every_draft_is_accepted_so_a_round_emits_k_plus_one_tokens(mode):
    pool = rc.random_pool(5000, seed=1)
    target, draft = _decoders(pool, 3)
    row = rc.measure(target, draft, backend="z", n_vocab=5000, n_seq=3, k=4, mode=mode, rounds=5)
    assert row.tokens_per_round == 3 * 5
    assert 0 < row.ms_min <= row.ms_per_round <= row.ms_max


class EndsOften(rc.ZeroCostDecoder):
    def is_eog(self, token: int) -> bool:
        return token % 5 == 0


def test_a_sequence_that_ends_its_text_is_still_measured():
    pool = rc.random_pool(5000, seed=2)
    target, draft = _decoders(pool, 2, EndsOften)
    row = rc.measure(target, draft, backend="z", n_vocab=5000, n_seq=2, k=4, mode="coupled", rounds=12)
    assert row.tokens_per_round > 2  # both sequences emit in the measured rounds, ends or not
