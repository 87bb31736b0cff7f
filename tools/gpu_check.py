"""The GPU proof run (tools/gpu_check.sh calls this once llama.cpp is importable).

Steps, each timed and recorded even when one fails: the machine; a synthetic pair generated here
(tools/synthetic/pair.py: ~7.4B Q4_K_M target, ~0.47B Q8_0 draft; tiny with --mode cpu);
`doctor` with placement verified from llama.cpp's log; the pair tests (tests/models/test_gpu_pair.py);
`bench` at K = 0..8 and auto, T = 0 and 0.8; the target's verify cost by batch size; the
concurrency run when `bench --concurrency` exists. Writes OUT/report.md and OUT/gpu_check.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
import traceback
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's localspec and tools.synthetic, whatever PYTHONPATH says

# how much each mode measures; gpu fits the device's 9 minutes (docs/gpu.md has the budget)
SIZES = {
    "gpu": {
        "prompt_tokens": 128,
        "gen_tokens": 128,
        "prompts": None,  # the bundled set, one prompt of each kind (4)
        "warmup": 1,
        "n_threads": None,
        "cost_batches": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 16, 24, 32, 48, 64],
        "cost_reps": 20,
        "draft_max": "1,2,3,4,5,6,7,8,auto",  # with the plain baseline: K = 0..8 and the tuner
        "concurrency": "1,4,8",  # N requests at once need N prompts: 8 of the bundled set
        "step_timeout": 240,
    },
    # a smoke run: every step and configuration, as little work each as will run them; one thread,
    # since llama.cpp's spinning thread barriers crawl on a shared, oversubscribed 2-core machine
    "cpu": {
        "prompt_tokens": 32,
        "gen_tokens": 8,
        "prompts": 1,
        "warmup": 0,
        "n_threads": 1,
        "cost_batches": [1, 2, 4, 8],
        "cost_reps": 3,
        "draft_max": "1,2,4,8,auto",
        "concurrency": "1,2",
        "step_timeout": 300,
    },
}
TEMPERATURES = "0,0.8"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=SIZES, default="gpu")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--work", type=Path, required=True, help="where the pair is generated")
    ap.add_argument("--vocab", type=Path, default=ROOT / "build" / "gpu-bundle" / "smollm2-vocab.gguf")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--f16-only", action="store_true", help="only write the f16 pair (no llama.cpp needed)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.f16_only:  # gpu_check.sh runs this while llama.cpp builds
        make_pair(args.vocab, args.work, args.work / "pair", args.mode, args.seed, f16_only=True)
        return
    run = Check(args.mode, args.out, SIZES[args.mode])
    pair_dir = args.work / "pair"
    run.step("machine", machine)
    run.step("pair", lambda: make_pair(args.vocab, args.work, pair_dir, args.mode, args.seed))
    pair = pair_dir / "pair.toml"
    if pair.exists():
        run.step("doctor", lambda: doctor(pair, args.mode, args.out))
        run.step("tests", lambda: tests(pair, args.out, run.sizes))
        run.step("bench", lambda: bench(pair, args.out, run.sizes))
        run.step("verify_cost", lambda: verify_cost(pair, run.sizes))
        run.step("concurrency", lambda: concurrency(pair, args.out, run.sizes))
    run.finish()
    sys.exit(0 if run.ok else 1)


class Check:
    def __init__(self, mode: str, out: Path, sizes: dict) -> None:
        self.mode, self.out, self.sizes = mode, out, sizes
        self.t0 = time.perf_counter()
        self.result: dict[str, Any] = {"mode": mode, "sizes": sizes, "steps": {}}

    def step(self, name: str, fn: Callable[[], dict]) -> None:
        print(f"== {name} (at {time.perf_counter() - self.t0:.0f} s)", flush=True)
        t = time.perf_counter()
        try:
            out = fn() | {"ok": True}
        except Exception as e:  # a failed step is reported, the next ones still run
            traceback.print_exc()
            out = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        out["seconds"] = round(time.perf_counter() - t, 1)
        self.result["steps"][name] = out
        print(
            f"   {name}: {'ok' if out['ok'] else 'FAILED ' + out['error']} in {out['seconds']} s", flush=True
        )

    @property
    def ok(self) -> bool:
        steps = self.result["steps"]
        return all(s["ok"] for s in steps.values()) and "doctor" in steps

    def finish(self) -> None:
        self.result["total_seconds"] = round(time.perf_counter() - self.t0, 1)
        (self.out / "gpu_check.json").write_text(json.dumps(self.result, indent=2, default=str) + "\n")
        (self.out / "report.md").write_text(render(self.result))
        print(f"wrote {self.out / 'report.md'} and gpu_check.json ({self.result['total_seconds']} s)")


# ---------------------------------------------------------------------------------------------------
def machine() -> dict:
    from localspec import llama  # noqa: PLC0415

    smi = shutil.which("nvidia-smi")
    gpus = ""
    if smi:
        q = "--query-gpu=name,memory.total,driver_version,clocks.max.sm"
        gpus = subprocess.run([smi, q, "--format=csv,noheader"], capture_output=True, text=True).stdout
    return {
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "llama_cpp_python": llama.llama_cpp_version(),
        "gpu_offload": llama.supports_gpu_offload(),
        "devices": [asdict(d) for d in llama.devices()],
        "nvidia_smi": gpus.strip(),
    }


def make_pair(vocab: Path, work: Path, pair_dir: Path, mode: str, seed: int, f16_only: bool = False) -> dict:
    from tools.synthetic.pair import (  # noqa: PLC0415
        RECIPES,
        is_built,
        quantize_pair,
        write_f16,
        write_vocab_only,
    )

    if is_built(pair_dir, RECIPES[mode], seed=seed):
        return {"log": ["already built with this recipe (a warm machine keeps it)"], "files": {}}

    if not vocab.exists():  # on a CPU machine the bundle may not be made yet: the real model is here
        vocab = work / "vocab.gguf"
        if not vocab.exists():
            write_vocab_only(ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf", vocab)
    lines: list[str] = []

    def log(line: str) -> None:
        print("   " + line, flush=True)
        lines.append(line)

    write_f16(vocab, pair_dir, recipe=RECIPES[mode], seed=seed, log=log)
    if f16_only:
        return {}
    quantize_pair(pair_dir, nthread=os.cpu_count(), log=log)
    return {"log": lines, "files": {p.name: p.stat().st_size for p in sorted(pair_dir.glob("*.gguf"))}}


def doctor(pair: Path, mode: str, out: Path) -> dict:
    from localspec.cli.doctor import collect, render  # noqa: PLC0415
    from localspec.config.settings import Settings  # noqa: PLC0415

    rep = collect(Settings.load(pair=pair, n_threads=1 if mode == "cpu" else None))
    (out / "doctor.txt").write_text(render(rep) + "\n")
    dec, ver = rep.get("decision", {}), rep.get("verified", {})
    problems = list(ver.get("problems", [])) + ([rep["refused"]] if "refused" in rep else [])
    if mode == "gpu":  # the point of the run: every layer of both models on the GPU, as planned
        if dec.get("mode") != "gpu":
            problems.append(f"placement mode is {dec.get('mode')!r}, not full GPU offload")
        if not ver:
            problems.append("placement was not verified from llama.cpp's log")
    if problems:
        raise RuntimeError("; ".join(map(str, problems)))
    return {"decision": dec, "verified": ver, "plan": rep.get("plan"), "devices": rep.get("devices")}


def tests(pair: Path, out: Path, sizes: dict) -> dict:
    env = os.environ | {
        "LOCALSPEC_TEST_PAIR": str(pair),
        "LOCALSPEC_TEST_THREADS": str(sizes["n_threads"] or 0),
    }
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "tests/models/test_gpu_pair.py",
        f"--junitxml={out / 'tests.xml'}",
    ]
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=sizes["step_timeout"])
    (out / "tests.txt").write_text(p.stdout + p.stderr)
    summary = (p.stdout.strip().splitlines() or [""])[-1]
    if p.returncode != 0:
        raise RuntimeError(f"pytest: {summary}")
    return {"summary": summary}


def _localspec(args: list[str], timeout: int) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "localspec", *args]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(args[:2])}: {p.stderr.strip().splitlines()[-1:]}")
    return p


def _bench_args(pair: Path, out: Path, sizes: dict) -> list[str]:
    args = [
        "bench",
        "--pair",
        str(pair),
        "--runs",
        "1",
        "--warmup",
        str(sizes["warmup"]),
        "--prompt-tokens",
        str(sizes["prompt_tokens"]),
        "--gen-tokens",
        str(sizes["gen_tokens"]),
        "-q",
    ]
    if sizes["prompts"]:  # the first few bundled prompts only
        path = out / "prompts.jsonl"
        lines = (ROOT / "localspec" / "data" / "bench_prompts.jsonl").read_text().splitlines(keepends=True)
        path.write_text("".join(lines[: sizes["prompts"]]))
        args += ["--prompts", str(path)]
    else:
        args += ["--per-kind", "1"]
    return args + _threads(sizes)


def _threads(sizes: dict) -> list[str]:
    return ["--n-threads", str(sizes["n_threads"])] if sizes["n_threads"] else []


def bench(pair: Path, out: Path, sizes: dict) -> dict:
    js, md = out / "bench.json", out / "bench.md"
    args = _bench_args(pair, out, sizes) + [
        "--draft-max",
        sizes["draft_max"],
        "--temperature",
        TEMPERATURES,
        "--json",
        str(js),
        "--markdown",
        str(md),
    ]
    _localspec(args, sizes["step_timeout"])
    data = json.loads(js.read_text())
    tables = [_bench_table(t) for t in data["tables"]]
    for tb in tables:  # which K the tuner picks, round by round, on one longer generation
        run = _localspec(
            [
                "run",
                "--pair",
                str(pair),
                "--draft-max",
                "auto",
                "--temperature",
                str(tb["temperature"]),
                "--seed",
                "0",
                "--max-tokens",
                str(4 * sizes["gen_tokens"]),
                "--json",
                "Write a long story about a lighthouse keeper.",
            ],
            sizes["step_timeout"],
        )
        k_hist = json.loads(run.stdout)["stats"].get("k_history") or []
        tb["auto_k_counts"] = {k: k_hist.count(k) for k in sorted(set(k_hist))}
    return {"tables": tables}


def _bench_table(t: dict) -> dict:
    rows = t["localspec"]
    plain = next(r for r in rows if not r["speculative"])
    fixed = [r for r in rows if r["speculative"] and r["draft_max"] != "auto"]
    auto = next((r for r in rows if r["draft_max"] == "auto"), None)
    best = max(fixed, key=lambda r: r["decode_tok_s"]["median"]) if fixed else None
    return {
        "temperature": t["temperature"],
        "rows": [
            {
                "config": r["config"],
                "tok_s": r["decode_tok_s"]["median"],
                "speedup": r["speedup"],
                "acceptance": r["acceptance_rate"],
                "mean_accepted": r["mean_accepted_len"],
                "draft_share": r["draft_share"],
                "verify_share": r["verify_share"],
            }
            for r in rows
        ],
        "plain_tok_s": plain["decode_tok_s"]["median"],
        "best_k": best["draft_max"] if best else None,
        "best_speedup": best["speedup"] if best else None,
        "auto_speedup": auto["speedup"] if auto else None,
        "auto_vs_best": (auto["decode_tok_s"]["median"] / best["decode_tok_s"]["median"])
        if auto and best and best["decode_tok_s"]["median"]
        else None,
    }


def verify_cost(pair: Path, sizes: dict) -> dict:
    """Median ms of one target (and draft) pass over n new tokens after a fixed prompt, by n."""
    from localspec import llama  # noqa: PLC0415
    from localspec.config.settings import Settings  # noqa: PLC0415

    s = Settings.load(pair=pair, n_threads=sizes["n_threads"])
    prompt_len, reps = sizes["prompt_tokens"], sizes["cost_reps"]
    out: dict[str, Any] = {"prompt_tokens": prompt_len, "reps": reps}
    for role, path in (("target", s.target), ("draft", s.draft)):
        with (
            llama.Model(path, n_gpu_layers=s.n_gpu_layers) as m,
            llama.Context(
                m, n_ctx=1024, n_threads=s.n_threads, flash_attn=s.flash_attn, kv_type=s.kv_type
            ) as ctx,
        ):
            prompt = [(i * 7919) % 1000 + 100 for i in range(prompt_len)]
            ctx.eval(prompt, 0)
            curve = {}
            for n in sizes["cost_batches"]:
                toks = prompt[:n]
                times = []
                for _ in range(reps + 1):  # the first pass of each size warms its kernels and graph
                    t = time.perf_counter()
                    ctx.eval(toks, prompt_len, n_logits=n)
                    times.append((time.perf_counter() - t) * 1e3)
                    ctx.truncate(prompt_len)
                curve[n] = round(statistics.median(times[1:]), 3)
            out[role] = curve
    one = out["target"][1]
    out["target_relative"] = {n: round(ms / one, 2) for n, ms in out["target"].items()}
    out["draft_over_target"] = round(out["draft"][1] / one, 3)
    return out


def concurrency(pair: Path, out: Path, sizes: dict) -> dict:
    help_text = _localspec(["bench", "--help"], 120).stdout
    if "--concurrency" not in help_text:
        return {"skipped": "this localspec has no `bench --concurrency` yet (the batched engine)"}
    js = out / "concurrency.json"
    conc = sizes["concurrency"]
    need = max(int(n) for n in conc.split(","))  # a wave of N requests needs N prompts
    args = _bench_args(pair, out, sizes | {"prompts": need}) + [
        "--draft-max",
        "auto",
        "--temperature",
        "0",
        "--concurrency",
        conc,
        "--json",
        str(js),
        "--markdown",
        str(out / "concurrency.md"),
    ]
    _localspec(args, sizes["step_timeout"])
    return {"json": js.name, "rows": json.loads(js.read_text()).get("rows", [])}


# ---------------------------------------------------------------------------------------------------
def render(r: dict) -> str:
    steps = r["steps"]
    mode = r["mode"]
    head = "GPU" if mode == "gpu" else "CPU (`--cpu`: tiny synthetic pair - not GPU figures)"
    lines = [f"# localspec GPU check - {head}", ""]
    m = steps.get("machine", {})
    if m.get("ok"):
        lines += [
            f"- machine: {m['cpus']} CPUs, Python {m['python']}, llama-cpp-python {m['llama_cpp_python']},"
            f" GPU offload {'yes' if m['gpu_offload'] else 'no'}"
        ]
        if m["nvidia_smi"]:
            lines.append(f"- GPU: {m['nvidia_smi']}")
    lines += ["", "| step | result | seconds |", "|---|---|---|"]
    for name, s in steps.items():
        lines.append(f"| {name} | {'ok' if s['ok'] else 'FAILED: ' + s['error']} | {s['seconds']} |")
    lines.append(f"\nTotal {r['total_seconds']} s.\n")
    p = steps.get("pair", {})
    if p.get("ok"):
        lines += ["## Pair (synthetic, generated here)", "", *[f"    {x}" for x in p["log"]], ""]
    d = steps.get("doctor", {})
    if d.get("ok"):
        ver = d["verified"]
        lines += [
            "## Placement (doctor)",
            "",
            f"decision: {d['decision'].get('mode')}, n_gpu_layers target "
            f"{d['decision'].get('target_gpu_layers')}, draft {d['decision'].get('draft_gpu_layers')}",
            "",
        ]
        lines += [f"    {x}" for x in ver.get("summary", "").splitlines()]
        for role, acc in ver.get("accuracy", {}).items():
            lines.append(f"- {role} plan vs seen: " + ", ".join(f"{k} {v}" for k, v in acc.items()))
        lines.append("")
    t = steps.get("tests", {})
    if t.get("ok"):
        lines += ["## Pair tests", "", f"`tests/models/test_gpu_pair.py`: {t['summary']}", ""]
    b = steps.get("bench", {})
    if b.get("ok"):
        lines += ["## Bench (decode tok/s; K=0 is plain target decoding)", ""]
        for tb in b["tables"]:
            lines += [
                f"### T = {tb['temperature']}",
                "",
                "| config | tok/s | speedup | acceptance | accepted/round | draft share | verify share |",
                "|---|---|---|---|---|---|---|",
            ]
            for row in tb["rows"]:
                lines.append(
                    f"| {row['config']} | {row['tok_s']:.1f} | {row['speedup']:.2f}x | "
                    f"{row['acceptance']:.0%} | {row['mean_accepted']:.2f} | {row['draft_share']:.0%} | "
                    f"{row['verify_share']:.0%} |"
                )
            if tb["best_k"]:
                ratio = f"{tb['auto_vs_best']:.2f}" if tb["auto_vs_best"] else "-"
                auto = f"{tb['auto_speedup']:.2f}x" if tb["auto_speedup"] else "-"
                lines += [
                    "",
                    f"Best fixed K = {tb['best_k']} ({tb['best_speedup']:.2f}x); auto {auto}, "
                    f"auto / best fixed = {ratio}; K the tuner chose (rounds): {tb['auto_k_counts']}",
                    "",
                ]
    v = steps.get("verify_cost", {})
    if v.get("ok"):
        lines += [
            "## Verify cost by batch size",
            "",
            f"One pass over n new tokens after a {v['prompt_tokens']}-token"
            f" prompt, median of {v['reps']}; draft per token = {v['draft_over_target']:.3g} x target.",
            "",
            "| n | target ms | x one token | draft ms |",
            "|---|---|---|---|",
        ]
        for n, ms in v["target"].items():
            lines.append(f"| {n} | {ms:.2f} | {v['target_relative'][n]:.2f} | {v['draft'][n]:.2f} |")
        lines.append("")
    c = steps.get("concurrency", {})
    if c.get("ok"):
        lines += ["## Concurrency (1, 4, 8)", ""]
        if c.get("skipped"):
            lines += [c["skipped"], ""]
        else:
            cols = ["config", "concurrency", "aggregate_tok_s", "per_request_tok_s", "ttft_ms", "n_tokens"]
            lines += ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
            for row in c["rows"]:
                cells = [row.get(k, "") for k in cols]
                lines.append(
                    "| " + " | ".join(f"{v:.1f}" if isinstance(v, float) else str(v) for v in cells) + " |"
                )
            lines += ["", f"(`localspec bench --concurrency`'s own tables: {c['json']}, concurrency.md)", ""]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
