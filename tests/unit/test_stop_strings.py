"""Stop strings (decode/detok.StopMatcher): the same text out as the plain definition, and a cost
per token that does not grow with the stop strings' length (#48: 16 stops of 4,096 characters
cost 25 ms a token on the engine thread)."""

from __future__ import annotations

import time

from hypothesis import given, settings
from hypothesis import strategies as st

from localspec.config.settings import MAX_STOP_CHARS, MAX_STOP_STRINGS
from localspec.decode.detok import StopMatcher


class Definition:
    """What the matcher must do, written the plain way: emit everything but the longest suffix that
    could still start a stop string; on a hit, everything before the earliest-starting stop string."""

    def __init__(self, stops: list[str]) -> None:
        self.stops, self.held, self.hit = [s for s in stops if s], "", None

    def push(self, text: str) -> str:
        buf = self.held + text
        found = [(buf.find(s), s) for s in self.stops if s in buf]
        if found:
            at, self.hit = min(found)
            self.held = ""
            return buf[:at]
        keep = max([n for s in self.stops for n in range(1, len(s)) if buf.endswith(s[:n])], default=0)
        self.held = buf[len(buf) - keep :]
        return buf[: len(buf) - keep]


@settings(max_examples=400, deadline=None)
@given(
    stops=st.lists(st.text(alphabet="abc", min_size=1, max_size=6), max_size=4),
    pieces=st.lists(st.text(alphabet="abcd", max_size=5), max_size=12),
)
def test_the_same_text_as_the_definition(stops, pieces):
    fast, plain = StopMatcher(stops), Definition(stops)
    for piece in pieces:
        assert fast.push(piece) == plain.push(piece)
        assert fast.hit == plain.hit
        if fast.hit is not None:
            break
    else:
        assert fast.flush() == plain.held


def test_a_token_costs_the_same_however_long_the_stop_strings():
    # the old matcher's worst case: the last stop string holds 4,095 characters back, and each of the
    # others was tried at every length below that, copying its prefix each time
    others = [chr(ord("b") + i) * MAX_STOP_CHARS for i in range(MAX_STOP_STRINGS - 1)]
    stops = [*others, "a" * (MAX_STOP_CHARS - 1) + "z"]
    m = StopMatcher(stops)
    m.push("a" * (MAX_STOP_CHARS - 1))
    n = 200
    t = time.perf_counter()
    for _ in range(n):
        assert m.push("a") == "a"  # the held text slides: one character out per one in
    per_token = (time.perf_counter() - t) / n
    assert per_token < 1e-3, f"{per_token * 1e3:.2f} ms a token"  # it was 25 ms
    assert m.hit is None and m.push("z") == "" and m.hit == stops[-1]
