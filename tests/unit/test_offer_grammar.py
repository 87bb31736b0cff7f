"""A free source's offer under a grammar is cut where the grammar stops allowing it, before K is
chosen: plans are priced on the offer's length, and on the real pair's json prompts an offer the
grammar cut only at draft time left the draft model to extend it, paying its catch-up on the whole
prompt for tokens no plan had priced."""

from __future__ import annotations

import numpy as np

from localspec.decode.sampling import SamplingParams
from localspec.decode.seqplan import SeqPlan
from localspec.decode.sources.grammar import GrammarSource
from localspec.decode.sources.lookup import offer_match
from localspec.decode.state import SeqState, SpecConfig
from localspec.decode.stats import Counters
from localspec.draft_len.fixed import FixedK
from tests.toy_json import GRAMMAR, PIECES


def _plan(aware: bool) -> SeqPlan:
    st = SeqState.start(
        0, [1], SamplingParams(temperature=0.0), SpecConfig(grammar_drafts=aware),
        np.random.default_rng(0), Counters(), FixedK(3), lookup=True, matcher=GRAMMAR.matcher(),
    )  # fmt: skip
    p = SeqPlan(st, 16, False, 40)
    GrammarSource().offer(p)  # the forced run first, as the round's sources offer in order
    return p


def _allowed_and_not(p: SeqPlan) -> tuple[int, int]:
    """A token the grammar allows after the forced run, and one it does not."""
    matcher = p.st.track.matcher
    ok = [t for t in range(1, len(PIECES)) if matcher.valid_prefix([t]) == 1]
    bad = [t for t in range(1, len(PIECES)) if matcher.valid_prefix([t]) == 0]
    return ok[0], bad[0]


def test_an_offer_is_cut_where_the_grammar_stops_allowing_it():
    p = _plan(aware=True)
    ok, bad = _allowed_and_not(p)
    offer_match(p, "lookup", [*p.forced, ok, bad, ok], 5)
    assert [o.tokens for o in p.offers] == [[ok]]


def test_an_offer_the_grammar_refuses_at_once_is_no_offer():
    p = _plan(aware=True)
    _, bad = _allowed_and_not(p)
    offer_match(p, "lookup", [*p.forced, bad], 5)
    assert p.offers == ()


def test_blind_drafts_offer_the_whole_match():
    """With grammar-aware drafting off (llama.cpp's way, for comparison) nothing is cut."""
    p = _plan(aware=False)
    ok, bad = _allowed_and_not(_plan(True))
    offer_match(p, "lookup", [ok, bad, ok], 5)
    assert [o.tokens for o in p.offers] == [[ok, bad, ok]]
