"""A synthetic pair at any scale, from a seed and SmolLM2's vocabulary (no weights travel).

For machines no real pair can reach (a GPU box without network): the draft is a random llama-
architecture model; the target is the draft's *noisy copy, widened without changing its function*:
  - noise: every attention/FFN matrix of the draft gets seeded Gaussian noise of relative size sigma,
    at the draft's own width, so target-vs-draft agreement (acceptance) depends on sigma and the
    draft, not on how far the target is widened (research/synthetic_acceptance.py measures it);
  - widening by w: the residual stream is tiled w times (RMSNorm of a tiled vector is the tiled norm),
    every head is copied w times (GQA groups keep their kv head), input columns are divided by w;
    each FFN neuron j is copied m_j times with its down-projection column divided by m_j;
  - deepening: identity layers (output projections zero) are inserted, so the target has the depth
    of a real model of its size.
The target then costs what a real model of its shape costs (the speed figures are real), while its
text is as meaningless as a random model's. Both are quantized by our own pipeline (Q4_K_M / Q8_0).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from gguf import GGUFReader, GGUFValueType, LlamaFileType

from localspec.config import toml
from localspec.config.pair_toml import write_pair_toml
from localspec.convert.gguf_stream import KV, PlannedTensor, copy_metadata, write_gguf
from localspec.errors import LocalspecError
from localspec.files import atomic_output, write_text_atomic
from localspec.gguf.compat import pair_facts

HEAD_DIM = 64
LOGIT_STD = 6.0  # spread of the draft's logits: peaked next-token distributions, like a trained model
SIGMA = 0.15  # relative noise on the target's matrices: greedy agreement ~0.7 (docs/gpu.md)
DRAFT_NAME, TARGET_NAME = "draft-q8_0.gguf", "target-q4_k_m.gguf"
F16 = {"draft": "draft-f16.gguf", "target": "target-f16.gguf"}
F16_DONE = "f16.json"  # written once both f16 files are complete


@dataclass(frozen=True)
class Shape:
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    n_ff: int


@dataclass(frozen=True)
class Recipe:
    draft: Shape
    widen: int  # residual stream, heads and kv heads x widen
    ff_mult: float  # target FFN width = draft's x ff_mult (neurons copied 1..ceil times)
    n_layer: int  # target depth (identity layers fill the difference)


# ~0.47B draft (Qwen2.5-0.5B-like) and a ~7.4B target (Mistral-7B-like: 4096 wide, 32 layers,
# FFN 14336); every matrix width is a multiple of 256 so Q4_K applies everywhere, as in real models
GPU = Recipe(Shape(1024, 24, 16, 4, 4096), widen=4, ff_mult=3.5, n_layer=32)
# seconds to build and run on two CPU cores: for `tools/gpu_check.sh --cpu` and the tests
CPU = Recipe(Shape(256, 4, 4, 2, 768), widen=2, ff_mult=2.0, n_layer=6)
RECIPES = {"gpu": GPU, "cpu": CPU}


def target_shape(r: Recipe) -> Shape:
    d = r.draft
    return Shape(
        d.n_embd * r.widen, r.n_layer, d.n_head * r.widen, d.n_head_kv * r.widen, round(d.n_ff * r.ff_mult)
    )


# ---------------------------------------------------------------------------------------------------
def write_vocab_only(src_gguf: Path, dst: Path) -> Path:
    """SmolLM2's tokenizer (every tokenizer.* key) as a GGUF without tensors: a few MB that travel."""
    reader = GGUFReader(src_gguf)
    kvs = [kv for kv in copy_metadata(reader) if kv.key.startswith("tokenizer.")]
    if not any(kv.key == "tokenizer.ggml.tokens" for kv in kvs):
        raise LocalspecError(f"{src_gguf} has no tokenizer to copy")
    with atomic_output(dst) as tmp:
        write_gguf(tmp, "llama", [KV("general.name", "SmolLM2 vocabulary", GGUFValueType.STRING), *kvs], [])
    return Path(dst)


def build_synthetic_pair(
    vocab_gguf: Path,
    out_dir: Path,
    *,
    recipe: Recipe = GPU,
    sigma: float = SIGMA,
    seed: int = 0,
    nthread: int | None = None,
    log: Callable[[str], None] = print,
) -> Path:
    """Draft (Q8_0), target (Q4_K_M) and pair.toml in out_dir; the same seed gives the same files."""
    write_f16(vocab_gguf, out_dir, recipe=recipe, sigma=sigma, seed=seed, log=log)
    return quantize_pair(out_dir, nthread=nthread, log=log)


def recipe_info(recipe: Recipe, sigma: float, seed: int) -> dict:
    """What pair.toml records of how the pair was made (and what says an existing one is this one)."""
    return {
        "synthetic": True,
        "seed": seed,
        "sigma": sigma,
        "draft_shape": asdict(recipe.draft),
        "target_shape": asdict(target_shape(recipe)),
    }


def is_built(out_dir: Path, recipe: Recipe, sigma: float = SIGMA, seed: int = 0) -> bool:
    """A complete pair of this recipe is already in out_dir (a warm machine keeps it between calls)."""
    toml_path = Path(out_dir) / "pair.toml"
    if not toml_path.exists() or not all((Path(out_dir) / n).exists() for n in (DRAFT_NAME, TARGET_NAME)):
        return False
    pair = toml.read_toml(toml_path).get("pair", {})
    return all(pair.get(k) == v for k, v in recipe_info(recipe, sigma, seed).items())


def write_f16(
    vocab_gguf: Path,
    out_dir: Path,
    *,
    recipe: Recipe = GPU,
    sigma: float = SIGMA,
    seed: int = 0,
    log: Callable[[str], None] = print,
) -> None:
    """The f16 draft and target (numpy only: this can run while llama.cpp is still being built).
    A marker holding the recipe says they are complete; an identical recipe is not written twice."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    info = recipe_info(recipe, sigma, seed)
    marker = out_dir / F16_DONE
    if (
        marker.exists()
        and json.loads(marker.read_text()) == info
        and all((out_dir / n).exists() for n in F16)
    ):
        log("f16     already written for this recipe")
        return
    marker.unlink(missing_ok=True)
    reader = GGUFReader(vocab_gguf)
    tok_kvs = [kv for kv in copy_metadata(reader) if kv.key.startswith("tokenizer.")]
    n_vocab = len(reader.fields["tokenizer.ggml.tokens"].data)
    weights = _DraftWeights(recipe.draft, n_vocab, seed, sigma)
    for role, shape, plan in (
        ("draft", recipe.draft, weights.draft_plan()),
        ("target", target_shape(recipe), weights.target_plan(recipe)),
    ):
        t = time.perf_counter()
        with atomic_output(out_dir / F16[role]) as tmp:
            write_gguf(tmp, "llama", _metadata(shape, n_vocab, role, tok_kvs), plan)
        n = sum(int(np.prod(p.shape)) for p in plan)
        log(f"{role:<7} {n / 1e9:.2f}B params {_fmt(shape)}: f16 in {time.perf_counter() - t:.0f} s")
    write_text_atomic(marker, json.dumps(info))  # the marker says the f16 files are complete


def quantize_pair(out_dir: Path, *, nthread: int | None = None, log: Callable[[str], None] = print) -> Path:
    """Quantize write_f16's files with llama.cpp (target Q4_K_M, draft Q8_0), then write pair.toml."""
    from localspec.convert.quant import quantize_file  # noqa: PLC0415

    out_dir = Path(out_dir)
    marker = out_dir / F16_DONE
    if not marker.exists():
        raise LocalspecError(f"no complete f16 models in {out_dir} (write_f16 first)")
    info = json.loads(marker.read_text())
    files = {"draft": (out_dir / DRAFT_NAME, "q8_0"), "target": (out_dir / TARGET_NAME, "q4_k_m")}
    for role, (dst, ftype) in files.items():
        t = time.perf_counter()
        quantize_file(out_dir / F16[role], dst, ftype, nthread=nthread)
        log(f"{role:<7} {ftype} {dst.stat().st_size / 2**30:.2f} GiB in {time.perf_counter() - t:.0f} s")
    target, draft = files["target"][0], files["draft"][0]
    written = write_pair_toml(
        out_dir, target, draft, info={**pair_facts(target, draft), **info}, runtime={"draft_max": "auto"}
    )
    marker.unlink()
    for name in F16.values():
        (out_dir / name).unlink(missing_ok=True)
    return written


def _fmt(s: Shape) -> str:
    return f"(d {s.n_embd}, {s.n_layer} layers, {s.n_head}/{s.n_head_kv} heads, ff {s.n_ff})"


def _metadata(s: Shape, n_vocab: int, role: str, tok_kvs: list[KV]) -> list[KV]:
    u32, f32, st = GGUFValueType.UINT32, GGUFValueType.FLOAT32, GGUFValueType.STRING
    return [
        KV("general.name", f"synthetic {role} {_fmt(s)}", st),
        KV("general.file_type", int(LlamaFileType.MOSTLY_F16), u32),
        KV("llama.vocab_size", n_vocab, u32),
        KV("llama.context_length", 8192, u32),
        KV("llama.embedding_length", s.n_embd, u32),
        KV("llama.block_count", s.n_layer, u32),
        KV("llama.feed_forward_length", s.n_ff, u32),
        KV("llama.attention.head_count", s.n_head, u32),
        KV("llama.attention.head_count_kv", s.n_head_kv, u32),
        KV("llama.rope.dimension_count", HEAD_DIM, u32),
        KV("llama.rope.freq_base", 100000.0, f32),
        KV("llama.attention.layer_norm_rms_epsilon", 1e-5, f32),
        *tok_kvs,
    ]


# ---------------------------------------------------------------------------------------------------
class _DraftWeights:
    """The draft's tensors, each drawn on demand from (seed, tensor index): order-free and repeatable."""

    def __init__(self, s: Shape, n_vocab: int, seed: int, sigma: float) -> None:
        if s.n_embd != s.n_head * HEAD_DIM or s.n_head % s.n_head_kv:
            raise LocalspecError(f"bad synthetic shape {s}")
        self.s, self.n_vocab, self.seed, self.sigma = s, n_vocab, seed, sigma
        d, kv = s.n_embd, s.n_head_kv * HEAD_DIM
        resid = 1 / np.sqrt(2 * s.n_layer)  # output projections: the residual stream stays O(1)
        # (name, numpy shape, std); norms are ones
        self.specs: list[tuple[str, tuple[int, ...], float]] = [
            ("token_embd.weight", (n_vocab, d), 1.0),
            ("output_norm.weight", (d,), 0.0),
            ("output.weight", (n_vocab, d), LOGIT_STD / np.sqrt(d)),
        ]
        for i in range(s.n_layer):
            b = f"blk.{i}."
            self.specs += [
                (b + "attn_norm.weight", (d,), 0.0),
                (b + "attn_q.weight", (d, d), 1 / np.sqrt(d)),
                (b + "attn_k.weight", (kv, d), 1 / np.sqrt(d)),
                (b + "attn_v.weight", (kv, d), 1 / np.sqrt(d)),
                (b + "attn_output.weight", (d, d), resid / np.sqrt(d)),
                (b + "ffn_norm.weight", (d,), 0.0),
                (b + "ffn_gate.weight", (s.n_ff, d), 1 / np.sqrt(d)),
                (b + "ffn_up.weight", (s.n_ff, d), 1 / np.sqrt(d)),
                (b + "ffn_down.weight", (d, s.n_ff), resid / np.sqrt(s.n_ff)),
            ]
        self.index = {name: i for i, (name, _, _) in enumerate(self.specs)}

    def get(self, name: str, *, noisy: bool = False) -> np.ndarray:
        i = self.index[name]
        _, shape, std = self.specs[i]
        if len(shape) == 1:
            return np.ones(shape, np.float32)
        w = np.random.default_rng([self.seed, i]).standard_normal(shape, dtype=np.float32)
        w *= std
        if noisy and name.startswith("blk.") and self.sigma > 0:  # embeddings and output stay shared
            noise = np.random.default_rng([self.seed, i, 1]).standard_normal(shape, dtype=np.float32)
            w += noise * (self.sigma * std)
        return w

    def draft_plan(self) -> list[PlannedTensor]:
        return [
            PlannedTensor(
                n, shape, np.dtype(np.float16 if len(shape) == 2 else np.float32), lambda n=n: self.get(n)
            )
            for n, shape, _ in self.specs
        ]

    def target_plan(self, r: Recipe) -> list[PlannedTensor]:
        """The noisy draft widened by r.widen / r.ff_mult and deepened to r.n_layer (identity layers)."""
        s, w = self.s, r.widen
        if r.n_layer < s.n_layer:
            raise LocalspecError("the target cannot have fewer layers than the draft")
        # FFN neuron j copied m[j] times, as evenly as possible
        n_ff = round(s.n_ff * r.ff_mult)
        m = np.full(s.n_ff, n_ff // s.n_ff, dtype=np.int64)
        m[: n_ff - int(m.sum())] += 1
        # draft layer i sits at target layer place[i]; the others are identity copies of their left one
        place = {round(i * r.n_layer / s.n_layer): i for i in range(s.n_layer)}
        source, last = [], 0
        for j in range(r.n_layer):
            last = place.get(j, last)
            source.append((last, j in place))
        plan = []
        for name, shape, _ in self.specs[:3]:
            plan.append(self._wide(name, shape, w, m, role=name.split(".")[0]))
        for j, (i, real) in enumerate(source):
            for name, shape, _ in self.specs[3 + 9 * i : 3 + 9 * (i + 1)]:
                plan.append(
                    self._wide(
                        name,
                        shape,
                        w,
                        m,
                        role=name.split(".")[2],
                        out=f"blk.{j}.",
                        zero=not real and name.split(".")[2] in ("attn_output", "ffn_down"),
                    )
                )
        return plan

    def _wide(
        self,
        name: str,
        shape: tuple[int, ...],
        w: int,
        m: np.ndarray,
        *,
        role: str,
        out: str = "",
        zero: bool = False,
    ) -> PlannedTensor:
        n_ff = int(np.sum(m))
        if len(shape) == 1:
            new_shape: tuple[int, ...] = (shape[0] * w,)
        elif role in ("token_embd", "output"):  # rows are the vocabulary
            new_shape = (shape[0], shape[1] * w)
        elif role in ("ffn_gate", "ffn_up"):
            new_shape = (n_ff, shape[1] * w)
        elif role == "ffn_down":
            new_shape = (shape[0] * w, n_ff)
        else:
            new_shape = (shape[0] * w, shape[1] * w)
        target_name = out + name.split(".", 2)[2] if out else name

        def produce() -> np.ndarray:
            if zero:
                return np.zeros(new_shape, np.float16)
            x = self.get(name, noisy=True)
            if x.ndim == 1:
                return np.tile(x, w)
            if role == "ffn_down":
                x = (x / m.astype(np.float32)).astype(np.float16)
                return np.tile(np.repeat(x, m, axis=1), (w, 1))
            if role != "token_embd":
                x /= w  # the w copies of each input add up
            x = x.astype(np.float16)
            if role in ("ffn_gate", "ffn_up"):
                x = np.repeat(x, m, axis=0)
            elif role not in ("token_embd", "output"):
                x = np.tile(x, (w, 1))
            return np.tile(x, (1, w))

        return PlannedTensor(
            target_name, new_shape, np.dtype(np.float16 if len(new_shape) == 2 else np.float32), produce
        )
