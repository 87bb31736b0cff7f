"""The M-RoPE test pair: a random Qwen2-VL-style text model with SmolLM2's vocabulary and a random
Qwen2-VL projector for its width, for the tests of images on a 2-D position grid (no Qwen-VL model
can be downloaded where the tests run). Seeded: the same bytes every time.

    python -m tools.synthetic.mrope models/
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from localspec.convert.synthetic_mmproj import ProjectorShape, qwen2vl_shape, write_mmproj
from tools.synthetic.arch import Qwen2VLShape, write_qwen2vl

TEXT, MMPROJ = "qwen2vl-smollm2-test.gguf", "mmproj-qwen2vl-smollm2-test.gguf"
SMOLLM2 = "SmolLM2-135M-Instruct.Q4_1.gguf"  # the vocabulary's source


def write_pair(models: Path, dst: Path | None = None) -> tuple[Path, Path]:
    """Both files into dst (default: models/), the vocabulary read from models/'s SmolLM2."""
    dst = dst or models
    shape = Qwen2VLShape()
    text = write_qwen2vl(models / SMOLLM2, dst / TEXT, shape=shape, seed=7)
    proj = qwen2vl_shape(replace(ProjectorShape(), n_embd_text=shape.n_embd, out_std=1.0))
    return text, write_mmproj(dst / MMPROJ, shape=proj, seed=7)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", type=Path, help=f"the folder holding {SMOLLM2}; both files go there")
    for path in write_pair(ap.parse_args(argv).models):
        print(path)


if __name__ == "__main__":
    main()
