"""How much memory a pair needs, computed from GGUF headers before anything is loaded.

Pure functions: a `ModelSpec` is what the header says (hyper-parameters, tensor sizes by layer), a
`ModelPlan` adds the runtime choices (n_ctx, KV type, batch sizes), and `verdict()` compares a
`PairPlan` with free device memory and, when it does not fit, says what would - with numbers.
The formulas follow llama.cpp 0.3.36's allocator; tests/test_memory_plan.py checks them against the
sizes llama.cpp logs for the real models.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from localspec.errors import LocalspecError
from localspec.gguf.file import GGUFHeader, read_header

MiB = 1 << 20
GiB = 1 << 30
# CUDA/cuBLAS workspaces and allocator fragmentation that llama.cpp does not report.
HEADROOM_BYTES = 512 * MiB
CTX_PAD = 256  # llama.cpp rounds n_ctx (and the SWA cache) up to a multiple of 256
KV_GGML_TYPES = {
    "f32": GGMLQuantizationType.F32,
    "f16": GGMLQuantizationType.F16,
    "q8_0": GGMLQuantizationType.Q8_0,
    "q4_0": GGMLQuantizationType.Q4_0,
}
# llama.cpp keeps the input layer in system memory, whatever n_gpu_layers says.
INPUT_TENSORS = frozenset(
    {"token_embd.weight", "position_embd.weight", "token_types.weight", "per_layer_token_embd.weight"}
)
# Architectures whose SWA layer pattern is built into llama.cpp rather than stored in the GGUF:
# a period n means n-1 sliding-window layers, then one full-attention layer.
SWA_PERIOD = {"gemma2": 2, "gemma3": 6, "cohere2": 4, "gpt-oss": 2, "exaone4": 4}


def fmt_bytes(n: float) -> str:
    return f"{n / GiB:.2f} GiB" if abs(n) >= GiB else f"{n / MiB:.1f} MiB"


def _pad(n: int, to: int = CTX_PAD) -> int:
    return (n + to - 1) // to * to


def _row_bytes(n_elements: int, ggml_type: GGMLQuantizationType) -> int:
    block, size = GGML_QUANT_SIZES[ggml_type]
    return (n_elements + block - 1) // block * size


# ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ModelSpec:
    """What a GGUF header says about memory, independent of how it will be run."""

    path: Path
    arch: str
    name: str
    n_layer: int
    n_embd: int
    n_ff: int
    n_head: int
    n_vocab: int
    kv_dims: tuple[tuple[int, int], ...]  # per layer: (K, V) elements per cached token
    swa_layers: tuple[bool, ...]
    n_swa: int
    layer_bytes: tuple[int, ...]  # weights of blk.i.*
    input_bytes: int  # token embeddings etc.: always in system memory
    output_bytes: int  # output head and norms, including a tied head duplicated onto the device
    file_weights_bytes: int  # every tensor once, as mapped from the file
    n_params: int
    notes: tuple[str, ...] = ()


def read_spec(path: str | Path) -> ModelSpec:
    """Read a GGUF header (arrays only where a per-layer value needs them) into a ModelSpec."""
    h = read_header(path)
    wanted = tuple(k for k in h.array_lengths if k.startswith(f"{h.arch}."))
    if wanted:  # per-layer head counts or an SWA pattern stored as an array
        h = read_header(path, load_arrays=wanted)
    return spec_from_header(h)


def spec_from_header(h: GGUFHeader) -> ModelSpec:
    arch = h.arch
    n_layer = _int(h, "{arch}.block_count")
    n_embd = _int(h, "{arch}.embedding_length")
    n_head_l = _per_layer(h, "{arch}.attention.head_count", n_layer, None)
    n_head_kv_l = _per_layer(h, "{arch}.attention.head_count_kv", n_layer, n_head_l)
    n_head = max(n_head_l) if n_head_l else 0
    head_k = int(h.get("{arch}.attention.key_length", n_embd // max(1, n_head)))
    head_v = int(h.get("{arch}.attention.value_length", head_k))
    n_ff_raw = h.get("{arch}.feed_forward_length", 0)
    n_ff = max(n_ff_raw) if isinstance(n_ff_raw, list) else int(n_ff_raw or 0)
    notes: list[str] = []
    if any(k.startswith(f"{arch}.ssm.") or k.startswith(f"{arch}.wkv") for k in h.metadata):
        notes.append("recurrent layers: their state is not counted")

    layer_bytes = [0] * n_layer
    input_bytes = output_bytes = 0
    names = set()
    for t in h.tensors:
        names.add(t.name)
        if t.name.startswith("blk."):
            i = int(t.name.split(".")[1])
            if i < n_layer:
                layer_bytes[i] += t.n_bytes
                continue
        if t.name in INPUT_TENSORS:
            input_bytes += t.n_bytes
        else:
            output_bytes += t.n_bytes
    embd = next((t for t in h.tensors if t.name == "token_embd.weight"), None)
    if "output.weight" not in names and embd is not None:
        output_bytes += embd.n_bytes  # tied head: llama.cpp loads a second copy onto the output device
    n_vocab = int(
        h.get("{arch}.vocab_size", 0)
        or h.array_lengths.get("tokenizer.ggml.tokens", 0)
        or len(h.metadata.get("tokenizer.ggml.tokens", ()) or ())
        or (embd.shape[1] if embd else 0)
    )

    n_swa = int(h.get("{arch}.attention.sliding_window", 0) or 0)
    return ModelSpec(
        path=h.path,
        arch=arch,
        name=str(h.metadata.get("general.name", h.path.stem)),
        n_layer=n_layer,
        n_embd=n_embd,
        n_ff=n_ff,
        n_head=n_head,
        n_vocab=n_vocab,
        kv_dims=tuple((head_k * kv, head_v * kv) for kv in n_head_kv_l),
        swa_layers=_swa_layers(h, n_layer, n_swa),
        n_swa=n_swa,
        layer_bytes=tuple(layer_bytes),
        input_bytes=input_bytes,
        output_bytes=output_bytes,
        file_weights_bytes=h.weights_bytes,
        n_params=sum(t.n_elements for t in h.tensors),
        notes=tuple(notes),
    )


def _int(h: GGUFHeader, key: str) -> int:
    v = h.get(key)
    if v is None:
        raise LocalspecError(f"{h.path}: GGUF metadata lacks {key.replace('{arch}', h.arch)}")
    return int(v)


def _per_layer(h: GGUFHeader, key: str, n_layer: int, default: list[int] | None) -> list[int]:
    v = h.get(key)
    if v is None:
        if default is None:
            raise LocalspecError(f"{h.path}: GGUF metadata lacks {key.replace('{arch}', h.arch)}")
        return list(default)
    if isinstance(v, list):
        if len(v) != n_layer:
            raise LocalspecError(
                f"{h.path}: {key.replace('{arch}', h.arch)} has {len(v)} values for {n_layer} layers"
            )
        return [int(x) for x in v]
    return [int(v)] * n_layer


def _swa_layers(h: GGUFHeader, n_layer: int, n_swa: int) -> tuple[bool, ...]:
    if n_swa <= 0:
        return (False,) * n_layer
    pattern: Any = h.get("{arch}.attention.sliding_window_pattern", SWA_PERIOD.get(h.arch))
    if isinstance(pattern, list):
        return tuple(bool(x) for x in pattern[:n_layer])
    if not pattern:  # a window llama.cpp does not apply to this architecture
        return (False,) * n_layer
    n = int(pattern)
    return tuple(i % n < n - 1 for i in range(n_layer))


# ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Runtime:
    """The settings that change memory. swa_full mirrors llama.cpp's default (backend.Context keeps
    it): sliding-window layers then cache all n_ctx tokens, which rollback needs anyway."""

    n_ctx: int = 4096
    n_batch: int = 512
    n_ubatch: int = 512
    kv_type: str = "f16"
    flash_attn: str = "auto"
    swa_full: bool = True
    n_seq: int = 1  # slots (--parallel): the unified KV cache holds n_ctx cells for each

    @classmethod
    def from_settings(cls, s: Any) -> "Runtime":
        return cls(
            n_ctx=s.n_ctx,
            n_batch=s.n_batch,
            n_ubatch=s.n_ubatch,
            kv_type=s.kv_type,
            flash_attn=s.flash_attn,
            n_seq=getattr(s, "parallel", 1),
        )


@dataclass(frozen=True)
class ModelPlan:
    role: str
    spec: ModelSpec
    rt: Runtime
    n_cells: int
    swa_cells: int
    kv_layer_bytes: tuple[int, ...]  # per layer, K + V
    compute_bytes: int

    @property
    def kv_bytes(self) -> int:
        return sum(self.kv_layer_bytes)

    @property
    def device_weights_bytes(self) -> int:
        """Weights on the accelerator when every layer is offloaded."""
        return sum(self.spec.layer_bytes) + self.spec.output_bytes

    @property
    def device_bytes(self) -> int:
        return self.device_weights_bytes + self.kv_bytes + self.compute_bytes

    @property
    def host_bytes(self) -> int:
        """System memory when fully offloaded: the input layer (mapped from the file)."""
        return self.spec.input_bytes

    @property
    def cpu_bytes(self) -> int:
        """Everything in system memory (CPU-only run): the mapped file, KV cache and compute."""
        return self.spec.file_weights_bytes + self.kv_bytes + self.compute_bytes

    def partial_device_bytes(self, n_gpu_layers: int) -> int:
        """Device memory with only the last `n_gpu_layers` repeating layers offloaded (llama.cpp's
        order); the output head stays on the CPU then."""
        k = max(0, min(n_gpu_layers, self.spec.n_layer))
        first = self.spec.n_layer - k
        return sum(self.spec.layer_bytes[first:]) + sum(self.kv_layer_bytes[first:]) + self.compute_bytes

    def to_dict(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "path": str(self.spec.path),
            "arch": self.spec.arch,
            "name": self.spec.name,
            "n_layer": self.spec.n_layer,
            "n_params": self.spec.n_params,
            "n_cells": self.n_cells,
            "swa_cells": self.swa_cells if any(self.spec.swa_layers) else None,
            "weights_file_bytes": self.spec.file_weights_bytes,
            "weights_device_bytes": self.device_weights_bytes,
            "weights_host_bytes": self.host_bytes,
            "kv_bytes": self.kv_bytes,
            "compute_bytes": self.compute_bytes,
            "device_bytes": self.device_bytes,
            "notes": list(self.spec.notes),
        }


def plan_model(spec: ModelSpec, rt: Runtime, role: str = "target") -> ModelPlan:
    if rt.kv_type not in KV_GGML_TYPES:
        raise LocalspecError(
            f"unknown KV cache type {rt.kv_type!r}; choose one of {', '.join(KV_GGML_TYPES)}"
        )
    kv_t = KV_GGML_TYPES[rt.kv_type]
    n_cells = _pad(rt.n_ctx * rt.n_seq)  # every slot can fill its n_ctx (backend.Context)
    # the SWA cache keeps the window plus one micro-batch unless it is full-size
    n_ub = min(rt.n_ubatch, rt.n_batch, rt.n_ctx * rt.n_seq)  # llama.cpp clamps batches to its n_ctx
    swa_cells = n_cells if rt.swa_full else min(n_cells, _pad(spec.n_swa + n_ub))
    kv = tuple(
        (swa_cells if swa else n_cells) * (_row_bytes(k, kv_t) + _row_bytes(v, kv_t))
        for (k, v), swa in zip(spec.kv_dims, spec.swa_layers)
    )
    return ModelPlan(role, spec, rt, n_cells, swa_cells, kv, _compute_bytes(spec, rt, n_cells, n_ub))


def _compute_bytes(spec: ModelSpec, rt: Runtime, n_cells: int, n_ub: int) -> int:
    """The compute buffer is the peak of the worst-case graph, f32 throughout. Two peaks compete:
    the logits of a full micro-batch (plus the last hidden states), and attention - without flash
    attention the n_ctx x n_ubatch x n_head score matrix and its mask, with it a small tile."""
    f32 = 4
    n_kv_embd = max((k for k, _ in spec.kv_dims), default=spec.n_embd)
    logits = n_ub * (spec.n_vocab + 2 * spec.n_embd) * f32
    ffn = n_ub * (3 * spec.n_ff + 2 * spec.n_embd) * f32
    if rt.flash_attn == "off":
        attn = n_cells * n_ub * (spec.n_head + 1) * f32 + n_ub * (4 * spec.n_embd + 5 * n_kv_embd) * f32
    else:  # "auto" turns flash attention on wherever the backend supports it
        attn = n_cells * n_ub * 2 + n_ub * (4 * spec.n_embd + 5 * n_kv_embd) * f32
    return max(logits, ffn, attn)


# ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PairPlan:
    target: ModelPlan
    draft: ModelPlan | None
    headroom_bytes: int = HEADROOM_BYTES

    @property
    def models(self) -> tuple[ModelPlan, ...]:
        return (self.target,) + ((self.draft,) if self.draft else ())

    @property
    def rt(self) -> Runtime:
        return self.target.rt

    @property
    def device_bytes(self) -> int:
        """Accelerator memory for a full offload of both models, headroom included."""
        return sum(m.device_bytes for m in self.models) + self.headroom_bytes

    @property
    def cpu_bytes(self) -> int:
        return sum(m.cpu_bytes for m in self.models)

    def with_runtime(self, **changes: Any) -> "PairPlan":
        rt = dataclasses.replace(self.rt, **changes)
        draft = plan_model(self.draft.spec, rt, "draft") if self.draft else None
        return PairPlan(plan_model(self.target.spec, rt, "target"), draft, self.headroom_bytes)

    def without_draft(self) -> "PairPlan":
        return PairPlan(self.target, None, self.headroom_bytes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "n_ctx": self.rt.n_ctx,
            "n_seq": self.rt.n_seq,
            "kv_type": self.rt.kv_type,
            "flash_attn": self.rt.flash_attn,
            "n_ubatch": self.rt.n_ubatch,
            "swa_full": self.rt.swa_full,
            "models": [m.to_dict() for m in self.models],
            "headroom_bytes": self.headroom_bytes,
            "device_bytes": self.device_bytes,
            "cpu_bytes": self.cpu_bytes,
        }


def plan_pair(target: ModelSpec, draft: ModelSpec | None, rt: Runtime) -> PairPlan:
    return PairPlan(plan_model(target, rt, "target"), plan_model(draft, rt, "draft") if draft else None)


def gpu_layers_that_fit(plan: PairPlan, free_bytes: int) -> int:
    """Target repeating layers that fit next to a fully offloaded draft (0 when even the draft does
    not fit)."""
    budget = free_bytes - plan.headroom_bytes - (plan.draft.device_bytes if plan.draft else 0)
    best = 0
    for k in range(plan.target.spec.n_layer + 1):
        if plan.target.partial_device_bytes(k) <= budget:
            best = k
    return best


# ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Fix:
    flags: str  # what to pass, e.g. "--n-ctx 14336" or a sentence when no flag does it
    device_bytes: int  # what the pair would then need
    note: str = ""

    def __str__(self) -> str:
        return f"{self.flags} (needs {fmt_bytes(self.device_bytes)}{'; ' + self.note if self.note else ''})"


@dataclass(frozen=True)
class Verdict:
    fits: bool
    need_bytes: int
    free_bytes: int
    device: str
    fixes: tuple[Fix, ...] = ()
    breakdown: str = ""

    def message(self) -> str:
        head = (
            f"the pair needs {fmt_bytes(self.need_bytes)} on {self.device}, "
            f"{fmt_bytes(self.free_bytes)} is free"
        )
        if self.fits:
            return f"full offload fits: {head}"
        fixes = "; ".join(str(f) for f in self.fixes) or "no setting makes it fit"
        return f"full offload does not fit: {head} ({self.breakdown}). To fit: {fixes}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "fits": self.fits,
            "need_bytes": self.need_bytes,
            "free_bytes": self.free_bytes,
            "device": self.device,
            "breakdown": self.breakdown,
            "fixes": [{"flags": f.flags, "device_bytes": f.device_bytes, "note": f.note} for f in self.fixes],
        }


def breakdown(plan: PairPlan) -> str:
    parts = [
        f"{m.role}: weights {fmt_bytes(m.device_weights_bytes)} + KV {fmt_bytes(m.kv_bytes)} + compute "
        f"{fmt_bytes(m.compute_bytes)}"
        for m in plan.models
    ]
    return "; ".join(parts + [f"headroom {fmt_bytes(plan.headroom_bytes)}"])


def verdict(plan: PairPlan, free_bytes: int, device: str = "the GPU") -> Verdict:
    need = plan.device_bytes
    if need <= free_bytes:
        return Verdict(True, need, free_bytes, device, (), breakdown(plan))
    return Verdict(False, need, free_bytes, device, tuple(_fixes(plan, free_bytes)), breakdown(plan))


def _fixes(plan: PairPlan, free: int) -> list[Fix]:
    rt = plan.rt
    fixes: list[Fix] = []
    n_ctx = _largest_ctx(plan, free)
    if n_ctx:
        fixes.append(Fix(f"--n-ctx {n_ctx}", plan.with_runtime(n_ctx=n_ctx).device_bytes))
    if rt.kv_type in ("f16", "f32"):
        q8 = plan.with_runtime(kv_type="q8_0")
        fa = " --flash-attn on" if rt.flash_attn == "off" else ""  # a quantized V cache needs it
        if q8.device_bytes <= free:
            fixes.append(
                Fix(
                    f"--kv-type q8_0{fa}",
                    q8.device_bytes,
                    f"KV {fmt_bytes(_kv(plan))} -> {fmt_bytes(_kv(q8))}",
                )
            )
        else:
            q8_ctx = _largest_ctx(q8, free)
            if q8_ctx and q8_ctx > (n_ctx or 0):
                fixes.append(
                    Fix(f"--kv-type q8_0{fa} --n-ctx {q8_ctx}", q8.with_runtime(n_ctx=q8_ctx).device_bytes)
                )
    if plan.draft is not None:
        alone = plan.without_draft().device_bytes
        if alone <= free:
            room = free - alone
            fixes.append(
                Fix(
                    f"a smaller draft: at most {fmt_bytes(room)} on the device "
                    f"(this one needs {fmt_bytes(plan.draft.device_bytes)})",
                    alone + room,
                )
            )
    if not fixes:
        fixes.append(_smaller_target(plan, free))
    return fixes


def _kv(plan: PairPlan) -> int:
    return sum(m.kv_bytes for m in plan.models)


def _largest_ctx(plan: PairPlan, free: int, floor: int = 512) -> int | None:
    """The largest n_ctx below the planned one that fits (a multiple of 1024 when >= 1024)."""
    if plan.with_runtime(n_ctx=floor).device_bytes > free:
        return None
    lo, hi = floor, plan.rt.n_ctx  # lo fits, hi does not
    while hi - lo > CTX_PAD:
        mid = (lo + hi) // 2 // CTX_PAD * CTX_PAD
        if plan.with_runtime(n_ctx=mid).device_bytes <= free:
            lo = mid
        else:
            hi = mid
    return lo // 1024 * 1024 if lo >= 1024 else lo


def _smaller_target(plan: PairPlan, free: int) -> Fix:
    """Even a minimal context does not fit: say how small the target's weights must get."""
    small = plan.without_draft().with_runtime(n_ctx=512)
    room = free - (small.device_bytes - small.target.device_weights_bytes)
    n_params = max(1, plan.target.spec.n_params)
    now_bpw = 8 * plan.target.device_weights_bytes / n_params
    if room <= 0:
        return Fix(
            "a smaller target model (not even its KV cache and compute buffer fit)", small.device_bytes
        )
    return Fix(
        f"a smaller target: its weights must shrink from {fmt_bytes(plan.target.device_weights_bytes)} "
        f"to {fmt_bytes(room)} (about {8 * room / n_params:.1f} bits/weight, now {now_bpw:.1f})",
        small.device_bytes - small.target.device_weights_bytes + room,
        "with --n-ctx 512 and no draft",
    )
