"""When speculation loses: the auto policy's fall back to plain decoding and its re-probes.

A window of drafted rounds is judged against the plain rate; a window that loses starts a plain
stretch, whose last round arms a re-probe (one real drafted round). A re-probe that still loses
doubles the next stretch, up to 16 gaps; speculation that pays again resets it. A request whose
first round the costs predict to lose starts plain the same way (`started_plain`: said once in the
stats, not as a fallback). The gap itself is priced by the caller (AutoK: a lost re-probe may cost
the stretch a small share of its time)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

MAX_STRETCH = 16  # gaps in the longest plain stretch
MARGIN = 0.9  # a window loses below this share of the plain rate (16 rounds are noisy)


@dataclass
class Fallback:
    window: int = 16  # drafted rounds judged together
    recent: deque = field(default_factory=deque)  # (tokens, seconds) of the window's rounds so far
    plain_left: int = 0  # plain rounds before the next re-probe
    fallbacks: int = 0
    started_plain: bool = False
    predict_start: bool = False  # the request's first choice may be "plain" outright (costs known)
    reprobe: bool = False  # this round re-probes (the stretch just ended)
    stretch: int = 1  # the next stretch, in gaps
    stretch_len: int = 0  # plain steps in the current stretch

    def __post_init__(self) -> None:
        self.recent = deque(maxlen=self.window)

    def plain_step(self) -> bool:
        """Whether this round is one of a plain stretch's (its last one arms the re-probe)."""
        if self.plain_left <= 0:
            return False
        self.plain_left -= 1
        self.reprobe = self.plain_left == 0
        return True

    def start_stretch(self, gap: int) -> None:
        """Plain rounds before the next re-probe: a re-probe is not free (the draft first catches up
        on every token since it last drafted), so each one that finds speculation still losing
        doubles the wait, up to MAX_STRETCH gaps."""
        self.plain_left = self.stretch_len = gap * self.stretch - 1
        self.stretch = min(2 * self.stretch, MAX_STRETCH)

    def fall_back(self, gap: int) -> None:
        self.fallbacks += 1
        self.start_stretch(gap)
        self.recent.clear()

    def start_plain(self, gap: int) -> None:
        """The costs predict this request's first round loses: plain from the start."""
        self.started_plain = True
        self.start_stretch(gap)

    def losing(self, n_emitted: int, round_s: float, plain_s: float | None) -> bool:
        """One drafted round into the window; whether the window, now full, realised less than the
        plain rate (`plain_s`: a plain step's mean seconds, the round's overhead included: like
        with like, stalls in both). Windows do not overlap: one verdict per window."""
        self.recent.append((n_emitted, round_s))
        if len(self.recent) < self.window or not plain_s:
            return False
        toks = sum(n for n, _ in self.recent)
        secs = sum(s for _, s in self.recent)
        self.recent.clear()
        return toks / secs < MARGIN / plain_s
