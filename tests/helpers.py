"""What several test modules share (no test module imports another): single-sequence drivers of the
round for the fake backend, statistics, the target-alone reference, and the real processes (the
CLI, a `localspec serve` on loopback)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import httpx
import numpy as np
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from localspec.chat import families, tool_prompt
from localspec.chat import template as chat
from localspec.decode.round import decode_round
from localspec.decode.sampling import SamplingParams
from localspec.decode.state import Evaluator, SeqState, SpecConfig, Step
from localspec.decode.stats import Counters
from localspec.draft_len.auto import AutoK
from localspec.draft_len.controller import Facts, KController, Outcome
from localspec.draft_len.fixed import FixedK
from localspec.engine.scheduler import Schedulable
from localspec.serving.plan import template_message, template_tool

ROOT = Path(__file__).resolve().parent.parent
GREEDY = SamplingParams(temperature=0.0)


# -- driving the round over one sequence (the fake backend's tests) ----------------------------------
class ContextFull(Exception):
    """The context has no room left for another token."""


def prefill(target: Evaluator, draft: Evaluator | None, st: SeqState, budget: int | None = None) -> bool:
    """Bring the target's cache towards `tokens[:-1]`, as the scheduler does: a round with nothing
    running and this sequence filling."""
    return decode_round(target, draft, [], filling=[st], budget=budget)[0]


def speculative_steps(
    target: Evaluator,
    draft: Evaluator | None,
    prompt: Sequence[int],
    sp: SamplingParams,
    cfg: SpecConfig,
    rng: np.random.Generator,
    c: Counters,
    k_ctl: KController,
    max_new: int | None = None,
    seq: int = 0,
    lookup: bool = False,
    matcher=None,  # noqa: ANN001 - a constrain.Matcher: the output's constraint
    **state: Any,
) -> Iterator[Step]:
    """Tokens until EOG, `max_new` tokens or a full context (raises ContextFull) or a constraint that
    cannot go on (raises its ConstraintStuck): rounds over a list of one sequence. Stopping early
    (closing the generator) unaccepts what was not yet emitted. `state`: further SeqState.start
    arguments (penalties, logprobs)."""
    st = SeqState.start(
        seq, prompt, sp, cfg, rng, c, k_ctl,
        max_new=max_new, speculative=draft is not None or lookup, lookup=lookup, matcher=matcher, **state,
    )  # fmt: skip
    prefill(target, draft, st)
    while True:
        if st.finish is None:
            decode_round(target, draft, [st])
        made = st.take()
        for i, step in enumerate(made):
            try:
                yield step
            except GeneratorExit:  # closed mid-round (a stop string): the rest is never emitted
                c.unaccept(made[i + 1 :])
                raise
        if st.finish == "context":
            raise ContextFull
        if st.finish == "error":
            raise st.error
        if st.finish is not None:
            return


class FakeJob(Schedulable):
    """A scheduler job over the fake backend that records what it got."""

    def __init__(self, prompt, *, n=20, k=3, sp=GREEDY, seed=0, stop_token=None, mode="pq", ctl=None):
        self.prompt = list(prompt)
        self.n, self.k, self.sp, self.seed, self.mode = n, k, sp, seed, mode
        self.ctl = ctl
        self.stop_token = stop_token
        self.got: list[int] = []
        self.reason = None
        self.cancel = False
        self.counters = Counters()
        self.rounds_with_output = 0
        self.prefilled_to: list[int] = []  # the prompt tokens in the cache, as the scheduler said

    @property
    def cancelled(self):
        return self.cancel

    def prefilled(self, n):
        self.prefilled_to.append(n)

    def start(self, seq):
        return SeqState.start(
            seq,
            self.prompt,
            self.sp,
            SpecConfig(mode=self.mode),
            np.random.default_rng(self.seed),
            self.counters,
            self.ctl or FixedK(self.k),
            max_new=self.n,
            speculative=self.k > 0 or self.ctl is not None,
        )

    def deliver(self, steps):
        self.rounds_with_output += bool(steps)
        for s in steps:
            self.got.append(s.token)
            if s.token == self.stop_token:
                return False
        return True

    def end(self, state, reason):
        self.reason = reason

    def fail(self, error):
        raise error


def drain(sched, limit=10_000):  # noqa: ANN001, ANN201 - steps until idle; returns how many
    n = 0
    while sched.busy:
        sched.step()
        n += 1
        assert n < limit
    return n


def plain_steps(
    target: Evaluator,
    prompt: Sequence[int],
    sp: SamplingParams,
    rng: np.random.Generator,
    c: Counters,
    max_new: int | None = None,
    mode: str = "pq",
    matcher=None,  # noqa: ANN001
    **state: Any,
) -> Iterator[Step]:
    """Target-only decoding: the baseline (mode: whose noise it samples with)."""
    cfg = SpecConfig(mode=mode)
    yield from speculative_steps(
        target, None, prompt, sp, cfg, rng, c, FixedK(0), max_new, matcher=matcher, **state
    )


def plain(table, prompt, sp=GREEDY, n=20, seed=0) -> list[int]:  # noqa: ANN001
    from tests.fake_backend import FakeContext  # noqa: PLC0415

    c = Counters()
    return [s.token for s in plain_steps(FakeContext(table), prompt, sp, np.random.default_rng(seed), c, n)]


def drafted(k: int, kept: int, t_draft: float, verify_s: float, **more) -> Outcome:  # noqa: ANN003
    """A round of k draft-model tokens, `kept` of them accepted: the Outcome the record phase reports."""
    d = k * t_draft
    return Outcome(k=k, n_drafted=k, n_accepted=kept, n_emitted=kept + 1, draft_s=d, verify_s=verify_s,
                   round_s=d + verify_s, **more)  # fmt: skip


def feed(ctl: AutoK, accept_p: float, t_draft: float, verify, rounds=200, seed=0, stalls=0.0) -> AutoK:  # noqa: ANN001
    """Rounds of a simulated pair: each draft kept with probability accept_p, verify(n) seconds."""
    rng = np.random.default_rng(seed)
    for _ in range(rounds):
        k = ctl.plan(Facts()).k
        acc = 0
        while acc < k and rng.random() < accept_p:
            acc += 1
        v = verify(k + 1) * (1 + (rng.exponential(0.5) if rng.random() < stalls else 0.0))
        ctl.observe(drafted(k, acc, t_draft, v))
    return ctl


def follow_text(ctl: AutoK, hits: Sequence[int], t_draft: float, verify, tokens: int) -> list[int]:  # noqa: ANN001
    """Rounds over a text whose positions the draft guesses or misses (hits[t] = 1: it guesses token
    t), until `tokens` are emitted; verify(n) is an n-token batch's seconds. Returns each round's K."""
    t, ks = 0, []
    while t < tokens:
        k = ctl.plan(Facts()).k
        run = next((i for i in range(k) if not hits[t + i]), k)
        ks.append(k)
        v = verify(k + 1)
        ctl.observe(drafted(k, run, t_draft, v))
        t += run + 1
    return ks


def text_deltas(ts, steps, clock):  # noqa: ANN001, ANN201
    """(text, steps) deltas of a TextStream fed one step at a time, closing the steps once decided."""
    try:
        for step in steps:
            yield from ts.feed([step], clock)
            if ts.done:
                break
    finally:
        steps.close()
    yield from ts.close()


# -- statistics ----------------------------------------------------------------------------------------
def chi2(counts: np.ndarray, probs: np.ndarray) -> float:
    expected = probs * counts.sum()
    keep = expected > 0
    assert counts[~keep].sum() == 0, "a token with zero target probability was emitted"
    return float(((counts[keep] - expected[keep]) ** 2 / expected[keep]).sum())


# chi-square critical values at p = 0.001 (so a correct implementation fails 1 run in 1000)
CHI2_999 = {3: 16.27, 4: 18.47, 5: 20.52, 7: 24.32, 15: 37.70, 24: 51.18, 35: 66.62, 63: 103.4}


# -- real models: greedy equality is tie-aware (llama.cpp is not batch-invariant) ---------------------
MARGIN = 0.25  # logits; measured flips were at ~0.06
# ... on AVX2 builds. A native AVX-512 build (EPYC, Q4_0 stand-in) moved one token of a Chinese
# answer by 0.32 and made 3 of 28 tokens of a 4-request batch near-tie flips, main as well
NOISY_MARGIN = 0.5


def assert_near_argmax(gaps, label: object = "", most: float = NOISY_MARGIN) -> None:  # noqa: ANN001
    """Tie-aware greedy equality: every emitted token within MARGIN of the target's argmax but at
    most one (within `most`), and nearly all exactly it (a bug's wrong token is seldom a tie)."""
    assert (gaps > MARGIN).sum() <= 1 and gaps.max() <= most, (label, gaps.round(3).tolist())
    assert (gaps == 0).mean() >= 0.85, (label, gaps.round(3).tolist())


PROMPTS = {
    "english": "Explain in two sentences why the sky is blue.",
    "chinese": "请用两句话介绍一下长城。",
    "code": "Write a Python function that returns the n-th Fibonacci number.",
    "emoji": "hey!! 😀🎉 can u give me 3 fun party ideas?? 🥳",
}


def teacher_forced_gaps(eng, prompt_ids: list[int], out: list[int]) -> np.ndarray:  # noqa: ANN001
    """For each emitted token: max logit - logit of that token, with the target alone."""
    from localspec.llama import Context  # noqa: PLC0415

    with Context(eng.target, n_ctx=1024, n_batch=512, projector=getattr(eng, "projector", None)) as ctx:
        # the row that predicts out[i] is the one at the token before it
        rows = ctx.eval(prompt_ids + out[:-1], 0, len(out))
        return np.array([row.max() - row[t] for row, t in zip(rows, out)])


# -- processes -----------------------------------------------------------------------------------------
def localspec(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    """The CLI as a user runs it, in a fresh process."""
    env = {k: v for k, v in os.environ.items() if k != "LOCALSPEC_DEBUG"}
    return subprocess.run(
        [sys.executable, "-m", "localspec", *args],
        capture_output=True, text=True, input=stdin, env=env, cwd=ROOT, timeout=300,
    )  # fmt: skip


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


SERVER_N_CTX = 1024


class Server:
    """`localspec serve` on loopback. `model` is one GGUF (drafting for itself, --draft-max 4 unless
    args say otherwise; served alone with `alone`), a pair folder, or a folder of models (router mode)."""

    def __init__(
        self,
        model: Path,
        *args: str,
        env: dict[str, str] | None = None,
        start_timeout: float = 90,
        alone: bool = False,
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.TemporaryFile(mode="w+")
        base = {k: v for k, v in os.environ.items() if k not in ("LOCALSPEC_DEBUG", "LOCALSPEC_API_KEY")}
        model = Path(model)
        models = ["--pair", str(model)] if model.is_dir() or model.suffix == ".toml" else [
            "--target", str(model)] + ([] if alone else ["--draft", str(model), "--draft-max", "4"])  # fmt: skip
        if model.is_dir() and not (model / "pair.toml").exists():  # a folder of models: router mode
            models = ["--models-dir", str(model)]
        if not any(a.startswith(("--prompt-cache", "--no-prompt-cache")) for a in args):
            # each server its own disk prompt cache: no test is warmed by another's long prompt
            self.cache_dir = tempfile.TemporaryDirectory(prefix="prompt-cache-")
            args = (*args, "--prompt-cache-dir", self.cache_dir.name)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "localspec", "serve", *models,
             "--port", str(self.port), "--n-ctx", str(SERVER_N_CTX), *args],
            cwd=ROOT, env=base | (env or {}), stdout=self.log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        deadline = time.monotonic() + start_timeout  # a pair's load and calibration take longer
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"server exited with {self.proc.returncode}:\n{self.output()}")
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        pytest.fail(f"server did not come up:\n{self.output()}")

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read()

    def client(self, api_key: str = "none") -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url + "/v1", api_key=api_key, max_retries=0, timeout=120)

    def health(self, api_key: str | None = None) -> dict:
        """/health; with a key set, its model and load only for a caller with the key."""
        headers = {"authorization": f"Bearer {api_key}"} if api_key else None
        return httpx.get(self.url + "/health", headers=headers, timeout=5).json()

    def metrics(self, headers: dict | None = None, model: str | None = None) -> dict[str, float]:
        """/metrics' samples of one model (metric_samples)."""
        return metric_samples(httpx.get(self.url + "/metrics", headers=headers, timeout=5).text, model)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def responses_of(handles: Sequence[Any], timeout: float = 120) -> list[Any]:
    """Drain engine handles at once, a thread each (as concurrent clients do); their responses."""
    out: list[Any] = [None] * len(handles)

    def drain(i: int) -> None:
        for _ in handles[i]:
            pass
        out[i] = handles[i].response

    threads = [threading.Thread(target=drain, args=(i,)) for i in range(len(handles))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=timeout)
    return out


def logged(log: Path, pred: Callable[[dict], bool], timeout: float = 10.0) -> list[dict]:
    """The acceptance log's records that `pred` accepts, once there is one: the log is written by a
    thread of its own (deferred.py) shortly after the response goes out."""
    deadline = time.monotonic() + timeout
    while True:
        recs = [json.loads(ln) for ln in log.read_text().splitlines()] if log.exists() else []
        mine = [r for r in recs if pred(r)]
        if mine or time.monotonic() > deadline:
            return mine
        time.sleep(0.05)


def png(seed: int, size: int = 64) -> bytes:
    """A PNG of seeded random pixels: different seeds, different images."""
    import io  # noqa: PLC0415

    from PIL import Image  # noqa: PLC0415

    pixels = np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG")
    return out.getvalue()


def sse_frames(text: str) -> list[tuple[str, dict]]:
    """A named-event SSE body (Responses, Messages) as (event name, data) per frame; each frame's
    data must name the same type as its `event:` line."""
    out, name = [], None
    for line in text.splitlines():
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            data = json.loads(line[6:])
            assert data["type"] == name
            out.append((name, data))
    return out


def metric_samples(metrics_text: str, model: str | None = None) -> dict[str, float]:
    """/metrics' samples by name and labels, of one model (its `model` label left out of the keys):
    `model`, or the one model a one-model server has: 'name{reason=length}' -> 2.0."""
    samples = [s for fam in text_string_to_metric_families(metrics_text) for s in fam.samples]
    names = {s.labels.get("model") for s in samples}
    assert model in names if model else len(names) == 1, names
    return {
        s.name + "".join(f"{{{k}={v}}}" for k, v in sorted(s.labels.items()) if k != "model"): s.value
        for s in samples
        if model is None or s.labels.get("model") == model
    }


def image_followup(eng, img, ask: str, first):  # noqa: ANN001, ANN201
    """A second turn about the same image after `first` (its answer): (its messages, its response).
    Asserts the image is in the prompt the two share and that the second prefilled only what
    follows that (plus the one token a full-cache hit re-evaluates)."""
    msgs = [
        {"role": "user", "content": [{"type": "image", "image": img}, {"type": "text", "text": ask}]},
        {"role": "assistant", "content": first.text},
        {"role": "user", "content": "And its colours?"},
    ]
    second = eng.generate(msgs, temperature=0, max_tokens=4, spec=False)
    shared = next(
        (i for i, (x, y) in enumerate(zip(first.prompt_tokens, second.prompt_tokens)) if x != y),
        len(first.prompt_tokens),
    )
    assert shared > max(i for i, t in enumerate(first.prompt_tokens) if t < 0)  # the image is shared
    assert second.stats.n_prefilled <= len(second.prompt_tokens) - shared + 1, second.stats
    return msgs, second


def ask_image(eng, img, ask: str, **kw):  # noqa: ANN001, ANN201
    """One user turn of an image and a question, greedy, 16 tokens."""
    msgs = [{"role": "user", "content": [{"type": "image", "image": img}, {"type": "text", "text": ask}]}]
    return eng.generate(msgs, temperature=0, max_tokens=16, **kw)


def assert_answer_follows_the_image(answer_to: Callable[[int], Any]):  # noqa: ANN201
    """answer_to(seed) answers about image `seed`: two images differ, the same one repeats. Returns
    the first answer."""
    a, b, a_again = (answer_to(s) for s in (1, 2, 1))
    assert a.text != b.text, a.text
    assert a_again.tokens == a.tokens
    return a


def need_agent(agent: str) -> None:
    """Skip where a coding agent (tools/agents/clients.py) is not installed; in CI, fail: `make test`
    installs them all (npm-clients, aider)."""
    from tools.agents.clients import installed  # noqa: PLC0415

    if not installed(agent):
        if os.environ.get("CI"):
            pytest.fail(f"{agent} is not installed: `make npm-clients aider` installs it")
        pytest.skip(f"{agent} is not installed (make npm-clients aider)")


def model_reads(req: Any, template: str) -> str:
    """The prompt text a parsed internal request (any dialect's) renders to under a chat template,
    tools and all: what the agents' prompt tests compare with llama-server's render."""
    tools = [template_tool(t) for t in req.tools]
    msgs = [template_message(m) for m in req.messages]
    msgs, extra = tool_prompt.prepare(template, msgs, tools, families.detect(template))
    return chat.render(template, msgs, **extra)
