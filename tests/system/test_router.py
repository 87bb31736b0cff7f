"""Router mode with real processes: `localspec serve --models-dir` over a folder holding the default
pair, SmolLM2 alone in a folder, gemma as a lone file and a broken GGUF (symlinks and a truncated
copy). One router per module (--models-max 1), and a second for two models at once."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import httpx
import psutil
import pytest

from localspec.config.settings import Settings
from localspec.serving import APIError, Message, Request
from localspec.serving.remote import Child
from localspec.serving.totals import Counting
from tests.helpers import Server, localspec

THREADS = ("--n-threads", "1")  # cores shared with other work: llama.cpp's spinning threads slow down
ARGS = (*THREADS, "--max-tokens", "16", "--temperature", "0")
SMOL, GEMMA, PAIR, BROKEN = "smol", "gemma-3-270m-q4_k_m", "default", "broken"
HI = [{"role": "user", "content": "Name three colours."}]
LONG = 300  # s: a load on a busy machine
pytestmark = pytest.mark.slow  # runs the stand-in pair, three times (~3 min on 2 shared cores)


@pytest.fixture(scope="module")
def folder(tmp_path_factory, standin_pair, smollm2_path, gemma_path) -> Path:
    root = tmp_path_factory.mktemp("models")
    (root / PAIR).symlink_to(standin_pair.parent)
    (root / SMOL).mkdir()
    (root / SMOL / smollm2_path.name).symlink_to(smollm2_path)
    (root / gemma_path.name).symlink_to(gemma_path)
    (root / f"{BROKEN}.gguf").write_bytes(gemma_path.read_bytes()[: 1 << 16])  # its header cut short
    return root


@pytest.fixture(scope="module")
def router(folder):
    srv = Server(folder, *ARGS, "--models-max", "1")
    yield srv
    srv.stop()


def models(srv: Server) -> dict[str, dict]:
    return {m["id"]: m for m in httpx.get(srv.url + "/models", timeout=10).json()["data"]}


def state(srv: Server, name: str) -> str:
    return models(srv)[name]["status"]["value"]


def ask(srv: Server, name: str, **extra) -> httpx.Response:
    """A chat for the pair and SmolLM2; a completion for gemma (the embedded one has no template)."""
    if name == GEMMA:
        body = {"model": name, "prompt": "The three primary colours are", **extra}
        return httpx.post(srv.url + "/v1/completions", json=body, timeout=LONG)
    return httpx.post(
        srv.url + "/v1/chat/completions", json={"model": name, "messages": HI, **extra}, timeout=LONG
    )


def text(r: httpx.Response) -> str:
    assert r.status_code == 200, r.text
    c = r.json()["choices"][0]
    return c["message"]["content"] if "message" in c else c["text"]


def rss(srv: Server) -> int:
    """The router's resident memory and its models' processes'."""
    proc = psutil.Process(srv.proc.pid)
    return sum(p.memory_info().rss for p in [proc, *proc.children(recursive=True)])


def children(srv: Server) -> list[int]:
    """The models' processes (not theirs: a model's process has its template renderer)."""
    return [p.pid for p in psutil.Process(srv.proc.pid).children()]


def wait_for(cond, timeout: float = 30) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_nothing_loads_at_start_and_the_broken_file_is_an_error_with_its_reason(router):
    # every model's header is read at start: the broken one is an error at once
    wait_for(lambda: all(m["localspec"]["memory"] or m["status"]["error"] for m in models(router).values()))
    ms = models(router)
    assert {n: m["status"]["value"] for n, m in ms.items()} == {
        BROKEN: "error",
        PAIR: "unloaded",
        GEMMA: "unloaded",
        SMOL: "unloaded",
    }
    assert "broken.gguf is truncated" in ms[BROKEN]["status"]["error"] and ms[BROKEN]["status"]["failed"]
    assert not children(router)
    assert ms[PAIR]["localspec"]["draft"] == "draft-q8_0.gguf" and ms[SMOL]["localspec"]["draft"] is None
    assert ms[PAIR]["localspec"]["memory"]["cpu_bytes"] > 900e6 and ms[SMOL]["meta"]["n_vocab"] == 49152
    assert ms[GEMMA]["architecture"] == {"input_modalities": ["text"], "output_modalities": ["text"]}
    r = ask(router, BROKEN)
    assert r.status_code == 500 and "broken failed to load" in r.json()["error"]["message"]
    assert "truncated" in r.json()["error"]["message"]


def test_each_model_loads_on_its_first_request_and_the_previous_one_leaves(router):
    """--models-max 1: each first request loads its model, unloading the one before; the memory of
    the router and its models' processes drops by most of the pair's files when the pair leaves."""
    assert text(ask(router, PAIR))
    pair = models(router)[PAIR]
    assert pair["status"]["value"] == "loaded" and pair["status"]["load_s"] > 0
    with_pair, pair_pid = rss(router), pair["status"]["pid"]
    assert children(router) == [pair_pid]
    assert text(ask(router, SMOL))
    ms = models(router)
    assert ms[PAIR]["status"]["value"] == "unloaded" and ms[SMOL]["status"]["value"] == "loaded"
    assert not psutil.pid_exists(pair_pid) or psutil.Process(pair_pid).status() == psutil.STATUS_ZOMBIE
    files = sum(f.stat().st_size for f in Path(ms[PAIR]["localspec"]["path"]).glob("*.gguf"))
    dropped = with_pair - rss(router)
    print(f"process tree RSS: {with_pair / 1e6:.0f} MB with the pair, {dropped / 1e6:.0f} MB less once it left and SmolLM2 came in"
          f" (its files: {files / 1e6:.0f} MB)")  # fmt: skip
    assert dropped > 0.6 * files, (dropped, files)  # SmolLM2 (98 MB) came in, the pair (908 MB) left
    assert text(ask(router, GEMMA))
    load_s = {n: m["status"]["load_s"] for n, m in models(router).items() if m["status"]["load_s"]}
    print(f"load times (s, this machine, shared): {load_s}")
    assert set(load_s) == {PAIR, SMOL, GEMMA}


def test_list_shows_what_the_running_server_has_loaded(router):
    assert text(ask(router, SMOL))
    out = localspec("list")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.split(f"server {router.url} (pid {router.proc.pid}):\n")[1].splitlines()
    assert lines[0].split()[:2] == [SMOL, "loaded"] and "loaded in" in lines[0]
    assert any(line.split()[:2] == [BROKEN, "error:"] for line in lines)


def test_an_unknown_name_is_a_404_that_names_it_and_lists_the_models(router):
    r = ask(router, "gpt-4o")
    assert r.status_code == 404
    e = r.json()["error"]
    assert e["code"] == "model_not_found" and "'gpt-4o'" in e["message"]
    assert all(repr(n) in e["message"] for n in (PAIR, SMOL, GEMMA, BROKEN))


def test_the_unload_api_frees_the_memory(router):
    assert text(ask(router, SMOL))
    before, pid = rss(router), models(router)[SMOL]["status"]["pid"]
    r = httpx.post(router.url + "/models/unload", json={"model": SMOL}, timeout=60)
    assert r.status_code == 200 and r.json()["model"]["status"]["value"] == "unloaded"
    assert pid not in children(router) and before - rss(router) > 98e6 * 0.6
    r = httpx.post(router.url + "/models/unload", json={"model": SMOL}, timeout=60)
    assert r.status_code == 400 and "smol is not loaded" in r.json()["error"]["message"]
    r = httpx.post(router.url + "/models/load", json={"model": SMOL}, timeout=LONG)
    assert r.status_code == 200 and r.json()["model"]["status"]["value"] == "loaded"


def test_keep_alive_0_unloads_the_model_once_it_has_answered(router):
    assert text(ask(router, SMOL, keep_alive="5m"))
    pid = models(router)[SMOL]["status"]["pid"]
    assert text(ask(router, SMOL, keep_alive=0))  # Ollama's "unload after this request"
    wait_for(lambda: state(router, SMOL) == "unloaded")
    assert pid not in children(router)


def test_ollamas_api_sees_the_same_models_and_its_keep_alive_unloads(router):
    tags = {m["name"] for m in httpx.get(router.url + "/api/tags", timeout=10).json()["models"]}
    assert tags == {f"{n}:latest" for n in (PAIR, SMOL, GEMMA, BROKEN)}
    body = {"model": f"{SMOL}:latest", "prompt": "Hi", "stream": False, "options": {"num_predict": 4}}
    r = httpx.post(router.url + "/api/generate", json=body | {"keep_alive": "5m"}, timeout=LONG)
    assert r.status_code == 200 and r.json()["done"], r.text
    (ps,) = httpx.get(router.url + "/api/ps", timeout=10).json()["models"]  # --models-max 1
    assert ps["name"] == f"{SMOL}:latest" and not ps["expires_at"].startswith("9999")  # in 5 minutes
    r = httpx.post(router.url + "/api/generate", json=body | {"keep_alive": 0}, timeout=LONG)
    assert r.status_code == 200
    wait_for(lambda: state(router, SMOL) == "unloaded")
    assert httpx.get(router.url + "/api/ps", timeout=10).json()["models"] == []


def test_a_crashed_model_is_an_error_and_the_router_goes_on(router):
    assert text(ask(router, SMOL))
    pid = models(router)[SMOL]["status"]["pid"]
    psutil.Process(pid).kill()
    wait_for(lambda: state(router, SMOL) == "error")
    assert "was killed by SIGKILL" in models(router)[SMOL]["status"]["error"]
    r = ask(router, SMOL)  # a killed model is loaded again by a request after a back-off
    err = r.json()["error"]
    assert r.status_code == 503 and err["code"] == "model_restarting" and "SIGKILL" in err["message"]
    wait = int(r.headers["retry-after"])
    assert wait >= 1
    assert text(ask(router, GEMMA))  # the router is fine, and loads the others
    time.sleep(wait)
    assert text(ask(router, SMOL))  # the next request after the back-off loaded it again


def test_metrics_are_per_model(router):
    assert text(ask(router, SMOL))
    smol, gemma = router.metrics(model=SMOL), router.metrics(model=GEMMA)
    assert (
        smol["vllm:generation_tokens_total"] > 0
        and smol["vllm:request_success_total{finished_reason=stop}"]
        + smol["vllm:request_success_total{finished_reason=length}"]
        >= 3
    )
    assert router.metrics(model=BROKEN)["vllm:generation_tokens_total"] == 0
    assert gemma["vllm:generation_tokens_total"] > 0


def test_a_pair_served_by_the_router_answers_as_serve_pair_does(router, standin_pair):
    """Greedy, the same request: the router's child and `serve --pair` run the same LocalModel on
    the same settings, so the text is the same (one at a time: never two copies of the pair)."""
    routed = text(ask(router, PAIR, max_tokens=24))
    httpx.post(router.url + "/models/unload", json={"model": PAIR}, timeout=60)
    single = Server(standin_pair, *ARGS)
    try:
        r = httpx.post(
            single.url + "/v1/chat/completions", json={"messages": HI, "max_tokens": 24}, timeout=LONG
        )
        assert text(r) == routed
    finally:
        single.stop()


def test_a_models_process_answers_the_facades_calls_over_its_pipe(smollm2_path):
    """remote.Child on a real process: an awaited call (render), the quick calls, a call the
    process does not know (an error, not a wait), and an unload that ends the process."""

    async def go() -> list[str]:
        gone: list[str] = []
        settings = Settings(target=smollm2_path, n_ctx=512, parallel=1, n_threads=1)
        child = Child(SMOL, settings, Counting(), lambda c, why: gone.append(why), lambda line: None)
        await child.start()
        try:
            prompt = await child.acall("render", Request(messages=(Message("user", "Hi there"),)))
            assert "Hi there" in prompt.text and child.call("detokenize", prompt.ids) == prompt.text
            with pytest.raises(APIError) as e:
                await child.acall("everything")
            assert "no call 'everything'" in e.value.message
        finally:
            await child.stop()
        await asyncio.sleep(0.1)  # the exit is told on the event loop
        assert child.proc is not None and child.proc.poll() is not None
        return gone

    assert asyncio.run(go()) == [f"{SMOL} was unloaded"]


@pytest.fixture(scope="module")
def router2(router, folder):
    """--models-max 2, started once the first router's models have left (never two copies)."""
    for name, m in models(router).items():
        if m["status"]["value"] == "loaded":
            httpx.post(router.url + "/models/unload", json={"model": name}, timeout=60)
    srv = Server(folder, *ARGS, "--models-max", "2")
    yield srv
    srv.stop()


def test_two_models_asked_for_at_once_are_both_answered(router2):
    out: dict[str, str] = {}

    def go(name: str) -> None:
        out[name] = text(ask(router2, name))

    threads = [threading.Thread(target=go, args=(n,)) for n in (PAIR, SMOL)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(LONG)
    assert set(out) == {PAIR, SMOL} and all(out.values())
    assert {state(router2, n) for n in (PAIR, SMOL)} == {"loaded"}


def test_switching_between_two_loaded_models_loads_nothing(router2):
    """The stand-in pair and SmolLM2, both loaded: requests alternating between them and requests
    staying on one take the same time, and no process is started (the load times are printed)."""
    for name in (PAIR, SMOL):
        assert text(ask(router2, name, max_tokens=4))  # both loaded (a load here if the test runs alone)
    ms = models(router2)
    pids = {n: ms[n]["status"]["pid"] for n in (PAIR, SMOL)}
    loads = {n: round(ms[n]["status"]["load_s"], 2) for n in (PAIR, SMOL)}
    took: dict[str, list[float]] = {"switching": [], "staying": []}
    for _ in range(3):  # interleaved: the machine's load falls on both alike
        for how, order in (("switching", (PAIR, SMOL, PAIR, SMOL)), ("staying", (PAIR, PAIR, SMOL, SMOL))):
            started = time.monotonic()
            for name in order:
                assert text(ask(router2, name, max_tokens=4))
            took[how].append(time.monotonic() - started)
    ms = models(router2)
    assert {n: ms[n]["status"]["pid"] for n in (PAIR, SMOL)} == pids  # no process was started
    assert {n: round(ms[n]["status"]["load_s"], 2) for n in (PAIR, SMOL)} == loads
    med = {how: sorted(ts)[1] for how, ts in took.items()}
    assert med["switching"] < med["staying"] + min(loads.values())  # less than one load more, for 3 switches
    print(
        f"4 requests: switching {med['switching']:.2f} s, staying {med['staying']:.2f} s (medians of 3);"
        f" the loads took {loads} s"
    )
