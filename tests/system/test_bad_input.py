"""Every entry point, fed the bad-input corpus (tests/bad_inputs.py), answers with one clear line and
a non-zero exit: no traceback, no "internal error", no segfault, no hang. Cases run in one process
per entry point (tests/corpus_runner.py) under a timeout; almost all fail before a model loads."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import pytest

from localspec.convert.synthetic_mmproj import ProjectorShape, write_mmproj

from ..bad_inputs import (
    BAD_REQUESTS,
    ENTRY_POINTS,
    OPTION_COMMANDS,
    SETTINGS_COMMANDS,
    make_bad_files,
    make_bad_images,
    numeric_option_cases,
    numeric_setting_cases,
)
from ..helpers import png

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "models"
SMOL = str(MODELS / "SmolLM2-135M-Instruct.Q4_1.gguf")
GEMMA = str(MODELS / "gemma-3-270m-q4_k_m.gguf")
MMPROJ = str(MODELS / "mmproj-smollm2-test.gguf")
WITH_PROJECTOR = ["--target", SMOL, "--mmproj", MMPROJ]
BAD_FILES = [
    "missing",
    "empty",
    "random-bytes",
    "wrong-magic",
    "truncated-header",
    "truncated-tensor-data",
    "offset-past-eof",
    "zero-alignment",
    "directory",
    "fifo",
    "symlink-loop",
]
SETTINGS_CASES = [(cmd, *case) for cmd in SETTINGS_COMMANDS for case in numeric_setting_cases(cmd)]
OPTION_CASES = [(cmd, *case) for cmd in OPTION_COMMANDS for case in numeric_option_cases(cmd)]
# (id, argv, stdin, needles): bad prompts, stop strings and a mismatched pair
MISC = [
    ("run/invalid-utf8-argv", ["run", "a\udcffb", "--target", SMOL], None, ("not valid UTF-8",)),
    ("run/invalid-utf8-stdin", ["run", "-", "--target", SMOL], "a\udcffb", ("not valid UTF-8",)),
    ("run/lone-surrogate", ["run", "a\ud800b", "--target", SMOL], None, ("not valid UTF-8",)),
    ("run/empty-stop", ["run", "hi", "--target", SMOL, "--stop", ""], None, ("stop strings must have",)),
    ("run/enormous-stop", ["run", "hi", "--target", SMOL, "--stop", "x" * 100_000], None, ("stop strings",)),
    ("run/too-many-stops", ["run", "hi", "--target", SMOL, *["--stop", "s"] * 17], None, ("at most 16",)),
    (
        "run/prompt-longer-than-context",
        ["run", "word " * 600, "--target", SMOL, "--n-ctx", "256"],
        None,
        ("n_ctx=256",),
    ),
    ("run/empty-prompt", ["run", "", "--target", SMOL], None, ("prompt is empty",)),
    ("run/mismatched-pair", ["run", "hi", "--target", SMOL, "--draft", GEMMA], None, ("cannot be paired",)),
    (
        "bench/mismatched-pair",
        ["bench", "--target", SMOL, "--draft", GEMMA, "-q"],
        None,
        ("cannot be paired",),
    ),
    ("check-pair/mismatched-pair", ["check-pair", SMOL, GEMMA], None, ("incompatible",)),
    ("pair/mismatched-pair", ["pair", SMOL, GEMMA, "--out-dir", "{out}/p"], None, ("cannot be paired",)),
    (
        "bench/nan-temperature",
        ["bench", "--target", SMOL, "--temperature", "nan", "-q"],
        None,
        ("temperature",),
    ),
    ("run/config-nan", ["run", "hi", "--target", SMOL, "--config", "{out}/nan.toml"], None, ("temperature",)),
    (
        "run/config-float-int",
        ["run", "hi", "--target", SMOL, "--config", "{out}/half.toml"],
        None,
        ("max_tokens",),
    ),
    ("run/config-is-directory", ["run", "hi", "--target", SMOL, "--config", "{out}"], None, ("cannot read",)),
    # images and projectors
    ("run/image-without-projector", ["run", "hi", "--target", SMOL, "--image", "{out}/good.png"], None, ("--mmproj",)),
    ("run/image-missing", ["run", "hi", *WITH_PROJECTOR, "--image", "{out}/nothing.png"], None, ("cannot read",)),
    ("run/image-over-bytes", ["run", "hi", *WITH_PROJECTOR, "--image", "{out}/good.png", "--image-max-bytes", "100"],
     None, ("over the limit",)),
    ("run/image-over-pixels", ["run", "hi", *WITH_PROJECTOR, "--image", "{out}/good.png", "--image-max-pixels", "100"],
     None, ("over the limit",)),
    ("run/too-many-images", ["run", "hi", *WITH_PROJECTOR, "--max-images", "1", *["--image", "{out}/good.png"] * 2],
     None, ("at most 1",)),
    ("chat/image-not-an-image", ["chat", *WITH_PROJECTOR, "--image", "{out}/images/not-an-image.png"], "hi\n",
     ("not an image",)),
    ("run/mmproj-is-a-text-model", ["run", "hi", "--target", SMOL, "--mmproj", SMOL], None, ("not a projector",)),
    ("run/mmproj-of-another-model", ["run", "hi", "--target", SMOL, "--mmproj", "{out}/wide-mmproj.gguf"], None,
     ("another model",)),
    ("check-pair/mmproj-of-another-model", ["check-pair", SMOL, SMOL, "--mmproj", "{out}/wide-mmproj.gguf"], None,
     ("wide-mmproj.gguf makes 640-wide embeddings, but the target is 576 wide",)),
    ("check-pair/mmproj-is-a-text-model", ["check-pair", SMOL, SMOL, "--mmproj", GEMMA], None, ("not a projector",)),
    ("pair/mmproj-of-another-model", ["pair", SMOL, SMOL, "--out-dir", "{out}/p-wide", "--mmproj",
                                      "{out}/wide-mmproj.gguf"], None, ("another model",)),
    # a pair folder is untrusted: its pair.toml's mmproj is checked as a projector wherever it points
    ("run/pair-mmproj-missing", ["run", "hi", "--pair", "{out}/pair-missing"], None, ("no such file",)),
    ("run/pair-mmproj-escapes", ["run", "hi", "--pair", "{out}/pair-escapes"], None, ("not a GGUF file",)),
    ("run/pair-mmproj-not-gguf", ["run", "hi", "--pair", "{out}/pair-text"], None, ("not a GGUF file",)),
    ("run/pair-mmproj-not-a-name", ["run", "hi", "--pair", "{out}/pair-number"], None, ("mmproj must be a file",)),
]  # fmt: skip


def run_cases(cases: list[dict], timeout: int = 120) -> dict[str, dict]:
    """Results by case id. A case that hangs or kills the interpreter is recorded as such and the
    cases after it run in a fresh process, so one failure fails one test."""
    results: dict[str, dict] = {}
    env = {k: v for k, v in os.environ.items() if k != "LOCALSPEC_DEBUG"}
    while cases:
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(cases, f)
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "tests.corpus_runner", f.name],
                capture_output=True,
                text=True,
                cwd=ROOT,
                env=env,
                timeout=timeout,
            )
            stdout, failure = proc.stdout, f"crashed: exit {proc.returncode}\n{proc.stderr[-3000:]}"
        except subprocess.TimeoutExpired as e:
            out = e.stdout or ""
            stdout, failure = (
                out.decode() if isinstance(out, bytes) else out,
                f"hung: no answer in {timeout} s",
            )
        finally:
            os.unlink(f.name)
        done = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
        results.update((r["id"], r) for r in done)
        if len(done) < len(cases):
            bad = cases[len(done)]
            results[bad["id"]] = {"id": bad["id"], "failure": failure}
            done.append(bad)
        cases = cases[len(done) :]
    return results


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    d = tmp_path_factory.mktemp("corpus")
    bad = make_bad_files(d / "bad", Path(SMOL))
    out = d / "out"
    out.mkdir()
    (out / "nan.toml").write_text("[sampling]\ntemperature = nan\n")
    (out / "half.toml").write_text("max_tokens = 12.5\n")
    (out / "good.png").write_bytes(png(1))
    images = make_bad_images(out / "images", png(1))
    write_mmproj(out / "wide-mmproj.gguf", shape=ProjectorShape(n_embd_text=640))
    for folder, mmproj in (("missing", '"mmproj-gone.gguf"'), ("escapes", '"../good.png"'),
                           ("text", '"notes.txt"'), ("number", "7")):  # fmt: skip
        (out / f"pair-{folder}").mkdir()
        (out / f"pair-{folder}" / "notes.txt").write_text("not a model\n")
        pair = f'[pair]\ntarget = "{SMOL}"\ndraft = "{SMOL}"\nmmproj = {mmproj}\n'
        (out / f"pair-{folder}" / "pair.toml").write_text(pair)
    groups: dict[str, list[dict]] = {}
    for ep, argv in ENTRY_POINTS.items():
        for name in BAD_FILES:
            groups.setdefault(ep, []).append(
                {
                    "id": f"{ep}/{name}",
                    "argv": argv(str(bad[name].path), SMOL, str(out / ep / name)),
                    "stdin": "hello\n",  # for commands that read a conversation from a pipe (chat)
                }
            )
    for cmd, cid, flags, _ in SETTINGS_CASES:
        groups.setdefault(f"settings/{cmd}", []).append(  # a process per command: under its timeout
            {"id": f"{cmd}/{cid}", "argv": SETTINGS_COMMANDS[cmd](SMOL) + flags}
        )
    for cmd, cid, flags, _ in OPTION_CASES:
        argv = OPTION_COMMANDS[cmd](SMOL, str(out / "options" / cmd / cid)) + flags
        groups.setdefault("options", []).append({"id": f"{cmd}/{cid}", "argv": argv})
    for cid, argv, stdin, _ in MISC:
        argv = [a.replace("{out}", str(out)) for a in argv]
        groups.setdefault("misc", []).append({"id": cid, "argv": argv, "stdin": stdin})
    for name, bad_image in images.items():
        argv = ["run", "hi", *WITH_PROJECTOR, "--image", str(bad_image.path)]
        groups.setdefault("images", []).append({"id": f"run/image-{name}", "argv": argv})
    res = {}
    for cases in groups.values():
        res.update(run_cases(cases))
    res["_bad"] = bad
    res["_images"] = images
    res["_out"] = out
    return res


def assert_clean_failure(r: dict, needles: tuple[str, ...]) -> None:
    assert "failure" not in r, f"{r['id']} {r.get('failure')}"
    text = r["out"] + r["err"]
    assert r["rc"] != 0, f"{r['id']}: exit 0\n{text}"
    assert "Traceback" not in text and "internal error" not in text, text
    errors = [ln for ln in r["err"].splitlines() if ln.lower().startswith("error:")]
    assert len(errors) <= 1, text
    line = errors[0] if errors else text
    assert any(n.lower() in line.lower() for n in needles), f"{r['id']}: none of {needles} in:\n{text}"


@pytest.mark.parametrize("entry_point", sorted(ENTRY_POINTS))
@pytest.mark.parametrize("name", BAD_FILES)
def test_bad_model_file(results, entry_point, name):
    r = results[f"{entry_point}/{name}"]
    assert_clean_failure(r, results["_bad"][name].needles)
    left = [p for p in (results["_out"] / entry_point / name).rglob("*") if p.is_file()]
    assert not left, f"outputs left behind: {left}"


@pytest.mark.parametrize("command, case_id, needles", [(c, i, n) for c, i, _, n in SETTINGS_CASES])
def test_bad_numeric_setting(results, command, case_id, needles):
    assert_clean_failure(results[f"{command}/{case_id}"], needles)


@pytest.mark.parametrize("command, case_id, needles", [(c, i, n) for c, i, _, n in OPTION_CASES])
def test_bad_numeric_option(results, command, case_id, needles):
    assert_clean_failure(results[f"{command}/{case_id}"], needles)
    assert not (results["_out"] / "options" / command / case_id).exists()  # refused before any work


IMAGES = ["empty", "not-an-image", "gguf-as-image", "tiff", "truncated", "header-only", "decompression-bomb",
          "absurd-dimensions", "too-many-pixels", "zero-width"]  # fmt: skip


@pytest.mark.parametrize("name", IMAGES)
def test_bad_image(results, name):
    assert_clean_failure(results[f"run/image-{name}"], results["_images"][name].needles)


@pytest.mark.parametrize("case_id, needles", [(c[0], c[3]) for c in MISC])
def test_bad_prompt_stop_pair_config(results, case_id, needles):
    assert_clean_failure(results[case_id], needles)


def test_unreadable_file(tmp_path, smollm2_path):
    # tests run as root, which reads a chmod-000 file anyway: drop the capabilities that let it
    prefix = []
    if os.geteuid() == 0:
        if not shutil.which("setpriv"):
            pytest.skip("running as root without setpriv: a chmod-000 file stays readable")
        caps = "-dac_override,-dac_read_search"
        prefix = ["setpriv", f"--inh-caps={caps}", f"--bounding-set={caps}"]
    f = tmp_path / "locked.gguf"
    shutil.copyfile(smollm2_path, f)
    f.chmod(0)
    env = {k: v for k, v in os.environ.items() if k != "LOCALSPEC_DEBUG"}
    for argv in (
        ["check-pair", str(smollm2_path), str(f)],
        ["run", "hi", "--target", str(f)],
        ["doctor", "--target", str(f)],
    ):
        proc = subprocess.run(
            [*prefix, sys.executable, "-m", "localspec", *argv],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=env,
            timeout=120,
        )
        assert_clean_failure(
            {"id": argv[0], "rc": proc.returncode, "out": proc.stdout, "err": proc.stderr},
            ("permission denied", "not readable"),
        )


def test_doctor_reports_a_mismatched_pair():
    # doctor diagnoses rather than runs: it shows the plan and says that `run` would refuse the pair
    from ..helpers import localspec

    proc = localspec("doctor", "--target", SMOL, "--draft", GEMMA, "--no-load")
    assert proc.returncode == 0 and "REFUSED by run: target and draft cannot be paired" in proc.stdout, (
        proc.stderr
    )


# -- requests to a real server (#48): one 400 each, in the API's shape, and no traceback ---------------
@pytest.fixture(scope="module")
def api(smollm2_path):
    from ..helpers import Server

    srv = Server(smollm2_path, "--parallel", "2", "--n-threads", "1", "--no-log")
    yield srv
    srv.stop()


@pytest.mark.parametrize("case", BAD_REQUESTS, ids=lambda c: c.id)
def test_bad_request(api, case):
    r = httpx.post(api.url + case.path, content=case.body.encode(), headers={"content-type": "application/json"},
                   timeout=60)  # fmt: skip
    assert r.status_code == 400, f"{case.id}: {r.status_code} {r.text[:300]}"
    error = r.json()["error"]  # OpenAI's shape (llama-server's routes use it too)
    assert error["type"] == "invalid_request_error" and "\n" not in error["message"]
    assert any(n in error["message"] for n in case.needles), f"{case.id}: {error['message']}"


def test_abuse_tests_garbage_gets_one_4xx_each(api):
    """tools/abuse_test.py's garbage (every dialect's routes, /infill, fill-in-the-middle, raw prompts,
    count_tokens, the model routes, streams), sent once: each is one 4xx in its dialect's shape. The
    tool sends them in a loop beside well-behaved clients; a case that stopped being refused there
    would pass unseen."""
    from tools.abuse_test import GARBAGE, ROUTE_GARBAGE

    model = httpx.get(api.url + "/api/tags", timeout=10).json()["models"][0]["model"].encode()
    cases = [("/v1/completions", ctype, body, extra) for ctype, body, extra in GARBAGE]
    cases += [(path, ctype, body.replace(b"MODEL", model), {}) for path, ctype, body in ROUTE_GARBAGE]
    for path, ctype, body, extra in cases:
        r = httpx.post(api.url + path, content=body, headers={"content-type": ctype, **extra}, timeout=60)
        label = f"{path} {body[:80]!r}: {r.status_code} {r.text[:200]}"
        assert 400 <= r.status_code < 500, label
        error = r.json()["error"]
        assert isinstance(error if path.startswith("/api/") else error["message"], str), label


def test_big_tokenizes_leave_the_server_answering(api):
    """A 7.9 MB body with its pieces froze every request for 18.5 s: tokenizing ran on the event
    loop. Two of the largest texts one may tokenize now run beside it; /health answers throughout."""
    text = "the quick brown fox jumps over the lazy dog " * 23_000  # ~1M characters, the most allowed
    done: list = []

    def tokenize() -> None:
        done.append(httpx.post(api.url + "/tokenize", json={"content": text}, timeout=120))

    clients = [threading.Thread(target=tokenize, daemon=True) for _ in range(2)]
    for t in clients:
        t.start()
    worst = 0.0
    while any(t.is_alive() for t in clients):
        t0 = time.monotonic()
        assert httpx.get(api.url + "/health", timeout=60).status_code == 200
        worst = max(worst, time.monotonic() - t0)
        time.sleep(0.02)
    assert [r.status_code for r in done] == [200, 200] and len(done[0].json()["tokens"]) > 100_000
    assert worst < 1.0, f"/health waited {worst:.2f} s behind a tokenize"


def test_the_server_logged_no_traceback(api):  # after every bad request above
    assert "Traceback" not in api.output(), api.output()[-3000:]
