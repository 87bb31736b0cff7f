"""What a verify batch costs per INT4 layout on this CPU: the stand-in's 576-wide shape and a
real-shaped ~1.2B target (every width a multiple of 256), each quantized to Q4_K_M and to Q4_0,
timed by llama.cpp's own llama-bench for batches of 1/2/4/8 tokens. It answers why the stand-in
target is Q4_0: a 576-wide "Q4_K_M" is mostly Q5_0, which ggml's CPU backend has no repacked
kernel for, and Q4_0's repacked GEMM makes a 4-token verify the cheapest of all.

    make peer   # llama-bench, built with the wheel's flags
    LOCALSPEC_PEER_BIN=$PWD/third_party/llama.cpp-build/bin .venv/bin/python research/quant_kernels.py [--work /tmp/quant_kernels] [--reps 3]

Needs ~5 GB of scratch space and ~10 minutes on two cores (most of it quantizing and benching).
"""

from __future__ import annotations

import argparse
import csv
import io
import subprocess
from pathlib import Path

from localspec.bench.peer import peer_binary
from localspec.convert import standin, synthetic
from localspec.convert.quant import quantize_file

ROOT = Path(__file__).resolve().parent.parent
SMOLLM2 = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
# ~1.2B, TinyLlama-like: d 2048, 22 layers, 32/8 heads, FFN 5632 (the draft part is unused)
REAL_SHAPED = synthetic.Recipe(synthetic.Shape(512, 8, 8, 2, 1408), widen=4, ff_mult=4.0, n_layer=22)
BATCHES = (1, 2, 4, 8)
QUANTS = ("q4_k_m", "q4_0")


def f16_models(work: Path) -> dict[str, Path]:
    """The two f16 shapes to quantize (kept between runs)."""
    shapes = {
        "stand-in (576 wide)": work / "standin-f16.gguf",
        "real-shaped (2048 wide)": work / "target-f16.gguf",
    }
    if not shapes["stand-in (576 wide)"].exists():
        standin._write_widened(
            SMOLLM2, shapes["stand-in (576 wide)"], r=standin.R, sigma=standin.SIGMA, seed=0, progress=None
        )
    if not shapes["real-shaped (2048 wide)"].exists():
        vocab = synthetic.write_vocab_only(SMOLLM2, work / "vocab.gguf")
        synthetic.write_f16(vocab, work, recipe=REAL_SHAPED, log=lambda _: None)
    return shapes


def ms_per_batch(model: Path, reps: int) -> dict[int, float]:
    args = [
        "-m",
        str(model),
        "-t",
        "2",
        "-p",
        ",".join(map(str, BATCHES)),
        "-n",
        "0",
        "-r",
        str(reps),
        "-o",
        "csv",
    ]
    out = subprocess.run([str(peer_binary("llama-bench")), *args], capture_output=True, text=True, check=True)
    rows = csv.DictReader(io.StringIO(out.stdout))
    return {int(r["n_prompt"]): int(r["avg_ns"]) / 1e6 for r in rows}  # one batch of n_prompt tokens


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, default=Path("/tmp/quant_kernels"))
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    a.work.mkdir(parents=True, exist_ok=True)
    print("| model | quant | " + " | ".join(f"{b} tok, ms" for b in BATCHES) + " | 4 tok / 1 tok |")
    print("|---|---|" + "--:|" * (len(BATCHES) + 1))
    for name, f16 in f16_models(a.work).items():
        for q in QUANTS:
            out = a.work / f"{f16.stem}-{q}.gguf"
            if not out.exists():
                quantize_file(f16, out, q)
            ms = ms_per_batch(out, a.reps)
            cells = " | ".join(f"{ms[b]:.0f}" for b in BATCHES)
            print(f"| {name} | {q} | {cells} | {ms[4] / ms[1]:.2f}× |", flush=True)


if __name__ == "__main__":
    main()
