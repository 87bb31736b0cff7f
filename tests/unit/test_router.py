"""The router's states and rules (serving/router.py, room.py) with in-process stand-ins for the
models' processes: loading on demand, waiting for a load, --models-max and LRU, the memory rule,
errors and crashes, keep_alive and the idle timeout, names. The real processes are in
tests/system/test_router.py."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Awaitable, Callable

import pytest

from localspec.config.settings import Settings
from localspec.errors import LocalspecError
from localspec.serving import APIError, Message, Request
from localspec.serving import router as router_mod
from localspec.serving.catalog import Entry, Facts, scan
from localspec.serving.request import keep_alive
from localspec.serving.room import Held, make_room
from localspec.serving.router import Router
from localspec.serving.stream import SHUT_DOWN

from ..fake_engine import FakeModel, answer

ASK = Request(prompt="hi")
MiB = 1 << 20


class FakeChild:
    """A model's process, in this process: loads when `gate` opens (or fails with `fail`)."""

    log: list[str] = []

    def __init__(self, name: str, settings: Settings, totals: Any, on_exit: Callable, say: Callable) -> None:
        self.name, self.totals, self.on_exit = name, totals, on_exit
        self.model = FakeModel(name)
        self.card, self.devices, self.load_s, self.busy = None, [("CPU", "cpu", 0, 0)], 0.0, (0, 0)
        self.stopping, self.alive, self.pid = False, False, 4242
        self.gate: asyncio.Event | None = GATES.get(name)
        self.hold: asyncio.Event | None = None  # set: requests stream until it is set

    async def start(self) -> None:
        self.log.append(f"start {self.name}")
        if self.gate is not None:
            await self.gate.wait()
        if self.name in FAIL:
            raise LocalspecError(FAIL[self.name])
        self.alive, self.card = True, self.model.card
        CHILDREN[self.name] = self

    async def stop(self) -> None:
        self.stopping = True
        await asyncio.sleep(0)
        self._gone("unloaded")

    def kill(self) -> None:
        self._gone("killed")

    def crash(self) -> None:
        self._gone(f"the process serving {self.name} was killed by SIGSEGV")

    def _gone(self, reason: str) -> None:
        if self.alive or self.stopping:
            self.alive = False
            self.log.append(f"exit {self.name}")
            asyncio.get_running_loop().call_soon(self.on_exit, self, reason)

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.model, method)(*args, **kwargs)

    async def acall(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return await getattr(self.model, method)(*args, **kwargs)

    async def submit(self, req: Request, on_end: Callable[[], None]) -> Any:
        try:
            inner = await self.model.submit(req)
        except APIError:
            on_end()  # as remote.Child's: a refusal ends the stream, then raises
            raise
        return Streamed(inner, on_end, self.hold)


class Streamed:
    def __init__(self, inner: Any, on_end: Callable[[], None], hold: asyncio.Event | None) -> None:
        self.inner, self.on_end, self.hold = inner, on_end, hold
        self.cancelled = asyncio.Event()

    def __aiter__(self) -> Any:
        return self._events()

    async def _events(self) -> Any:
        try:
            if self.hold is not None:
                waits = [asyncio.ensure_future(e.wait()) for e in (self.hold, self.cancelled)]
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                for w in waits:
                    w.cancel()
            if self.cancelled.is_set():  # as the process answers a cancel at shutdown
                raise APIError(503, SHUT_DOWN)
            async for e in self.inner:
                yield e
        finally:
            self.on_end()

    async def finished(self, is_disconnected: Callable[[], Awaitable[bool]]) -> list:
        return [e async for e in self]

    def cancel(self) -> None:
        self.cancelled.set()


GATES: dict[str, asyncio.Event] = {}
FAIL: dict[str, str] = {}
CHILDREN: dict[str, FakeChild] = {}


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    GATES.clear(), FAIL.clear(), CHILDREN.clear(), FakeChild.log.clear()
    monkeypatch.setattr(router_mod, "REAP_EVERY_S", 0.01)


def facts(name: str, cpu: int = 100, files: int = 50) -> Facts:
    return Facts(Settings(), FakeModel(name).card, cpu, files, cpu)


def make_router(names=("a", "b", "c"), *, broken=(), sizes=None, available=10**12, **settings: Any) -> Router:
    sizes = sizes or {}

    def measure(entry: Entry) -> Facts:
        if entry.name in broken:
            raise LocalspecError(f"{entry.name}.gguf is truncated: the GGUF header ends early")
        return facts(entry.name, *sizes.get(entry.name, (100, 50)))

    entries = [Entry(n, Path(f"/models/{n}.gguf"), "gguf") for n in names]
    return Router(entries, Settings(**settings), measure, spawn=FakeChild, available=lambda: available)


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(test(), 10))


async def ask(r: Router, name: str, req: Request = ASK) -> str:
    stream = await r.get(name).submit(req)
    done = await stream.finished(_never)
    return done[-1].message.content


async def _never() -> bool:
    return False


def states(r: Router) -> dict[str, str]:
    return {s.name: s.state for s in r.status()}


async def settle() -> None:
    """Let the loads and unloads under way take their next steps (a model is measured on a thread)."""
    await asyncio.sleep(0.05)


# -- loading on demand -------------------------------------------------------------------------------
def test_nothing_loads_until_asked_then_the_model_answers():
    async def go():
        r = make_router()
        r.start()
        await asyncio.sleep(0.05)
        assert set(states(r).values()) == {"unloaded"}
        assert await ask(r, "b") == "ok"
        assert states(r) == {"a": "unloaded", "b": "loaded", "c": "unloaded"}
        st = next(s for s in r.status() if s.name == "b")
        assert st.load_s is not None and st.pid == 4242 and st.card.n_vocab == 256
        await r.close()
        assert set(states(r).values()) == {"unloaded"}

    run(go)


def test_a_render_loads_the_model_too_and_leaves_it_idle():
    async def go():
        r = make_router()
        prompt = await r.get("c").render(Request(messages=(Message("user", "hi"),)))
        assert prompt.ids and states(r)["c"] == "loaded" and r.get("c").users == 0

    run(go)


def test_requests_for_a_loading_model_wait_for_it_and_others_go_on():
    async def go():
        r = make_router()
        await ask(r, "a")
        GATES["b"] = asyncio.Event()
        waiting = [asyncio.ensure_future(ask(r, "b")) for _ in range(3)]
        await settle()
        assert states(r)["b"] == "loading" and not any(w.done() for w in waiting)
        assert await ask(r, "a") == "ok"  # the loaded one answers meanwhile
        GATES["b"].set()
        assert await asyncio.gather(*waiting) == ["ok"] * 3
        assert FakeChild.log.count("start b") == 1  # one load for the three

    run(go)


def test_two_models_asked_at_once_load_together_under_models_max_2():
    async def go():
        r = make_router(models_max=2)
        GATES["a"], GATES["b"] = asyncio.Event(), asyncio.Event()
        both = asyncio.gather(ask(r, "a"), ask(r, "b"))
        await settle()
        assert states(r) == {"a": "loading", "b": "loading", "c": "unloaded"}
        GATES["a"].set(), GATES["b"].set()
        assert await both == ["ok", "ok"]

    run(go)


# -- --models-max and least recently used ------------------------------------------------------------
def test_past_models_max_the_least_recently_used_idle_model_is_unloaded_first():
    async def go():
        r = make_router(models_max=2)
        await ask(r, "a")
        await ask(r, "b")
        await ask(r, "a")  # b is now the least recently used
        await ask(r, "c")
        assert states(r) == {"a": "loaded", "b": "unloaded", "c": "loaded"}
        assert FakeChild.log.index("exit b") < FakeChild.log.index("start c")  # its memory is back first

    run(go)


def test_a_busy_model_is_never_unloaded_to_make_room():
    async def go():
        r = make_router(models_max=1)
        await ask(r, "a")
        CHILDREN["a"].hold = asyncio.Event()
        streaming = asyncio.ensure_future(ask(r, "a"))
        await settle()
        with pytest.raises(APIError) as e:
            await ask(r, "b")
        assert e.value.status == 503 and "a (1 requests)" in e.value.message
        assert e.value.headers["Retry-After"]
        CHILDREN["a"].hold.set()
        assert await streaming == "ok"
        assert await ask(r, "b") == "ok"  # idle now: unloaded for b
        assert states(r)["a"] == "unloaded"

    run(go)


# -- memory ----------------------------------------------------------------------------------------
def test_the_memory_plan_unloads_idle_models_until_the_new_one_fits():
    async def go():
        # 1000 free; a and b map 50 of their 100 (the kernel counts mapped files as available)
        r = make_router(available=1000, sizes={"a": (400, 300), "b": (400, 300), "c": (700, 100)})
        await ask(r, "a")
        await ask(r, "b")  # 1000 - 300 mapped >= 400
        await ask(r, "c")  # 1000 - 600 mapped = 400 < 700: a (LRU) goes, giving back 400 -> 800
        assert states(r) == {"a": "unloaded", "b": "loaded", "c": "loaded"}

    run(go)


def test_a_model_that_cannot_fit_is_a_503_saying_what_would():
    async def go():
        r = make_router(
            available=1000 * MiB,
            sizes={"a": (400 * MiB, 300 * MiB), "b": (5000 * MiB, MiB), "c": (900 * MiB, MiB)},
        )
        r.start()
        await settle()
        await ask(r, "a")
        with pytest.raises(APIError) as e:
            await ask(r, "b")
        assert e.value.status == 503 and e.value.code == "model_does_not_fit"
        assert e.value.message == (
            "cannot load b: it needs 4.88 GiB, 1.07 GiB would be free after unloading every idle model; "
            "would fit: a, c"
        )
        assert states(r)["a"] == "loaded"  # nothing was unloaded for a load that cannot happen
        await r.close()

    run(go)


def test_room_rule_numbers():
    held = [Held("old", 300, 1.0), Held("new", 300, 2.0), Held("busy", 300, 0.5, busy="2 requests")]
    assert make_room("x", 500, 300, held, 0).evict == ("old",)
    assert make_room("x", 100, 300, held, 0).evict == ()
    assert make_room("x", 100, 300, held, 3).evict == ("old",)  # the count: 3 + 1 > 3
    assert make_room("x", 100, None, held, 4).evict == ()  # memory unknown: the count only
    refused = make_room("x", 2000, 300, held, 0, others=[("small", 800), ("big", 5000)])
    assert refused.evict == () and refused.free_after == 900 and refused.fits_instead == ("small",)
    assert "busy: busy (2 requests)" in refused.refused
    assert "none is idle" in make_room("x", 1, None, [held[2]], 1).refused


# -- errors and crashes ----------------------------------------------------------------------------
def test_a_broken_model_is_an_error_with_its_reason_and_the_others_answer():
    async def go():
        r = make_router(broken=("b",))
        r.start()
        await asyncio.sleep(0.05)
        st = {s.name: s for s in r.status()}
        assert st["b"].state == "error" and "truncated" in st["b"].error
        assert all(st[n].state == "unloaded" for n in "ac")
        with pytest.raises(APIError) as e:
            await ask(r, "b")
        assert e.value.status == 500 and "b failed to load: b.gguf is truncated" in e.value.message
        assert await ask(r, "a") == "ok"
        await r.close()

    run(go)


def test_a_failed_load_is_an_error_and_load_retries_it():
    async def go():
        r = make_router()
        FAIL["a"] = "full offload does not fit"
        with pytest.raises(APIError, match="a failed to load: full offload does not fit"):
            await ask(r, "a")
        assert states(r)["a"] == "error"
        del FAIL["a"]
        await r.load("a")
        assert states(r)["a"] == "loaded"

    run(go)


def test_a_crash_while_serving_marks_only_that_model_error():
    async def go():
        r = make_router()
        await ask(r, "a")
        await ask(r, "b")
        CHILDREN["a"].crash()
        await settle()
        st = {s.name: s for s in r.status()}
        assert st["a"].state == "error" and "SIGSEGV" in st["a"].error and st["a"].pid is None
        assert await ask(r, "b") == "ok"
        with pytest.raises(APIError, match="SIGSEGV"):
            await ask(r, "a")

    run(go)


def test_a_killed_model_is_loaded_again_by_a_request_after_a_back_off(monkeypatch):
    monkeypatch.setattr(router_mod, "BACKOFF_S", 0.2)

    async def go():
        r = make_router()
        for deaths, backoff in ((1, 0.2), (2, 0.4)):  # doubled for each death in a row
            await ask(r, "a")
            CHILDREN["a"].crash()
            await settle()
            with pytest.raises(APIError) as e:
                await ask(r, "a")
            assert e.value.status == 503 and "SIGSEGV" in e.value.message
            assert e.value.code == "model_restarting" and "Retry-After" in e.value.headers
            assert r.get("a").deaths == deaths
            await asyncio.sleep(backoff)
        assert await ask(r, "a") == "ok" and states(r)["a"] == "loaded"
        assert FakeChild.log.count("start a") == 3

    run(go)


def test_a_refused_request_releases_its_model_once():
    async def go():
        r = make_router()
        await ask(r, "a")
        CHILDREN["a"].model.refuse(APIError(400, "bad field", param="x"))
        with pytest.raises(APIError, match="bad field"):
            await ask(r, "a")
        assert r.get("a").users == 0  # not -1: the refusal's end and the raise count it out once

    run(go)


def test_a_shutdown_answers_what_is_still_running_with_a_503_within_the_grace():
    from localspec.server.shutdown import _wind_down  # noqa: PLC0415

    async def go():
        r = make_router()
        await ask(r, "a")
        CHILDREN["a"].hold = asyncio.Event()  # the next request runs until cancelled
        busy = asyncio.ensure_future(ask(r, "a"))
        await settle()
        started = asyncio.get_running_loop().time()
        app = type("App", (), {"state": type("State", (), {"models": r})()})()
        await asyncio.wait_for(_wind_down(app, grace=0.2), 2)
        with pytest.raises(APIError) as e:
            await busy
        assert e.value.status == 503 and "shutting down" in e.value.message
        assert asyncio.get_running_loop().time() - started < 1.5
        assert r.get("a").users == 0
        with pytest.raises(APIError, match="shutting down"):  # and nothing loads any more
            await ask(r, "b")

    run(go)


# -- unloading by use ------------------------------------------------------------------------------
def test_keep_alive_0_unloads_once_the_request_is_done():
    async def go():
        r = make_router()
        await ask(r, "a", Request(prompt="hi", keep_alive=0))
        await settle()
        assert states(r)["a"] == "unloaded"
        await ask(r, "a", Request(prompt="hi", keep_alive=-1))
        await asyncio.sleep(0.05)
        assert states(r)["a"] == "loaded"

    run(go)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [(None, None), (0, 0), (30, 30), ("0", 0), ("-1", -1), ("5m", 300), ("1h30m", 5400), ("1.5s", 1.5),
     ("-1m", -60), ("250ms", 0.25)],
)  # fmt: skip
def test_keep_alive_is_seconds_or_a_go_duration(value, seconds):
    assert keep_alive(value) == seconds


@pytest.mark.parametrize(
    "value",
    ["", "5 minutes", "m", "5x", "nan", "1h-5m", True, [5], float("nan"), float("inf"), "inf", "-Infinity"],
)
def test_a_keep_alive_that_is_not_a_duration_is_a_400_naming_it(value):
    with pytest.raises(APIError) as e:
        keep_alive(value)
    assert e.value.status == 400 and e.value.param == "keep_alive" and "5m" in e.value.message


def test_an_idle_model_is_unloaded_after_idle_unload():
    async def go():
        r = make_router(idle_unload=0.05)
        r.start()
        await ask(r, "a")
        assert next(s for s in r.status() if s.name == "a").expires_at is not None
        await asyncio.sleep(0.2)
        assert states(r)["a"] == "unloaded"
        await ask(r, "a", Request(prompt="hi", keep_alive=-1))  # Ollama's "forever"
        await asyncio.sleep(0.2)
        assert states(r)["a"] == "loaded"
        await r.close()

    run(go)


def test_the_unload_api_frees_a_model_and_refuses_one_not_loaded():
    async def go():
        r = make_router()
        await ask(r, "a")
        await r.unload("a")
        assert states(r)["a"] == "unloaded" and "exit a" in FakeChild.log
        with pytest.raises(APIError, match="a is not loaded"):
            await r.unload("a")

    run(go)


def test_unloading_while_loading_kills_the_load_and_a_waiting_request_loads_it_again():
    async def go():
        r = make_router()
        GATES["a"] = asyncio.Event()
        waiting = asyncio.ensure_future(ask(r, "a"))
        await settle()
        await r.unload("a")
        assert FakeChild.log == ["start a", "exit a"]
        GATES["a"].set()
        assert await waiting == "ok"  # it still wants the model: loaded anew
        assert FakeChild.log == ["start a", "exit a", "start a"] and states(r)["a"] == "loaded"

    run(go)


def test_no_load_starts_once_the_server_is_closing():
    async def go():
        r = make_router()
        await r.close()
        with pytest.raises(APIError) as e:
            await ask(r, "a")
        assert e.value.status == 503 and "shutting down" in e.value.message

    run(go)


# -- names -----------------------------------------------------------------------------------------
def test_names():
    r = make_router(default_model="b")
    assert r.get("a").name == "a" and r.get("a:latest").name == "a"
    assert r.get(None).name == "b" and r.get("claude-sonnet-4").name == "b"
    with pytest.raises(APIError) as e:
        r.get("claude-sonnet-4", exact=True)  # managing a model (load, unload) takes its own name only
    assert (
        e.value.status == 404
        and "'claude-sonnet-4'" in e.value.message
        and "'a', 'b', 'c'" in e.value.message
    )
    plain = make_router()
    with pytest.raises(APIError) as e:
        plain.get(None)
    assert e.value.status == 400 and e.value.code == "model_not_specified"
    with pytest.raises(APIError) as e:
        plain.get("claude-sonnet-4")  # several models and no default: no guessing
    assert e.value.status == 404
    assert make_router(names=("only",)).get("claude-x").name == "only"


def test_the_folder_gives_pairs_lone_ggufs_and_skips_the_rest(tmp_path):
    (tmp_path / "pair").mkdir()
    (tmp_path / "pair" / "pair.toml").write_text("[pair]\n")
    (tmp_path / "solo").mkdir()
    (tmp_path / "solo" / "m.gguf").write_bytes(b"")
    (tmp_path / "solo" / "mmproj-m.gguf").write_bytes(b"")
    (tmp_path / "two").mkdir()
    for n in ("x.gguf", "y.gguf"):
        (tmp_path / "two" / n).write_bytes(b"")
    (tmp_path / "lone.gguf").write_bytes(b"")
    (tmp_path / "solo.gguf").write_bytes(b"")  # the name is the folder's already
    (tmp_path / "notes.txt").write_text("")
    (tmp_path / ".hidden.gguf").write_bytes(b"")
    entries, skipped = scan(tmp_path)
    assert [(e.name, e.kind, e.path.name) for e in entries] == [
        ("lone", "gguf", "lone.gguf"), ("pair", "pair", "pair"), ("solo", "gguf", "m.gguf"),
    ]  # fmt: skip
    assert any("two: 2 GGUF files and no pair.toml" in s for s in skipped)
    assert any("solo.gguf: the name 'solo' is taken" in s for s in skipped)
    with pytest.raises(LocalspecError, match="does not exist"):
        scan(tmp_path / "nope")


def test_text_calls_load_the_model_and_a_byte_lookup_on_one_not_loaded_says_so():
    async def go():
        r = make_router()
        with pytest.raises(APIError) as e:
            r.get("a").token_bytes(104)
        assert e.value.status == 409 and "POST /models/load" in e.value.message
        model = r.get("a")
        assert await model.tokenize("hi") == [104, 105]  # loads it, as a request does
        assert model.state == "loaded" and await model.detokenize([104, 105]) == "hi"
        assert await model.pieces([104]) == [b"h"]

    run(go)


def test_totals_are_kept_across_loads():
    async def go():
        r = make_router()
        CHILD_TOTALS = r.get("a").totals
        await ask(r, "a")
        CHILD_TOTALS.count("cancelled")
        await r.unload("a")
        await ask(r, "a")
        assert r.get("a").totals is CHILD_TOTALS and CHILD_TOTALS.snapshot().cancelled == 1

    run(go)


def test_answer_events_pass_through_untouched():
    async def go():
        r = make_router()
        await r.ready("a")
        CHILDREN["a"].model.queue(*answer("two words", pieces=2))
        stream = await r.get("a").submit(ASK)
        texts = [e.content async for e in stream if hasattr(e, "content")]
        assert "".join(texts) == "two words" and len(texts) == 2

    run(go)
