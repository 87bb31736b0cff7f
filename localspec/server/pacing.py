"""Refusals are paced, as nginx's limit_req paces requests: a client refused at once sends its next
request at once, and three such clients in a loop sent hundreds a second (a schema nested 400 deep, a
1 x 16M PNG: each refused in about a millisecond) and took a decoding neighbour to 0.33-0.45 of its
speed on 2 cores (issue 60). So 4xx answers spend a token bucket (--refusal-rate a second, a burst of
BURST_S seconds' worth); past it, each waits for its turn, MAX_WAIT_S at most, before it is sent.
The wait is a sleep on the event loop: it costs no CPU, and the request's own work and body are
already let go (the answer is held, a few hundred bytes). Other answers, /health's included, never
wait, and neither does a refusal while the bucket holds tokens."""

from __future__ import annotations

import asyncio
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

BURST_S = 2.0  # refusals sent at once: this many seconds' worth of the rate
MAX_WAIT_S = 2.0  # the longest a refusal waits, however many clients are refused at once
HELD_BYTES = 65_536  # an answer longer than this is sent as it comes (4xx bodies are short)


class Pace:
    """GCRA, the token bucket as one time: `due` is when the bucket would be full again."""

    def __init__(self, rate: float) -> None:
        self.interval, self.due = 1.0 / rate, 0.0

    def wait_s(self, now: float) -> float:
        """Spend one token at `now`: how long this refusal waits before it is sent."""
        self.due = max(self.due, now) + self.interval
        wait = self.due - now - BURST_S
        if wait > MAX_WAIT_S:  # the bucket does not run ahead of the longest wait: once the
            self.due, wait = now + BURST_S + MAX_WAIT_S, MAX_WAIT_S  # flood ends, it refills
        return max(0.0, wait)


class RefusalPacing:
    """An ASGI middleware: a 4xx answer is held until the app is done with the request, then sent
    after its wait (`Pace`)."""

    def __init__(self, app: ASGIApp, rate: float) -> None:
        self.app, self.pace = app, Pace(rate)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        held: list[Message] = []
        size = 0

        async def hold(message: Message) -> None:
            nonlocal size
            if message["type"] == "http.response.start" and 400 <= message["status"] < 500:
                held.append(message)
            elif held and message["type"] == "http.response.body" and size < HELD_BYTES:
                held.append(message)
                size += len(message.get("body", b""))
            else:
                while held:  # past HELD_BYTES: what was held goes first, unpaced
                    await send(held.pop(0))
                await send(message)

        await self.app(scope, receive, hold)
        if held:
            if (wait := self.pace.wait_s(time.monotonic())) > 0:
                await asyncio.sleep(wait)
            for message in held:
                await send(message)
