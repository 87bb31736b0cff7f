"""`make bench`: the default benchmark on the embedded pair (models/default), written to
docs/benchmarks.md and docs/bench.png together with a description of the machine.

Default (`make bench`, about 8 minutes on a 2-core CPU): one prompt per kind, 128 prompt tokens,
64 generated, plain vs K = 1, 3 and auto, greedy, 3 measured runs after 1 warm-up. `--full`
(`make bench-full`, about 1.8 hours there; written to docs/benchmarks-full.md and
docs/bench-full.png): 128 generated tokens, K = 1, 2, 3, 4, 6, 8 and auto, at temperature 0 and
0.8, where the p/q rule, the coupled rule and sample-and-match run side by side. llama.cpp's own speculative decoding
runs alongside when tools/build/build_peer.sh has built it (or --no-peer).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from localspec import paths
from localspec.bench import report
from localspec.bench.runner import parse_temperatures
from localspec.bench.suite import BenchPlan, run_benchmark
from localspec.config.pair_toml import read_pair
from localspec.config.settings import Settings
from localspec.errors import LocalspecError
from localspec.paths import default_pair

ROOT = Path(__file__).resolve().parent.parent


def machine_section(m: dict) -> str:
    flags = ", ".join(f"{k}={v}" for k, v in m["peer_build_flags"].items()) or "(peer not built)"
    v = m["versions"]
    return "\n".join(
        [
            f"- CPU: {m['cpu']}, {m['physical_cores']} physical / {m['logical_cores']} logical cores; "
            f"{m['ram_gib']} GiB RAM; {m['os']}",
            f"- load average when the benchmark started: {', '.join(map(str, m['load_avg_at_start']))}",
            f"- llama.cpp (llama-cpp-python {v['llama-cpp-python']}) system info: `{m['llama_cpp_system_info']}`",
            f"- llama.cpp peer build (tools/build/build_peer.sh): {flags}",
            f"- localspec {v['localspec']}, Python {v['python']}, numpy {v['numpy']}",
        ]
    )


def _rel(path: str) -> str:
    try:
        return str(Path(path).resolve().relative_to(ROOT))
    except ValueError:
        return path


def _pair_facts(pair: Path) -> str:
    info = read_pair(pair).info
    keys = ("stand_in", "target_params", "target_quant", "draft_params", "draft_quant", "sigma", "r", "seed")
    return ", ".join(f"{k}={info[k]}" for k in keys if k in info)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pair", type=Path, default=default_pair())
    ap.add_argument("--out", type=Path, default=None, help="default docs/benchmarks[-full].md")
    ap.add_argument("--plot", type=Path, default=None, help="default docs/bench[-full].png")
    ap.add_argument("--json", type=Path, default=ROOT / "bench-out" / "bench.json")
    ap.add_argument("--full", action="store_true", help="the complete grid (see above)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--gen-tokens", type=int, default=None, help="default 64, 128 with --full")
    ap.add_argument("--per-kind", type=int, default=1)
    ap.add_argument(
        "--threads", type=int, default=None, help="CPU threads for both sides (default: physical cores)"
    )
    ap.add_argument("--temperatures", default=None, help="default 0, '0,0.8' with --full")
    ap.add_argument(
        "--peer",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="run llama.cpp alongside (default: when tools/build/build_peer.sh has built it)",
    )
    args = ap.parse_args()
    suffix = "-full" if args.full else ""
    args.out = args.out or ROOT / "docs" / f"benchmarks{suffix}.md"
    args.plot = args.plot or ROOT / "docs" / f"bench{suffix}.png"
    peer = args.peer if args.peer is not None else (paths.peer_bin() / "llama-speculative-simple").exists()
    try:
        temps = parse_temperatures(args.temperatures or ("0,0.8" if args.full else "0"))
    except LocalspecError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    plan = BenchPlan(
        draft_max=("1", "2", "3", "4", "6", "8", "auto") if args.full else ("1", "3", "auto"),
        temperatures=temps,
        spec_modes=("pq", "coupled", "match"),
        per_kind=args.per_kind,
        prompt_tokens=128,
        gen_tokens=args.gen_tokens or (128 if args.full else 64),
        runs=args.runs,
        warmup=1,
        seed=0,
        peer=peer,
        # llama.cpp only at the first temperature: at T>0 our `match` rows are its rule on our
        # loop, and skipping it there saves a third of an hour of the full grid
        peer_temperatures=temps[:1],
    )
    try:
        settings = Settings.load(pair=args.pair, n_threads=args.threads)
        t0 = time.time()
        rep = run_benchmark(settings, plan, progress=lambda msg: print(f"  {msg}", file=sys.stderr))
    except LocalspecError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    minutes = (time.time() - t0) / 60
    report.print_rich(rep)
    for path in (args.out, args.plot, args.json):
        path.parent.mkdir(parents=True, exist_ok=True)
    report.write_json(rep, args.json)
    report.plot(rep, args.plot)
    rel_plot = Path(args.plot).resolve().relative_to(Path(args.out).resolve().parent)
    doc = "\n".join(
        [
            "# Benchmarks",
            "",
            f"Generated by `{'make bench-full' if args.full else 'make bench'}` (tools/make_bench.py); the numbers below are from one run on the "
            "machine described, not a promise for yours. Reproduce or extend with `localspec bench` "
            "(see `localspec bench --help`; `--peer` adds llama.cpp's own speculative decoding)."
            + (
                ""
                if args.full
                else " The whole grid (`make bench-full`) is in [benchmarks-full.md](benchmarks-full.md)."
            ),
            "",
            f"Pair: `{_rel(rep.params['target'])}` (target) with `{_rel(rep.params['draft'])}` (draft); "
            f"pair.toml: {_pair_facts(args.pair)}. "
            f"Sampling at T>0: top-k {rep.params['top_k']}, top-p {rep.params['top_p']}, min-p {rep.params['min_p']}, "
            "localspec verifies by the p/q rule (`pq`), the coupled rule (`coupled`: a seed mostly gives the plain text, docs/sampling.md) "
            "or, for comparison, sample-and-match (`match`); "
            "llama.cpp always verifies by sample-and-match.",
            "",
            "## Machine",
            "",
            machine_section(rep.machine),
            "",
            "## Results",
            "",
            report.markdown(rep, plot=str(rel_plot)),
            f"Wall time of the whole benchmark: {minutes:.1f} min.",
            "",
        ]
    )
    args.out.write_text(doc)
    print(f"wrote {args.out}, {args.plot} and {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
