"""How often a synthetic draft agrees with its noisy target, by sigma (how SIGMA in
tools/synthetic/pair.py was chosen; docs/gpu.md has the table).

The target's widening does not change its function, so the draft is compared with a same-width
noisy copy: both evaluate one English paragraph in a batch (f16, no quantization); reported are the
argmax agreement (greedy acceptance) and sum(min(p, q)) (speculative sampling's acceptance at T=1).

  python research/synthetic_acceptance.py --recipe gpu --sigmas 0.1,0.2,0.3   # minutes on 2 cores
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
from gguf import GGUFReader

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout: tools.synthetic

from localspec import llama  # noqa: E402
from localspec.convert.gguf_stream import copy_metadata, write_gguf  # noqa: E402
from tools.synthetic.pair import RECIPES, Recipe, _DraftWeights, _metadata  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

TEXT = (
    "The history of the lighthouse begins in the ancient world, where fires were lit on hilltops to guide "
    "ships into harbour. Later, towers were built to raise the light higher, so that sailors could see it "
    "from further away. In the nineteenth century, the Fresnel lens made the beams far brighter, and keepers "
    "lived in small houses beside the towers, trimming wicks and winding the clockwork that turned the lamp."
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recipe", choices=RECIPES, default="gpu")
    ap.add_argument("--sigmas", default="0.1,0.2,0.3")
    ap.add_argument("--vocab", type=Path, default=ROOT / "build" / "gpu-bundle" / "smollm2-vocab.gguf")
    args = ap.parse_args()
    d = RECIPES[args.recipe].draft
    same_width = Recipe(d, widen=1, ff_mult=1.0, n_layer=d.n_layer)
    tok = [kv for kv in copy_metadata(GGUFReader(args.vocab)) if kv.key.startswith("tokenizer.")]
    n_vocab = len(GGUFReader(args.vocab).fields["tokenizer.ggml.tokens"].data)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "m.gguf"
        write_gguf(
            path, "llama", _metadata(d, n_vocab, "draft", tok), _DraftWeights(d, n_vocab, 0, 0).draft_plan()
        )
        q = softmax(logits(path))
        for sigma in (float(s) for s in args.sigmas.split(",")):
            w = _DraftWeights(d, n_vocab, 0, sigma)
            write_gguf(path, "llama", _metadata(d, n_vocab, "target", tok), w.target_plan(same_width))
            p = softmax(logits(path))
            agree = (p.argmax(1) == q.argmax(1)).mean()
            print(
                f"{args.recipe} sigma={sigma}: greedy agreement {agree:.2f}, "
                f"T=1 acceptance {np.minimum(p, q).sum(1).mean():.2f}",
                flush=True,
            )


def logits(path: Path) -> np.ndarray:
    with llama.Model(path) as m, llama.Context(m, n_ctx=256) as ctx:
        ids = m.tokenize(TEXT)
        return ctx.eval(ids, 0, len(ids)).copy()


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


if __name__ == "__main__":
    main()
