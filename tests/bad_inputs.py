"""The bad-input corpus: broken model files, bad settings and bad prompts, and the command lines of
every entry point that takes them. Adding an entry point is one line in ENTRY_POINTS (a command line
for a model path); adding a bad file is one line in `make_bad_files`."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from localspec.config.settings import setting_fields

from .gguf_bytes import F32, Gguf, kv_u32, tensor_info


@dataclass(frozen=True)
class BadFile:
    path: Path
    needles: tuple[str, ...]  # the error line must contain one of these


def make_bad_files(d: Path, real: Path) -> dict[str, BadFile]:
    """Broken model files under `d`; `real` is a real GGUF to cut up."""
    d.mkdir(parents=True, exist_ok=True)
    head = real.read_bytes()[:200_000]
    files = {
        "missing": (None, ("no such file", "no such folder", "does not exist")),
        "empty": (b"", ("not a GGUF file", "truncated", "a file; give", "neither a GGUF file nor")),
        "random-bytes": (os.urandom(4096), ("not a GGUF file", "a file; give", "neither a GGUF file nor")),
        "wrong-magic": (
            b"GGML" + head[4:4096],
            ("not a GGUF file", "a file; give", "neither a GGUF file nor"),
        ),
        "truncated-header": (head[:5000], ("truncated", "a file; give", "neither a GGUF file nor")),
        "truncated-tensor-data": (
            Gguf(data=bytes(95)).bytes(),
            ("truncated", "a file; give", "neither a GGUF file nor"),
        ),
        "offset-past-eof": (
            Gguf(tensors=[tensor_info("a.weight", (8,), F32, 1 << 40)]).bytes(),
            ("truncated", "a file; give", "neither a GGUF file nor"),
        ),
        "zero-alignment": (
            _zero_alignment(),
            ("not a valid GGUF file", "a file; give", "neither a GGUF file nor"),
        ),
    }
    out = {}
    for name, (data, needles) in files.items():
        p = d / f"{name}.gguf"
        if data is not None:
            p.write_bytes(data)
        out[name] = BadFile(p, needles)
    (d / "a-directory.gguf").mkdir(exist_ok=True)
    out["directory"] = BadFile(d / "a-directory.gguf", ("is a directory", "no config.json", "config.json"))
    return out


def _zero_alignment() -> bytes:
    g = Gguf()
    g.kvs[1] = kv_u32("general.alignment", 0)
    return g.bytes()


# entry point -> command line for one model file (`m`), another good model (`good`) and an output folder.
# Each case gets "hello\n" on stdin, so `chat` reading a pipe is one more line here, e.g.
#   "chat": lambda m, good, out: ["chat", "--target", m],
#   "serve": lambda m, good, out: ["serve", "--target", m, "--port", "0"],  # must exit, not serve
EntryPoint = Callable[[str, str, str], list[str]]
ENTRY_POINTS: dict[str, EntryPoint] = {
    "run": lambda m, good, out: ["run", "hi", "--target", m, "--max-tokens", "4"],
    "run-draft": lambda m, good, out: ["run", "hi", "--target", good, "--draft", m, "--max-tokens", "4"],
    "bench": lambda m, good, out: [
        "bench",
        "--target",
        m,
        "--runs",
        "1",
        "--gen-tokens",
        "4",
        "--per-kind",
        "1",
        "-q",
    ],
    "doctor": lambda m, good, out: ["doctor", "--target", m],
    "check-pair": lambda m, good, out: ["check-pair", good, m],
    "quantize": lambda m, good, out: ["quantize", m, f"{out}/q.gguf", "--type", "q8_0"],
    "pair": lambda m, good, out: ["pair", good, m, "--out-dir", f"{out}/pair"],
    "convert": lambda m, good, out: ["convert", m, "--out", f"{out}/c.gguf"],
    "chat": lambda m, good, out: ["chat", "--target", m, "--max-tokens", "4"],  # piped: "hello" on stdin
    "serve": lambda m, good, out: ["serve", "--target", m, "--port", "0"],
}
# commands that take the Settings flags, and the bits of their command lines that are not settings
SETTINGS_COMMANDS: dict[str, Callable[[str], list[str]]] = {
    "run": lambda good: ["run", "hi", "--target", good],
    "bench": lambda good: ["bench", "--target", good, "--runs", "1", "-q"],
    "doctor": lambda good: ["doctor", "--target", good, "--no-load"],
    "chat": lambda good: ["chat", "--target", good],
    "serve": lambda good: ["serve", "--target", good, "--port", "0"],
}


def numeric_setting_cases(command: str) -> list[tuple[str, list[str], tuple[str, ...]]]:
    """(id, flags, needles): huge, negative and NaN values for every numeric setting `command` takes."""
    import click

    from localspec.cli import cli

    cmd = cli.get_command(click.Context(cli), command)
    offered = {o.name for o in cmd.params}
    cases = []
    for f in setting_fields():
        kind = str(f.type)
        if ("int" not in kind and "float" not in kind) or f.name not in offered:
            continue
        flag = "--" + f.name.replace("_", "-")
        for label, value in (
            ("huge", "1e30" if "float" in kind else str(10**30)),
            ("negative", "-5"),
            ("nan", "nan"),
        ):
            cases.append((f"{f.name}={label}", [flag, value], (f.name, flag)))
    return cases


# commands with numeric options of their own (not Settings fields): the rest of a valid command line
OPTION_COMMANDS: dict[str, Callable[[str, str], list[str]]] = {
    "bench": lambda good, out: ["bench", "--target", good, "-q"],
    "quantize": lambda good, out: ["quantize", good, f"{out}/q.gguf"],
    "pair": lambda good, out: ["pair", "--stand-in", "--out-dir", f"{out}/standin"],
}


def numeric_option_cases(command: str) -> list[tuple[str, list[str], tuple[str, ...]]]:
    """(id, flags, needles): huge, negative and NaN values for `command`'s own numeric options."""
    import click

    from localspec.cli import cli

    cmd = cli.get_command(click.Context(cli), command)
    settings = {f.name for f in setting_fields()}
    cases = []
    for p in cmd.params:
        if p.name in settings or not isinstance(
            p.type, (click.types.IntParamType, click.types.FloatParamType)
        ):
            continue
        flag = max(p.opts, key=len)
        is_float = isinstance(p.type, click.types.FloatParamType)
        for label, value in (
            ("huge", "1e30" if is_float else str(10**30)),
            ("negative", "-5"),
            ("nan", "nan"),
        ):
            cases.append((f"{p.name}={label}", [flag, value], (flag, p.name)))
    return cases
