"""The grid of tasks x agents on one server (issue 57's table): each agent given each task in a fresh
HOME and work folder, checked from outside, with what the server did for it.

    python -m tools.agents --pair models/default --agents codex,claude --tasks create,fix,command
    python -m tools.agents --url http://127.0.0.1:8080 --log LOG ...   (a server already running)
    python -m tools.agents --peer ...   (llama-server --jinja on the pair's target GGUF: the comparison)

One JSON line per run goes to --out; the table is printed at the end."""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import httpx

from tools.agents import capture
from tools.agents.clients import ROOT, Endpoint, installed, run
from tools.agents.record import PeerWatch, Watch
from tools.agents.tasks import TASKS

PEER = ROOT / "third_party" / "llama.cpp-build" / "bin" / "llama-server"


def start(argv: list[str], url: str, log: Path, timeout: float = 900) -> subprocess.Popen:
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=log.open("w"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"the server exited with {proc.returncode}: see {log}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    proc.kill()
    sys.exit(f"the server did not come up in {timeout:.0f} s: see {log}")


def target_gguf(pair: Path) -> Path:
    import tomllib  # noqa: PLC0415

    folder = pair if pair.is_dir() else pair.parent
    return folder / tomllib.loads((folder / "pair.toml").read_text())["pair"]["target"]


def folder(agent: str) -> Path:
    """The run's HOME and work folder: the same path each run, emptied (a failed run's is kept, renamed
    aside). Claude Code writes its HOME's path into its system prompt ~800 tokens in: a new path each
    run would leave the server's cached prefix (in memory, on disk) at those 800 tokens."""
    root = Path(tempfile.gettempdir()) / f"agent-{agent}"  # one for every task: a prefix for all
    if root.exists():
        shutil.rmtree(root)
    root.mkdir()
    return root


def one(agent: str, task_name: str, ep: Endpoint, watch_of: Callable[[], Watch], timeout: float) -> dict:
    task = TASKS[task_name]
    root = folder(agent)
    home, work = root / "home", root / "work"
    work.mkdir(parents=True)
    secret = task.setup(work)
    watch = watch_of()
    out = run(agent, ep, home, work, task.prompt, files=task.files, timeout=timeout)
    rec = watch.record()
    why = "timed out" if out.returncode is None else task.check(work, out.stdout, secret)
    row = {
        "agent": agent, "task": task_name, "passed": why is None, "why": why, "rc": out.returncode,
        "seconds": round(out.seconds, 1), "record": rec.__dict__ | {"reused": rec.reused},
        "stdout_tail": out.stdout[-1500:], "stderr_tail": out.stderr[-3000:], "folder": str(root),
    }  # fmt: skip
    print(f"{agent:9s} {task_name:8s} {'PASS' if why is None else 'FAIL: ' + why} in {out.seconds:.0f} s; "
          f"{rec.brief()}", flush=True)  # fmt: skip
    return row


def table(rows: list[dict]) -> str:
    head = "| agent | task | result | time | requests | prompt tokens evaluated / reused | drafts accepted |"
    lines = [head, "|---|---|---|---|---|---|---|"]
    for r in rows:
        rec = r["record"]
        acc = f"{rec['accepted']}/{rec['drafted']}" if rec["drafted"] else "-"
        result = "passed" if r["passed"] else f"failed: {r['why']}"
        lines.append(f"| {r['agent']} | {r['task']} | {result} | {r['seconds']:.0f} s | {rec['requests']} "
                     f"| {sum(rec['evaluated'])} / {rec['reused']} | {acc} |")  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pair", type=Path, default=ROOT / "models" / "default")
    ap.add_argument("--agents", default="codex,claude,opencode,aider")
    ap.add_argument("--tasks", default="create,fix,command")
    ap.add_argument("--n-ctx", type=int, default=32768)
    ap.add_argument("--port", type=int, default=8181)
    ap.add_argument("--url", help="a server already running (with --log naming its acceptance log)")
    ap.add_argument("--log", type=Path, help="the acceptance log (default: a new one beside --out)")
    ap.add_argument("--peer", action="store_true", help="llama-server --jinja on the target GGUF instead")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per task")
    ap.add_argument("--out", type=Path, default=Path("agents-grid.jsonl"))
    ap.add_argument("--serve-arg", action="append", default=[], help="one more `localspec serve` flag")
    ap.add_argument("--peer-arg", action="append", default=[], help="one more llama-server flag")
    ap.add_argument("--prompt-cache", type=Path, help="the server's --prompt-cache-dir (default: a new one)")
    ap.add_argument("--capture", type=Path, help="save every request body the agents send here, in order")
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a time limit still stops the server
    log = a.log or a.out.with_suffix(".acclog.jsonl")
    url, proc = a.url or f"http://127.0.0.1:{a.port}", None
    if a.url is None:
        cache = a.prompt_cache or Path(tempfile.mkdtemp(prefix="agents-prompt-cache-"))
        if a.peer:
            argv = [str(PEER), "-m", str(target_gguf(a.pair)), "--jinja", "--port", str(a.port), "-c",
                    str(a.n_ctx), "-t", str(a.threads), "--metrics", "-np", "1", *a.peer_arg]  # fmt: skip
        else:
            argv = [sys.executable, "-m", "localspec", "serve", "--pair", str(a.pair), "--port", str(a.port),
                    "--n-ctx", str(a.n_ctx), "--parallel", "1", "--n-threads", str(a.threads), "--log", str(log),
                    "--prompt-cache-dir", str(cache), *a.serve_arg]  # fmt: skip
        proc = start(argv, url, a.out.with_suffix(".server.log"))
    if a.peer:  # llama-server writes no acceptance log: its own log says what it did
        log = a.log or a.out.with_suffix(".server.log")
    model = "peer" if a.peer else httpx.get(url + "/health", timeout=5).json().get("model", "local")
    ep = Endpoint(capture.start(url, a.capture) if a.capture else url, model, a.n_ctx)
    rows = []
    try:
        for agent in a.agents.split(","):
            if not installed(agent):
                print(f"{agent}: not installed (make npm-clients aider)")
                continue
            for task in a.tasks.split(","):
                row = one(agent, task, ep, lambda: (PeerWatch if a.peer else Watch)(url, log), a.timeout)
                if row["passed"]:
                    shutil.rmtree(row["folder"], ignore_errors=True)
                else:  # kept for reading, out of the next run's way
                    row["folder"] = str(
                        Path(row["folder"]).rename(f"{row['folder']}-{time.strftime('%H%M%S')}")
                    )
                rows.append(row)
                with a.out.open("a") as f:
                    f.write(json.dumps(row) + "\n")
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            try:  # llama-server finishes the prompt batch it is in before it looks at the signal
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
    print(table(rows))


if __name__ == "__main__":
    main()
