"""A small random vision projector (`mmproj` GGUF) for SmolLM2's width: what llama.cpp's mtmd loads
and evaluates like a real one, for tests of the image path (no vision model can be downloaded here).

LLaVA's layout (clip.cpp's `mlp` projector): a ViT of `n_layer` blocks over 16x16 patches (llava
reads the second-to-last block's output), then mm.0 -> GELU -> mm.2 into the language model's width.
The weights are seeded Gaussians, so the embeddings mean nothing, but different pixels give
different embeddings and the same pixels the same ones - what the plumbing tests need.

`--kind qwen2vl` writes Qwen2-VL's layout instead (clip.cpp's `qwen2vl_merger`): the same ViT blocks
with 2-D RoPE and no position table, two patch convolutions (a still image goes through both), and
every 2x2 patches merged into one row by mm.0 -> GELU -> mm.2. Over a text model with M-RoPE (Qwen-VL's
`qwen2vl`, tools/synthetic/arch.py) mtmd places its rows on a 2-D grid of positions.

    localspec models        (or: python -m localspec.convert.synthetic_mmproj models/mmproj-smollm2-test.gguf)
    python -m tools.synthetic.mrope models/     (the qwen2vl pair: text model and its projector)
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from gguf import GGUFValueType, LlamaFileType

from localspec.convert.gguf_stream import KV, write_gguf
from localspec.convert.seeded import F32, SeededWeights
from localspec.files import atomic_output

FILE_NAME = "mmproj-smollm2-test.gguf"  # what `localspec models` (`make models`) writes into models/


@dataclass(frozen=True)
class ProjectorShape:
    n_embd_text: int = 576  # the language model's width (SmolLM2-135M)
    n_embd: int = 64  # the vision tower's width
    n_layer: int = 2  # llava evaluates the first n_layer - 1 blocks
    n_head: int = 4
    n_ff: int = 128
    n_hidden: int = 256  # the projector MLP's hidden width
    image_size: int = 64  # every image is resized to this square
    patch_size: int = 16  # (64 / 16)^2 = 16 tokens an image
    # spread of the projected rows: large enough that SmolLM2's answer depends on the image (at 0.05,
    # its token embeddings' scale, the default system prompt drowned them out)
    out_std: float = 0.5
    kind: str = "mlp"  # or "qwen2vl_merger" (patch_size 8: a 64 px image is 4 x 4 merged rows)


def _kvs(s: ProjectorShape) -> list[KV]:
    u32, f32, st, b = GGUFValueType.UINT32, GGUFValueType.FLOAT32, GGUFValueType.STRING, GGUFValueType.BOOL
    arr = GGUFValueType.ARRAY
    return [
        KV("general.name", "localspec synthetic projector", st),
        KV("general.description", "random weights: for tests of the image path, not for seeing", st),
        KV("general.file_type", int(LlamaFileType.MOSTLY_F16), u32),
        KV("clip.has_vision_encoder", True, b),
        KV("clip.projector_type", s.kind, st),
        KV("clip.use_gelu", True, b),
        KV("clip.vision.embedding_length", s.n_embd, u32),
        KV("clip.vision.feed_forward_length", s.n_ff, u32),
        KV("clip.vision.block_count", s.n_layer, u32),
        KV("clip.vision.projection_dim", s.n_embd_text, u32),
        KV("clip.vision.attention.head_count", s.n_head, u32),
        KV("clip.vision.attention.layer_norm_epsilon", 1e-6, f32),
        KV("clip.vision.image_size", s.image_size, u32),
        KV("clip.vision.patch_size", s.patch_size, u32),
        KV("clip.vision.image_mean", [0.5, 0.5, 0.5], arr, f32),
        KV("clip.vision.image_std", [0.5, 0.5, 0.5], arr, f32),
    ]


def _tensors(w: SeededWeights, s: ProjectorShape) -> None:
    d, n_pos = s.n_embd, (s.image_size // s.patch_size) ** 2
    merger = s.kind == "qwen2vl_merger"
    patch = (d, 3, s.patch_size, s.patch_size)
    w.add("v.patch_embd.weight", patch, 1 / np.sqrt(3 * s.patch_size**2))
    if merger:  # positions come from 2-D RoPE; a second frame's convolution, no bias (clip.cpp asserts)
        w.add("v.patch_embd.weight.1", patch, 1 / np.sqrt(3 * s.patch_size**2))
    else:
        w.add("v.patch_embd.bias", (d,), 0.02, F32)
        w.add("v.position_embd.weight", (n_pos, d), 0.5, F32)
    w.const("v.pre_ln.weight", (d,), 1.0)
    w.const("v.pre_ln.bias", (d,), 0.0)
    for i in range(s.n_layer):
        b = f"v.blk.{i}."
        for part in ("attn_q", "attn_k", "attn_v", "attn_out"):
            w.add(b + part + ".weight", (d, d), 1 / np.sqrt(d))
            w.const(b + part + ".bias", (d,), 0.0)
        for ln in ("ln1", "ln2"):
            w.const(b + ln + ".weight", (d,), 1.0)
            w.const(b + ln + ".bias", (d,), 0.0)
        w.add(
            b + "ffn_up.weight", (s.n_ff, d), 1 / np.sqrt(d)
        )  # n_ff != d: clip.cpp reads the names as given
        w.const(b + "ffn_up.bias", (s.n_ff,), 0.0)
        w.add(b + "ffn_down.weight", (d, s.n_ff), 1 / np.sqrt(s.n_ff))
        w.const(b + "ffn_down.bias", (d,), 0.0)
    d_in = 4 * d if merger else d  # the merger reads 2x2 patches as one row
    w.add("mm.0.weight", (s.n_hidden, d_in), 1 / np.sqrt(d_in))
    w.const("mm.0.bias", (s.n_hidden,), 0.0)
    w.add("mm.2.weight", (s.n_embd_text, s.n_hidden), s.out_std * 2 / np.sqrt(s.n_hidden))
    w.const("mm.2.bias", (s.n_embd_text,), 0.0)


def write_mmproj(dst: Path, *, shape: ProjectorShape = ProjectorShape(), seed: int = 0) -> Path:
    """A random LLaVA-style projector GGUF at dst (f16 matrices, f32 vectors), written atomically."""
    w = SeededWeights(seed, perturb=0.0)
    _tensors(w, shape)
    with atomic_output(Path(dst)) as tmp:
        write_gguf(tmp, "clip", _kvs(shape), w.plan)
    return Path(dst)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dst", type=Path, help=f"where to write it (e.g. models/{FILE_NAME})")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--n-embd-text", type=int, default=ProjectorShape.n_embd_text, help="the text model's width"
    )
    ap.add_argument("--kind", choices=["mlp", "qwen2vl"], default="mlp", help="LLaVA's MLP or Qwen2-VL's")
    args = ap.parse_args(argv)
    shape = ProjectorShape(n_embd_text=args.n_embd_text)
    shape = qwen2vl_shape(shape) if args.kind == "qwen2vl" else shape
    print(write_mmproj(args.dst, shape=shape, seed=args.seed))


def qwen2vl_shape(shape: ProjectorShape = ProjectorShape()) -> ProjectorShape:
    """Qwen2-VL's merger at the test size: 8 px patches, so a 64 px image is 16 rows on a 4 x 4 grid."""
    return replace(shape, kind="qwen2vl_merger", patch_size=8)


if __name__ == "__main__":
    main()
