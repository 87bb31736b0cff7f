"""Does the history source (--history-tokens) pay where traffic repeats, and cost nothing where it
does not? Two engines over one model, history on and off, fed the same requests in turn (the order
alternates per request, so a neighbour's load falls on both sides alike):

  agent    the same system prompt and tool list every time, a sequence of related asks (an agent's
           turns re-send its context and re-emit the same calls and edits)
  one-off  unrelated prompts, each seen once

interleaved one agent turn, one one-off. Greedy: both sides must give the same text (lossless), or
part only at a near-tie (llama.cpp's batches are not bit-identical; counted).
Prints, per kind, the target passes per request off over on (load-independent: fewer passes is
what history buys), decode tokens/s on over off (the median of per-request ratios: wall time, as
noisy as the machine) and the share of output the history drafted.

    .venv/bin/python research/history_ab.py --target models/SmolLM2-135M-Instruct.Q4_1.gguf --rounds 12
    .venv/bin/python research/history_ab.py --pair models/default --rounds 8
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from localspec import llama
from localspec.config.settings import Settings
from localspec.engine import Engine

SYSTEM = (
    "You are a coding agent. Answer with one tool call as JSON: "
    '{"tool": NAME, "args": {...}}. Tools: read_file(path), write_file(path, text), '
    "run_tests(pattern), search(query), list_dir(path)."
)
MARGIN = 0.25  # logits: a flip within this is llama.cpp's near-tie (tests/models/test_spec_real.py)
ASKS = [
    "Read the file src/app.py.",
    "Now run the tests matching test_app.",
    "Read the file src/util.py.",
    "Search for the function parse_config.",
    "Write src/util.py with a docstring added.",
    "Run the tests matching test_util.",
    "List the directory src.",
    "Read the file src/config.py.",
]
ONE_OFF = [
    "Write a haiku about autumn rain.",
    "Explain what a hash table is in two sentences.",
    "Name three rivers in Africa.",
    "What is 17 times 23? Show the steps.",
    "Give a short recipe for pancakes.",
    "Describe the colour blue to someone who cannot see.",
    "List four uses of a paperclip.",
    "Why is the sky dark at night?",
    "Translate 'good morning' into French, Spanish and German.",
    "Summarise the plot of Cinderella in one paragraph.",
    "What does a compiler do?",
    "Suggest a name for a grey cat.",
]


def chat(kind: str, i: int, asks: int = len(ASKS)) -> list[dict]:
    if kind == "agent":
        return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": ASKS[i % asks]}]
    return [{"role": "user", "content": ONE_OFF[i % len(ONE_OFF)]}]


def _parted_at_a_tie(eng: Engine, messages: list[dict], a: list[int], b: list[int]) -> bool:
    """Whether two greedy outputs part (False: equal), where the target's two tokens there are
    within MARGIN logits under teacher forcing: llama.cpp is not batch-invariant, so two sides
    verifying different batches may flip a near-tie (docs/sampling.md). A wider gap is a bug."""
    i = next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), None)
    if i is None:
        return False
    ids = eng.tokenize(messages, chat_mode=True)
    with llama.Context(eng.target, n_ctx=len(ids) + i + 8, n_batch=512) as ctx:
        row = ctx.eval(ids + b[:i], 0, 1)[0]
    gap = abs(float(row[a[i]] - row[b[i]]))
    assert gap <= MARGIN, f"history changed a greedy output: token {i} parts by {gap:.3f} logits"
    return True


def run(args: argparse.Namespace) -> dict:
    model = dict(pair=args.pair, lookup="on") if args.pair else dict(target=args.target, lookup="only")
    base = dict(
        **model, tuner_cache=False, no_log=True, n_ctx=args.n_ctx, draft_max=args.draft_max, trace=args.trace
    )
    if args.cost_bound is not None:  # 0: a fixed K stays K (the bound moves it by wall time, noisily)
        base["cost_bound"] = args.cost_bound
    rows: dict[str, list[dict]] = {kind: [] for kind in args.kinds.split(",")}
    with (
        Engine(Settings.load(**base, history_tokens=args.history)) as on,
        Engine(Settings.load(**base)) as off,
    ):
        # one calibration for both sides: two taken at load differ by the machine's noise, and the
        # tuner would then choose apart for reasons that are not the history's
        off.tuners.known = on.tuners.known
        for i in range(args.rounds):
            for kind in rows:
                # the first to run may be the slower (or the faster): each goes first every other request
                engines = [("on", on), ("off", off)] if i % 2 == 0 else [("off", off), ("on", on)]
                got = {}
                for side, eng in engines:
                    r = eng.generate(
                        chat(kind, i), chat=True, max_tokens=args.tokens, temperature=0.0, seed=0
                    )
                    got[side] = r
                tie = _parted_at_a_tie(on, chat(kind, i), list(got["on"].tokens), list(got["off"].tokens))
                h = got["on"].stats.sources.get("history", {"drafted": 0, "accepted": 0})
                rows[kind].append({
                    "i": i, "on_tok_s": got["on"].stats.decode_tok_s, "off_tok_s": got["off"].stats.decode_tok_s,
                    "n": got["on"].stats.n_generated, "history": h,
                    "on_passes": got["on"].stats.rounds + got["on"].stats.plain_steps,
                    "off_passes": got["off"].stats.rounds + got["off"].stats.plain_steps, "tie": tie,
                    **({"trace": {s: got[s].stats.rounds_trace for s in got}} if args.trace else {}),
                })  # fmt: skip
    out = {}
    for kind, rs in rows.items():
        warm = rs[1:]  # the first request of a kind has nothing to remember
        ratios = [r["on_tok_s"] / r["off_tok_s"] for r in warm if r["off_tok_s"]]
        out[kind] = {
            "requests": len(warm),
            "passes_ratio": sum(r["off_passes"] for r in warm) / max(sum(r["on_passes"] for r in warm), 1),
            "tok_s_ratio_median": statistics.median(ratios),
            "tok_s_ratio_min": min(ratios),
            "history_accepted_share": sum(r["history"]["accepted"] for r in warm) / max(sum(r["n"] for r in warm), 1),
            "history_drafted": sum(r["history"]["drafted"] for r in warm),
            "parted_at_a_near_tie": sum(r["tie"] for r in rs),
        }  # fmt: skip
    return {"rows": rows, "summary": out}


def main() -> None:
    ap = argparse.ArgumentParser()
    model = ap.add_mutually_exclusive_group(required=True)
    model.add_argument("--target", type=Path, help="one GGUF: lookup drafts only")
    model.add_argument("--pair", type=Path, help="a pair folder (models/default): the draft model too")
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--n-ctx", type=int, default=1024)
    ap.add_argument("--history", type=int, default=65536, help="--history-tokens on the 'on' side")
    ap.add_argument(
        "--asks", type=int, default=len(ASKS), help="agent asks cycled over (fewer: more repeats)"
    )
    ap.add_argument("--draft-max", default="auto", help="auto (the tuner decides) or a fixed K")
    ap.add_argument("--kinds", default="agent,one-off", help="agent, one-off or both (interleaved)")
    ap.add_argument("--cost-bound", type=float, help="--cost-bound on both sides (default: the setting's)")
    ap.add_argument("--trace", action="store_true", help="keep each request's rounds (K, drafts by source)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    got = run(args)
    if args.out:
        args.out.write_text(json.dumps(got, indent=1))
    print(json.dumps(got["summary"], indent=1))


if __name__ == "__main__":
    main()
