"""The peer: llama.cpp's own speculative decoding (`llama-speculative-simple`) and plain decoding
(`llama-bench`), built from the same vendored llama.cpp by tools/build/build_peer.sh, run on the same
pair, prompts, draft lengths, thread count and sampling settings as localspec.

Timing comes from the tools' own output: speculative-simple prints "decoded N tokens in T seconds"
(timer from the first target pass after the prompt) and n_drafted / n_accept.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from localspec import paths
from localspec.bench.aggregate import Sample
from localspec.bench.peer_variants import PEER_VARIANTS, PeerVariant
from localspec.bench.prompts import FittedPrompt
from localspec.bench.runner import PLAIN, BenchConfig
from localspec.errors import LocalspecError

_ENCODED = re.compile(r"encoded\s+(\d+) tokens in\s+([\d.]+) seconds")
_DECODED = re.compile(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds")
_DRAFTED = re.compile(r"n_drafted\s*=\s*(\d+)")
_ACCEPT = re.compile(r"n_accept\s*=\s*(\d+)")


def peer_binary(name: str, bin_dir: Path | None = None) -> Path:
    path = (bin_dir or paths.peer_bin()) / name
    if not path.is_file():
        raise LocalspecError(
            f"llama.cpp's {name} is not built ({path} is missing): in a checkout, `make peer` builds it"
            " into third_party/llama.cpp-build/bin; point LOCALSPEC_PEER_BIN at that folder (make does)"
        )
    return path


@dataclass(frozen=True)
class PeerRun:
    """What one llama-speculative-simple run reported."""

    n_prompt: int
    encode_s: float
    n_decoded: int
    decode_s: float
    n_drafted: int
    n_accepted: int


def parse_speculative_simple(output: str) -> PeerRun:
    enc, dec = _ENCODED.search(output), _DECODED.search(output)
    drafted, acc = _DRAFTED.search(output), _ACCEPT.search(output)
    if not (enc and dec and drafted and acc):
        tail = "\n".join(output.strip().splitlines()[-5:])
        raise LocalspecError(
            f"could not read llama-speculative-simple's timing output; it ended with:\n{tail}"
        )
    return PeerRun(
        int(enc.group(1)),
        float(enc.group(2)),
        int(dec.group(1)),
        float(dec.group(2)),
        int(drafted.group(1)),
        int(acc.group(1)),
    )


@dataclass(frozen=True, kw_only=True)
class PeerSettings:
    target: Path
    draft: Path
    n_threads: int
    n_ctx: int
    n_batch: int
    n_ubatch: int
    flash_attn: str
    kv_type: str
    top_k: int
    top_p: float
    min_p: float
    timeout_s: float = 600.0


def sampling_args(ps: PeerSettings, temperature: float, seed: int) -> list[str]:
    if temperature <= 0:  # greedy, exactly as localspec's temperature 0
        return ["--temp", "0", "--top-k", "1", "--seed", str(seed)]
    return [
        "--temp",
        f"{temperature:g}",
        "--top-k",
        str(ps.top_k),
        "--top-p",
        f"{ps.top_p:g}",
        "--min-p",
        f"{ps.min_p:g}",
        "--seed",
        str(seed),
    ]


def speculative_simple_cmd(
    ps: PeerSettings,
    prompt_text: str,
    k: int,
    *,
    gen_tokens: int,
    temperature: float,
    seed: int,
    bin_dir: Path | None = None,
    variant: PeerVariant = PEER_VARIANTS["draft-simple"],
    json_schema: str | None = None,
) -> list[str]:
    # a schema constrains llama.cpp's target sampler (converted to its grammar); its draft stays blind
    constraint = ["--json-schema", json_schema] if json_schema is not None else []
    t = str(ps.n_threads)
    draft = ["-md", str(ps.draft)] if variant.uses_draft else []
    return [
        str(peer_binary("llama-speculative-simple", bin_dir)),
        "-m",
        str(ps.target),
        *draft,
        "--spec-type",
        variant.spec_type,
        *variant.args,
        "--spec-draft-n-max",
        str(k),
        "--spec-draft-n-min",
        "0",
        "--spec-draft-p-min",
        "0",
        "-p",
        prompt_text,
        "-n",
        str(gen_tokens),
        "-c",
        str(ps.n_ctx),
        "-b",
        str(ps.n_batch),
        "-ub",
        str(ps.n_ubatch),
        "-t",
        t,
        "-tb",
        t,
        "-td",
        t,
        "-tbd",
        t,
        "-ngl",
        "0",
        "-ngld",
        "0",
        "-fa",
        ps.flash_attn,
        "-ctk",
        ps.kv_type,
        "-ctv",
        ps.kv_type,
        "-ctkd",
        ps.kv_type,
        "-ctvd",
        ps.kv_type,
        *sampling_args(ps, temperature, seed),
        *constraint,
    ]


def server_cmd(
    ps: PeerSettings, n_parallel: int, k: int | None, *, port: int, bin_dir: Path | None = None
) -> list[str]:
    """llama-server with n_parallel slots over one unified KV cache of n_ctx per slot (as localspec
    allocates), plain when k is None, else the draft at a fixed K."""
    t = str(ps.n_threads)
    cmd = [
        str(peer_binary("llama-server", bin_dir)),
        "-m", str(ps.target),
        "--host", "127.0.0.1",
        "--port", str(port),
        "-np", str(n_parallel),
        "-kvu",
        "-c", str(ps.n_ctx * n_parallel),
        "-b", str(ps.n_batch),
        "-ub", str(ps.n_ubatch),
        "-t", t,
        "-tb", t,
        "-ngl", "0",
        "-fa", ps.flash_attn,
        "-ctk", ps.kv_type,
        "-ctv", ps.kv_type,
        "--no-webui",
    ]  # fmt: skip
    if k is not None:
        cmd += [
            "-md", str(ps.draft),
            "--spec-type", "draft-simple",
            "--spec-draft-n-max", str(k),
            "--spec-draft-n-min", "0",
            "--spec-draft-p-min", "0",
            "-td", t,
            "-tbd", t,
            "-ngld", "0",
            "-ctkd", ps.kv_type,
            "-ctvd", ps.kv_type,
        ]  # fmt: skip
    return cmd


def server_sampling(ps: PeerSettings, temperature: float) -> dict:
    """The /completion sampling fields matching localspec's settings (greedy at temperature 0)."""
    if temperature <= 0:
        return {"temperature": 0.0, "top_k": 1}
    return {"temperature": temperature, "top_k": ps.top_k, "top_p": ps.top_p, "min_p": ps.min_p}


def _run(cmd: list[str], timeout_s: float) -> str:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise LocalspecError(f"{Path(cmd[0]).name} took longer than {timeout_s:.0f} s") from None
    out = proc.stdout + proc.stderr
    if proc.returncode != 0:
        tail = "\n".join(out.strip().splitlines()[-5:])
        raise LocalspecError(f"{Path(cmd[0]).name} failed (exit {proc.returncode}):\n{tail}")
    return out


class PeerSide:
    """llama.cpp as a `runner.Side`: `llama-bench`'s plain decode of the target, then
    llama-speculative-simple at fixed draft lengths (it has no automatic one). Plain runs inside
    the interleave, at each prompt's depth, so each of its samples pairs with our plain one of the
    same run and prompt: the machine's drift between them is seconds, not the whole benchmark.
    `prompt_text` turns fitted tokens back into the text the tool re-tokenizes (adding BOS itself);
    the prompt length it reports is kept in each sample."""

    label = "llama.cpp"

    def __init__(
        self,
        ps: PeerSettings,
        prompt_text: Callable[[FittedPrompt], str],
        draft_lengths: Sequence[int],
        *,
        temperature: float,
        gen_tokens: int,
        bin_dir: Path | None = None,
        variants: Sequence[str] = ("draft-simple",),
    ) -> None:
        self.ps, self.prompt_text, self.bin_dir = ps, prompt_text, bin_dir
        self.temperature, self.gen_tokens = temperature, gen_tokens
        self.configs = [PLAIN]
        for name in variants:  # the draft model's variants per fixed K; a lookup alone once
            if not PEER_VARIANTS[name].uses_draft:
                self.configs.append(BenchConfig(name, True, str(max(draft_lengths)), name))
                continue
            for k in draft_lengths:
                label = f"K={k}" if name == "draft-simple" else f"{name} K={k}"
                self.configs.append(BenchConfig(label, True, str(k), name))

    def one(self, cfg: BenchConfig, prompt: FittedPrompt, run: int, seed: int) -> Sample:
        if not cfg.spec:
            return self._plain(prompt, run)
        cmd = speculative_simple_cmd(
            self.ps,
            self.prompt_text(prompt),
            int(cfg.draft_max),
            gen_tokens=self.gen_tokens,
            temperature=self.temperature,
            seed=seed,
            bin_dir=self.bin_dir,
            variant=PEER_VARIANTS[cfg.variant or "draft-simple"],
            json_schema=prompt.schema,
        )
        r = parse_speculative_simple(_run(cmd, self.ps.timeout_s))
        return Sample(
            config=cfg.name,
            run=run,
            prompt_id=prompt.id,
            kind=prompt.kind,
            n_prompt=r.n_prompt,
            n_generated=r.n_decoded,
            finish_reason="length" if r.n_decoded >= self.gen_tokens else "stop",
            decode_tokens=r.n_decoded,
            decode_ms=r.decode_s * 1e3,
            total_ms=(r.encode_s + r.decode_s) * 1e3,
            n_drafted=r.n_drafted,
            n_accepted=r.n_accepted,
        )

    def _plain(self, prompt: FittedPrompt, run: int) -> Sample:
        depth, n = len(prompt.tokens), self.gen_tokens
        cmd = llama_bench_cmd(
            self.ps, self.ps.target, depth=depth, gen_tokens=n, runs=1, bin_dir=self.bin_dir
        )
        (tok_s,) = parse_llama_bench(_run(cmd, self.ps.timeout_s))
        ms = n / tok_s * 1e3 if tok_s > 0 else 0.0
        return Sample(
            config=PLAIN.name, run=run, prompt_id=prompt.id, kind=prompt.kind, n_prompt=depth,
            n_generated=n, finish_reason="length", decode_tokens=n, decode_ms=ms, total_ms=ms,
        )  # fmt: skip


def llama_bench_cmd(
    ps: PeerSettings, model: Path, *, depth: int, gen_tokens: int, runs: int, bin_dir: Path | None = None
) -> list[str]:
    """llama-bench timing `gen_tokens` plain decode steps of `model` after `depth` context tokens."""
    return [
        str(peer_binary("llama-bench", bin_dir)),
        "-m", str(model),
        "-p", "0",
        "-n", str(gen_tokens),
        "-d", str(depth),
        "-r", str(runs),
        "-t", str(ps.n_threads),
        "-ngl", "0",
        "-b", str(ps.n_batch),
        "-ub", str(ps.n_ubatch),
        "-fa", "0" if ps.flash_attn == "off" else "1",
        "-ctk", ps.kv_type,
        "-ctv", ps.kv_type,
        "-o", "json",
    ]  # fmt: skip


def parse_llama_bench(output: str) -> list[float]:
    """The tok/s of each repetition, from llama-bench's JSON output."""
    start = output.find("[")
    try:
        rows = json.loads(output[start : output.rindex("]") + 1])
        return [float(x) for x in rows[0]["samples_ts"]]
    except (ValueError, KeyError, IndexError, TypeError):
        raise LocalspecError("could not read llama-bench's JSON output") from None
