"""Per-kind figures from `localspec bench --json` files: every configuration as a ratio to plain
decoding on the same prompts (pooled tokens over pooled seconds, per kind and overall), decode and
end to end, with acceptance by draft position; llama.cpp's side (--peer) against our plain and our
best fixed K. Used for the real pair's tables in docs/benchmarks.md (issue #56).

    python research/real_pair_figures.py bench-out/real.json [more.json ...] [--markdown out.md]
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

OURS, PEER = "localspec", "llama.cpp"


def load(paths: list[Path]) -> list[dict]:
    """Every sample of every file, tagged with its side."""
    out = []
    for p in paths:
        for t in json.loads(p.read_text())["tables"]:
            out += [{**s, "side": OURS} for s in t.get("samples", [])]
            out += [{**s, "side": PEER} for s in t.get("llamacpp_samples", [])]
    return out


def pooled(samples: list[dict], field: str) -> float:
    ms = sum(s[field] for s in samples)
    return sum(s["decode_tokens"] for s in samples) / (ms / 1e3) if ms > 0 else 0.0


def by_pos(samples: list[dict], depth: int = 4) -> str:
    drafted, kept = [0] * depth, [0] * depth
    for s in samples:
        for i, (d, a) in enumerate(zip(s.get("drafted_by_pos", ()), s.get("accepted_by_pos", ()))):
            if i < depth:
                drafted[i] += d
                kept[i] += a
    return " / ".join(f"{k / d:.0%}" if d else "-" for d, k in zip(drafted, kept))


def tables(samples: list[dict]) -> str:
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for s in samples:
        groups[(s["side"], s["config"], s["kind"])].append(s)
        groups[(s["side"], s["config"], "all")].append(s)
    kinds = sorted({k for _, _, k in groups} - {"all"}) + ["all"]
    configs = list(dict.fromkeys((side, c) for side, c, _ in groups))
    lines = []
    for field, title in (("decode_ms", "decode"), ("total_ms", "end to end (prompt pass included)")):
        lines += [f"### Speed over our plain decoding, {title}", ""]
        lines += ["| config | " + " | ".join(kinds) + " |", "|---|" + "---|" * len(kinds)]
        for side, c in configs:
            if side == PEER and field == "total_ms":
                continue  # llama-bench times no prompt pass beside its decode
            cells = []
            for k in kinds:
                base = groups.get((OURS, "plain", k))
                mine = groups.get((side, c, k))
                if not base or not mine:
                    cells.append("-")
                    continue
                cells.append(f"{pooled(mine, field) / pooled(base, field):.2f}x")
            label = c if side == OURS else f"llama.cpp {c}"
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        plain = " · ".join(f"{k} {pooled(groups[(OURS, 'plain', k)], field):.2f}" for k in kinds)
        lines += ["", f"Our plain, tok/s: {plain}", ""]
    lines += ["### Acceptance by draft position (1 / 2 / 3 / 4), pooled", ""]
    lines += ["| config | " + " | ".join(kinds) + " |", "|---|" + "---|" * len(kinds)]
    for side, c in configs:
        if side == OURS and c != "plain":
            lines.append(f"| {c} | " + " | ".join(by_pos(groups.get((side, c, k), [])) for k in kinds) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json", type=Path, nargs="+")
    ap.add_argument("--markdown", type=Path)
    args = ap.parse_args()
    text = tables(load(args.json))
    print(text)
    if args.markdown:
        args.markdown.write_text(text)


if __name__ == "__main__":
    main()
