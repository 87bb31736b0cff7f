"""Run many `localspec` command lines in one process and report each as a JSON line:
{"id", "rc", "out", "err"}. The bad-input corpus runs one of these per entry point, so a case that
crashes the interpreter (a segfault in llama.cpp) or hangs is caught by the parent's timeout and
named by the last case reported, without paying a Python start-up per case.

    python -m tests.corpus_runner CASES.json     # [{"id", "argv", "stdin"}, ...]
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import time


def run_one(argv: list[str], stdin: bytes | None) -> tuple[int, str, str]:
    from localspec.cli import cli
    from localspec.cli.common import run_cli

    out, err = io.StringIO(), io.StringIO()
    old_argv, old_stdin = sys.argv, sys.stdin
    sys.argv = ["localspec", *argv]
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin or b""), encoding="utf-8", errors="surrogateescape")
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                run_cli(cli)
                rc = 0
            except SystemExit as e:
                rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        sys.argv, sys.stdin = old_argv, old_stdin
    return rc, out.getvalue(), err.getvalue()


def main() -> None:
    os.environ.pop("LOCALSPEC_DEBUG", None)
    with open(sys.argv[1]) as f:
        cases = json.load(f)
    for case in cases:
        argv = case["argv"]  # may hold lone surrogates: what Python makes of invalid UTF-8 in argv
        stdin = case.get("stdin")
        t0 = time.perf_counter()
        rc, out, err = run_one(argv, stdin.encode("utf-8", "surrogateescape") if stdin is not None else None)
        print(
            json.dumps(
                {
                    "id": case["id"],
                    "rc": rc,
                    "out": out[-2000:],
                    "err": err[-2000:],
                    "s": round(time.perf_counter() - t0, 2),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
