"""The bulk thread takes turns (issue 60): one client's large pieces run at once, up to BURST_S of
CPU, and past it a flood of them gets SHARE of a core's time; the engine's decoding keeps the rest
(three clients of 7.8 MB bodies kept a core busy and a decoding neighbour at a fifth of its speed).
On a clock of its own: the rule, not this machine's load."""

from __future__ import annotations

import asyncio
import time

from localspec.serving import bulk

PIECE_S = 0.05  # CPU seconds a piece spends


class Clock:
    """monotonic, thread_time and sleep for bulk.py: a piece spends PIECE_S of both, a sleep of wall."""

    def __init__(self) -> None:
        self.now = self.cpu = 0.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def thread_time(self) -> float:
        return self.cpu

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.now += s

    def piece(self) -> None:
        self.now += PIECE_S
        self.cpu += PIECE_S


def test_within_the_burst_pieces_never_wait_and_past_it_get_their_share(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(bulk, "time", clock)
    monkeypatch.setattr(bulk, "_turns", bulk._Turns())

    async def pieces(n: int) -> None:
        for _ in range(n):
            await bulk.run(clock.piece)

    burst = int(bulk.BURST_S / PIECE_S)
    asyncio.run(pieces(burst))
    assert clock.slept == [], "one client's burst waited"
    asyncio.run(pieces(100))
    work = (burst + 100) * PIECE_S
    assert work <= bulk.BURST_S + bulk.SHARE * clock.now + PIECE_S  # the flood had its share, no more
    assert clock.now <= (work - bulk.BURST_S) / bulk.SHARE + PIECE_S  # and no less


def test_a_large_body_is_read_in_the_bulk_work_s_turn_and_a_small_one_at_once(client, monkeypatch):
    turns = bulk._Turns()
    turns.credit = -3 * bulk.SHARE  # a flood's pieces overdrew it: it is zero again 3 s from now
    start = time.monotonic()
    monkeypatch.setattr(bulk, "_turns", turns)
    small = {"model": "fake", "messages": [{"role": "user", "content": "hi"}]}
    assert client.post("/v1/messages/count_tokens", json=small).status_code == 200
    assert time.monotonic() - start < 2, "a small body waited for the bulk work's turn"
    large = {"model": "fake", "messages": [{"role": "user", "content": "x" * 100_000}]}
    assert client.post("/v1/messages/count_tokens", json=large).status_code == 200
    assert time.monotonic() - start >= 2.95


def test_large_bodies_are_read_one_at_a_time_each_in_its_turn(monkeypatch):
    """Three bodies waiting for the turn are read one after the other, each once the last one's
    reading is paid for: each waiting for the credit alone, all three were read when it came."""
    monkeypatch.setattr(bulk, "_turns", bulk._Turns())
    bulk._turns.credit = 0.0
    read_at: list[float] = []

    async def read() -> None:
        async with bulk.turn(5.0):
            read_at.append(time.monotonic())
            bulk.spend(0.1)  # what reading it cost the event loop: 0.5 s of the share

    async def three() -> None:
        await asyncio.gather(read(), read(), read())

    start = time.monotonic()
    asyncio.run(three())
    gaps = [b - a for a, b in zip([start, *read_at], read_at)]
    assert gaps[0] < 0.2 and min(gaps[1:]) >= 0.1 / bulk.SHARE - 0.05, gaps
