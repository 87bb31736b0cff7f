"""What rollback costs on a recurrent memory, and what an MTP draft costs, on this machine.

On synthetic qwen35 (hybrid) and mamba GGUFs with SmolLM2's vocabulary, per sequence and round:
- rs (n_rs_seq): the verify decode of K+1 tokens with and without the snapshots llama.cpp writes
  inside the graph, and the seq_rm that rolls back within it;
- snapshot: saving the recurrent state before the verify, restoring it after a rejection, and the
  replay (the accepted tokens decoded again in the next round);
- MTP: ms per drafted token of the qwen35 MTP head, and per fed target token, against SmolLM2's
  ms per drafted token as a draft model;
- prompt checkpoints: saving the state where a ~400-token prompt's prefill ended, and going back
  there (a regenerated answer) by restoring it, against re-prefilling the prompt.
`--wide` adds a qwen35 whose recurrent layers have Qwen3.5-27B's state shape (48 value heads of
128x128), so the copy cost per MB can be scaled to a real model's state.

  python tools/hybrid_costs.py [--wide] [--threads N] [--cpu-time]

--cpu-time times with the process's CPU clock instead of the wall clock: on a machine other jobs
load, with --threads 1, it is what a decode costs without the waiting (snapshot and restore times,
from the rollback's own counters, stay wall-clock).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from localspec.llama import Context, Model  # noqa: E402
from localspec.llama.mtp import MtpDrafter  # noqa: E402
from tools.synthetic.arch import MambaShape, Qwen35Shape, write_mamba, write_qwen35  # noqa: E402

SMOL = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
PROMPT = "The history of the lighthouse begins in the ancient world, where fires were lit on hilltops"
TRIES = 9
CLOCK = [time.perf_counter]  # --cpu-time: time.process_time


def floor(fn, tries: int = TRIES) -> float:  # noqa: ANN001
    best = float("inf")
    for _ in range(tries):
        t0 = CLOCK[0]()
        fn()
        best = min(best, CLOCK[0]() - t0)
    return best


def verify_costs(model: Model, n_rs: int, threads: int | None, ks=(1, 2, 4, 8)) -> dict:
    """ms of a verify of K+1 tokens, of the rollback after it (keeping half), and of the replay."""
    out = {}
    with Context(model, n_ctx=512, n_rs_seq=n_rs, n_threads=threads) as ctx:
        prompt = model.tokenize(PROMPT)
        tok, base = prompt[-1], len(prompt)
        ctx.eval(prompt, 0, 1)
        for k in ks:
            verify, rollback, replay = [], [], []
            for _ in range(TRIES):
                ctx.truncate(base)  # settled: this round's tokens are tentative
                clock = CLOCK[0]
                t0 = clock()
                ctx.eval([tok] * (k + 1), base, k + 1)
                t1 = clock()
                keep = base + 1 + k // 2
                ctx.truncate(keep)
                t2 = clock()
                if ctx.past(0) < keep:  # a restored snapshot: the kept tokens are decoded again
                    ctx.eval([tok] * (keep - ctx.past(0)), ctx.past(0), 1)
                t3 = clock()
                verify.append(t1 - t0)
                rollback.append(t2 - t1)
                replay.append(t3 - t2)
                base = keep
            out[k] = tuple(min(x) * 1e3 for x in (verify, rollback, replay))
        s = ctx.rollback_stats
        out["kind"] = ctx.rollback
        out["state_kb"] = s.snapshot_bytes / 1024
        out["snapshot_ms"] = s.snapshot_s / max(s.snapshots, 1) * 1e3
        out["restore_ms"] = s.restore_s / max(s.restores, 1) * 1e3
    return out


def checkpoint_costs(model: Model, threads: int | None) -> tuple[float, float, float, int]:
    """ms to save a prompt checkpoint (wall clock), to go back to it after 16 generated tokens, and
    to re-prefill the prompt instead; and the prompt's length."""
    prompt = model.tokenize(" ".join([PROMPT] * 20))[:400]
    n = len(prompt)
    with Context(model, n_ctx=1024, n_threads=threads) as ctx:
        ctx.eval(prompt[:-4], 0, 1)
        save = float("inf")
        for i in range(3):  # three checkpoints (each a new buffer, as in use), the last at the end
            ctx.eval(prompt[n - 4 + i : n - 3 + i], n - 4 + i, 1)
            t0 = time.perf_counter()
            ctx.checkpoint(0)
            save = min(save, time.perf_counter() - t0)

        restore = float("inf")
        for _ in range(TRIES):
            ctx.eval(prompt[-1:] * 16, n - 1, 1)  # an answer, then a regenerate: back to the checkpoint
            t0 = CLOCK[0]()
            ctx.truncate(n - 1)
            restore = min(restore, CLOCK[0]() - t0)
            assert ctx.past(0) == n - 1

        def again() -> None:
            ctx.truncate(0)
            ctx.eval(prompt[:-1], 0, 1)

        reprefill = floor(again, 3)
    return save * 1e3, restore * 1e3, reprefill * 1e3, n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--wide", action="store_true", help="also a qwen35 with Qwen3.5-27B's recurrent state shape"
    )
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--cpu-time", action="store_true", help="the process's CPU clock (use with --threads 1)")
    args = ap.parse_args()
    if args.cpu_time:
        CLOCK[0] = time.process_time
    tmp = Path(tempfile.mkdtemp(prefix="hybrid-costs-"))
    models = {
        "qwen35": write_qwen35(SMOL, tmp / "qwen35.gguf", shape=Qwen35Shape(nextn=1), mix=0.3),
        "mamba": write_mamba(SMOL, tmp / "mamba.gguf", shape=MambaShape()),
    }
    if args.wide:  # 3 recurrent layers of 48 x 128 x 128 (Qwen3.5-27B has 48 of them)
        wide = Qwen35Shape(n_embd=512, n_head=4, d_state=128, n_k_heads=16, n_v_heads=48)
        models["qwen35-wide"] = write_qwen35(SMOL, tmp / "wide.gguf", shape=wide)
    print("verify / rollback / replay, ms per round (K drafted, K/2 kept), best of", TRIES)
    for name, path in models.items():
        with Model(path) as m:
            for n_rs in (8, 0) if name != "mamba" else (0,):
                c = verify_costs(m, n_rs, args.threads)
                print(
                    f"{name:<12} {c['kind']:<8} state {c['state_kb']:8.1f} KiB  snapshot {c['snapshot_ms']:.3f} ms"
                    f"  restore {c['restore_ms']:.3f} ms"
                )
                for k in (1, 2, 4, 8):
                    v, r, p = c[k]
                    print(f"    K={k}: verify {v:7.3f}  rollback {r:6.3f}  replay {p:7.3f}")
    print("prompt checkpoints: save / go back to it / re-prefill instead, ms")
    for name, path in models.items():
        with Model(path) as m:
            save, restore, reprefill, n = checkpoint_costs(m, args.threads)
            print(
                f"{name:<12} {n} tokens: save {save:.3f}  restore {restore:.3f}  re-prefill {reprefill:.1f}"
            )
    with (
        Model(models["qwen35"], model_params={"load_mtp": True}) as m,
        Context(m, n_ctx=512, n_threads=args.threads) as tgt,
    ):
        mtp = MtpDrafter(tgt)
        prompt = m.tokenize(PROMPT)
        t0 = time.perf_counter()
        tgt.eval(prompt[:-1], 0, 1)
        fed = mtp.feed_s  # wall clock, as the prompt pass below
        plain = time.perf_counter() - t0
        n = len(prompt)

        def steps() -> None:
            mtp.truncate(n - 1)
            for i in range(16):
                mtp.eval_batch([(0, [prompt[-1]], n - 1 + i, 1)])

        per = floor(steps, 3) / 16 * 1e3
        print(
            f"MTP head (qwen35 synthetic): {per:.3f} ms per drafted token; feeding the prompt: "
            f"{fed / (n - 1) * 1e3:.3f} ms per target token ({fed / plain:.0%} of the prompt pass)"
        )
        mtp.close()
    with Model(SMOL) as m, Context(m, n_ctx=512, n_threads=args.threads) as d:
        prompt = m.tokenize(PROMPT)
        d.eval(prompt[:-1], 0, 1)
        n = len(prompt)

        def steps() -> None:
            d.truncate(n - 1)
            for i in range(16):
                d.eval_batch([(0, [prompt[-1]], n - 1 + i, 1)])

        print(f"SmolLM2-135M Q4_1 draft model: {floor(steps, 3) / 16 * 1e3:.3f} ms per drafted token")


if __name__ == "__main__":
    main()
