"""Peak memory and throughput of `localspec convert` on a synthetic multi-GB Llama checkpoint.

Writes random bf16 weights (Llama-shaped, sharded, with an index) to --workdir, converts them with
the CLI in a child process and reports the child's peak RSS (VmHWM) and GB/s. Peak RSS should
stay far below the checkpoint size: tensors stream from the shards to the GGUF in row blocks.

    .venv/bin/python research/bench_convert.py                    # ~3.3 GB checkpoint, f16 output
    .venv/bin/python research/bench_convert.py --layers 8 --type bf16
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from localspec.convert.safetensors_io import f32_to_bf16
from tests.fixtures_hf import write_byte_tokenizer, write_safetensors  # shared with the tests


def build_checkpoint(folder: Path, *, layers: int, hidden: int, ffn: int, vocab: int, shard_gb: float) -> int:
    folder.mkdir(parents=True, exist_ok=True)
    n_head, n_kv, hd = hidden // 128, max(1, hidden // 512), 128
    rng = np.random.default_rng(0)

    def make(shape: tuple[int, ...]) -> np.ndarray:  # bf16 bits for matrices, f32 ones for norms
        if len(shape) == 1:
            return np.ones(shape, dtype=np.float32)
        return f32_to_bf16(rng.standard_normal(shape, dtype=np.float32) * 0.02)

    names: list[tuple[str, tuple]] = [("model.embed_tokens.weight", (vocab, hidden))]
    for i in range(layers):
        p = f"model.layers.{i}."
        names += [
            (p + "input_layernorm.weight", (hidden,)),
            (p + "post_attention_layernorm.weight", (hidden,)),
            (p + "self_attn.q_proj.weight", (n_head * hd, hidden)),
            (p + "self_attn.k_proj.weight", (n_kv * hd, hidden)),
            (p + "self_attn.v_proj.weight", (n_kv * hd, hidden)),
            (p + "self_attn.o_proj.weight", (hidden, n_head * hd)),
            (p + "mlp.gate_proj.weight", (ffn, hidden)),
            (p + "mlp.up_proj.weight", (ffn, hidden)),
            (p + "mlp.down_proj.weight", (hidden, ffn)),
        ]
    names += [("model.norm.weight", (hidden,)), ("lm_head.weight", (vocab, hidden))]
    plan: list[list[tuple[str, tuple]]] = [[]]  # shards by size first, so names can say "-of-N"
    size = 0
    for name, shape in names:
        if size > shard_gb * 1e9:
            plan.append([])
            size = 0
        plan[-1].append((name, shape))
        size += int(np.prod(shape)) * 2
    weight_map, total = {}, 0
    for i, entries in enumerate(plan):  # one shard in memory at a time
        fname = f"model-{i + 1:05d}-of-{len(plan):05d}.safetensors"
        tensors = {name: make(shape) for name, shape in entries}
        write_safetensors(folder / fname, tensors)
        weight_map.update(dict.fromkeys(tensors, fname))
        total += sum(d.nbytes for d in tensors.values())
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    (folder / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLM"],
                "hidden_size": hidden,
                "intermediate_size": ffn,
                "num_hidden_layers": layers,
                "num_attention_heads": n_head,
                "num_key_value_heads": n_kv,
                "vocab_size": vocab,
                "rms_norm_eps": 1e-5,
                "rope_theta": 500000.0,
                "max_position_embeddings": 8192,
                "tie_word_embeddings": False,
            }
        )
    )
    write_byte_tokenizer(folder)
    return total


def watch_peak_rss(proc: subprocess.Popen) -> tuple[int, float]:
    """The child's peak RSS and (nearly all of) its CPU seconds. Not getrusage(RUSAGE_CHILDREN): a forked child briefly shares this
    process's pages before exec, so it would report the benchmark's own memory. Linux keeps the
    peak since exec as VmHWM; elsewhere RSS is sampled."""
    import psutil

    status, peak, cpu = Path(f"/proc/{proc.pid}/status"), 0, 0.0
    p = psutil.Process(proc.pid)
    while proc.poll() is None:
        try:
            hwm = (
                [ln for ln in status.read_text().splitlines() if ln.startswith("VmHWM:")]
                if status.exists()
                else []
            )
            peak = max(peak, int(hwm[0].split()[1]) * 1024 if hwm else p.memory_info().rss)
            t = p.cpu_times()
            cpu = t.user + t.system
        except (OSError, psutil.Error, IndexError, ValueError):
            pass
        time.sleep(0.05)
    return peak, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/localspec-bench-convert"))
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--ffn", type=int, default=8192)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--shard-gb", type=float, default=1.0)
    ap.add_argument("--type", default="f16")
    ap.add_argument("--keep", action="store_true", help="keep the checkpoint and output")
    args = ap.parse_args()
    src, out = args.workdir / "hf", args.workdir / f"out-{args.type}.gguf"
    t0 = time.perf_counter()
    nbytes = build_checkpoint(
        src, layers=args.layers, hidden=args.hidden, ffn=args.ffn, vocab=args.vocab, shard_gb=args.shard_gb
    )
    print(
        f"checkpoint: {nbytes / 1e9:.2f} GB bf16 in {len(list(src.glob('*.safetensors')))} shards "
        f"(built in {time.perf_counter() - t0:.0f} s)"
    )
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "localspec", "convert", str(src), "--out", str(out), "--type", args.type]
    log = args.workdir / "convert.log"  # a file, not a pipe: tqdm's output would fill a pipe nobody reads
    with log.open("w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
        peak, cpu = watch_peak_rss(proc)
    dt = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"convert failed: {log.read_text().strip().splitlines()[-1]}")
    print(
        f"convert --type {args.type}: {dt:.1f} s wall ({cpu:.1f} s CPU), {nbytes / 1e9 / dt:.2f} GB/s read "
        f"({nbytes / 1e9 / max(cpu, 1e-9):.2f} GB per CPU-second), "
        f"{out.stat().st_size / 1e9:.2f} GB written; peak RSS {peak / 1e6:.0f} MB "
        f"({100 * peak / nbytes:.1f}% of the checkpoint)"
    )
    if not args.keep:
        shutil.rmtree(args.workdir)


if __name__ == "__main__":
    main()
