"""How a decode of several sequences is cut into llama_decode calls on an rs memory
(llama/recurrent.py `rs_calls`): one ubatch of several first, then one sequence a call, so that no
later call's cell gather moves a sequence off the rollback planes this round wrote."""

from __future__ import annotations

import pytest

from localspec.llama.recurrent import rs_calls


@pytest.mark.parametrize(
    "lens, seqs, sequential, calls",
    [
        ([5, 5, 5], [0, 1, 2], True, [[0, 1, 2]]),  # one ubatch: one call
        ([3, 5, 5], [0, 1, 2], False, [[1, 2], [0]]),  # the pair of one length first
        ([3, 5, 5, 3, 3], [0, 1, 2, 3, 4], False, [[0, 3, 4], [1], [2]]),  # the largest set
        ([5, 5], [0, 2], False, [[0, 1]]),  # a unified hybrid's split takes any sequences ...
        ([5, 5], [0, 2], True, [[0], [1]]),  # ... a recurrent one's ascending, one apart
        ([5, 5], [2, 1], True, [[0], [1]]),
        ([300, 300], [0, 1], False, [[0], [1]]),  # past n_ubatch: llama.cpp would cut it
        ([200, 200, 200], [0, 1, 2], False, [[0, 1], [2]]),
        ([7], [3], False, [[0]]),
    ],
)
def test_rs_calls(lens, seqs, sequential, calls):
    assert rs_calls(lens, seqs, 512, sequential) == calls
