"""How much memory a pair needs, computed from GGUF headers before anything is loaded.

Pure functions: a `ModelSpec` is what the header says (hyper-parameters, tensor sizes by layer), a
`ModelPlan` adds the runtime choices (n_ctx, KV type, batch sizes), and `memory_fit.verdict()`
compares a `PairPlan` with free device memory.
The formulas follow llama.cpp 0.3.36's allocator; tests/models/test_memory_plan.py checks them against
the sizes llama.cpp logs for the real models, tests/models/test_memory_plan_recurrent.py for the
synthetic hybrid and recurrent ones (KV on the attention layers only; the recurrent state per slot).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from localspec.config.settings import AUTO_K_MAX
from localspec.errors import LocalspecError
from localspec.gguf.file import GGUFHeader, read_header
from localspec.gguf.memory_kind import HYBRID, RECURRENT, RS_ROLLBACK
from localspec.gguf.projector import ProjectorFacts

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
# recurrent states an rs-capable target keeps per sequence (llama.cpp's n_rs_seq): the most drafts
# one verify can roll back without a copy, each costing one more copy of the recurrent state
RS_KEEP = 8
# prompt checkpoints of a recurrent memory (llama/recurrent.py), in RAM: at most this many per slot,
# and this many bytes per context (llama-server keeps 32 per slot; a 27B hybrid's state is ~150 MB)
CHECKPOINTS_PER_SLOT = 8
CHECKPOINT_CAP_BYTES = 2 * GiB
STATE_BYTES = 4  # llama.cpp keeps recurrent state (R: conv / token shift, S: ssm / wkv) in f32
# hybrids whose attention layers are every n-th (no per-layer KV head counts): llama.cpp's default n
ATTN_INTERVAL = {"bailingmoe3": 8}
EMBED_SEQS = 16  # inputs one pass of the embeddings context carries (llama/embed.py), a sequence each


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
    recurrent_layers: tuple[bool, ...] = ()  # per layer: holds recurrent state (llama.cpp's is_recurrent)
    state_dims: tuple[int, int] = (0, 0)  # per recurrent layer and cell: (R, S) f32 elements
    rs_rollback: bool = False  # the arch keeps n_rs_seq states (llm_arch_supports_rs_rollback)

    @property
    def state_layer_bytes(self) -> int:
        """One sequence's recurrent state in one recurrent layer."""
        return sum(self.state_dims) * STATE_BYTES


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
    recurrent = _recurrent_layers(h, n_layer)
    if any(k.startswith(f"{arch}.kda") for k in h.metadata):
        notes.append("Kimi delta-attention layers: their state is not counted")
    if not _has_attention(arch):  # llama.cpp gives a pure recurrent model no KV cache
        n_head_kv_l = [0] * n_layer
    elif arch != "falcon-h1":  # falcon-h1 runs attention and SSM side by side in every layer
        n_head_kv_l = [0 if r else kv for kv, r in zip(n_head_kv_l, recurrent)]
    nextn = int(h.get("{arch}.nextn_predict_layers", 0) or 0)
    if nextn:  # MTP blocks: no cache in the target's memory (an MTP context has its own, one layer)
        n_head_kv_l[n_layer - nextn :] = [0] * nextn
        recurrent = recurrent[: n_layer - nextn] + (False,) * nextn

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
        recurrent_layers=recurrent,
        state_dims=_state_dims(h, n_embd) if any(recurrent) else (0, 0),
        rs_rollback=arch in RS_ROLLBACK,
    )


def _has_attention(arch: str) -> bool:
    return arch not in RECURRENT


def _recurrent_layers(h: GGUFHeader, n_layer: int) -> tuple[bool, ...]:
    """Which layers hold recurrent state, as llama.cpp's loader marks them (recurrent_layer_arr)."""
    if h.arch in RECURRENT or h.arch == "falcon-h1":
        return (True,) * n_layer
    if h.arch not in HYBRID:
        return (False,) * n_layer
    kv = h.get("{arch}.attention.head_count_kv")
    if isinstance(kv, list):  # granite-h, nemotron-h, lfm2, jamba: no KV heads = a recurrent layer
        return tuple(int(x) == 0 for x in kv[:n_layer])
    every = int(h.get("{arch}.full_attention_interval", ATTN_INTERVAL.get(h.arch, 4)) or 4)
    return tuple((i + 1) % every != 0 for i in range(n_layer))  # qwen3next, qwen35: every 4th attends


def _state_dims(h: GGUFHeader, n_embd: int) -> tuple[int, int]:
    """(R, S) elements per layer and sequence: llama_hparams::n_embd_r() and n_embd_s()."""
    wkv = int(h.get("{arch}.wkv.head_size", 0) or 0)
    if wkv:  # RWKV: token shifts, and the wkv state
        return int(h.get("{arch}.token_shift_count", 2) or 2) * n_embd, n_embd * wkv
    d_state = int(h.get("{arch}.ssm.state_size", 0) or 0)
    d_inner = int(h.get("{arch}.ssm.inner_size", 0) or 0)
    l_cache = int(h.get("{arch}.shortconv.l_cache", 0) or 0)
    if l_cache:  # LFM2's short convolutions
        return n_embd * (l_cache - 1), d_state * d_inner
    d_conv = int(h.get("{arch}.ssm.conv_kernel", 0) or 0)
    n_group = int(h.get("{arch}.ssm.group_count", 0) or 0)
    # the conv window minus the column shifted out; Mamba's (or the gated delta net's) ssm state
    return max(d_conv - 1, 0) * (d_inner + 2 * n_group * d_state), d_state * d_inner


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
    n_rs_seq: int = 0  # the target's requested n_rs_seq (0 on archs without rs rollback; drafts 0)
    embed_ctx: int = 0  # the embeddings context's tokens (serve --embed-ctx; 0: none)

    @classmethod
    def from_settings(cls, s: Any) -> "Runtime":
        return cls(
            n_ctx=s.n_ctx,
            n_batch=s.n_batch,
            n_ubatch=s.n_ubatch,
            kv_type=s.kv_type,
            flash_attn=s.flash_attn,
            n_seq=getattr(s, "parallel", 1),
            n_rs_seq=rs_keep(s),
            embed_ctx=getattr(s, "embed_ctx", 0),
        )


def rs_keep(s: Any) -> int:
    """The n_rs_seq the loader asks for the target: one state per draft a verify may roll back."""
    drafts = s.drafter is not None or s.uses_lookup
    return min(s.draft_k or AUTO_K_MAX, s.n_batch - 1, RS_KEEP) if drafts else 0


@dataclass(frozen=True)
class ModelPlan:
    role: str
    spec: ModelSpec
    rt: Runtime
    n_cells: int
    swa_cells: int
    kv_layer_bytes: tuple[int, ...]  # per layer, K + V
    compute_bytes: int
    state_cells: int = 0  # recurrent state copies llama.cpp allocates: slots x (1 + n_rs_seq)
    state_layer_bytes: tuple[int, ...] = ()  # per layer, R + S of every cell (device memory)
    snapshot_bytes: int = 0  # saved states a snapshot rollback keeps in RAM: one per slot
    checkpoint_bytes: int = 0  # prompt checkpoints in RAM at most (recurrent memories)

    @property
    def kv_bytes(self) -> int:
        return sum(self.kv_layer_bytes)

    @property
    def state_bytes(self) -> int:
        return sum(self.state_layer_bytes)

    @property
    def device_weights_bytes(self) -> int:
        """Weights on the accelerator when every layer is offloaded."""
        return sum(self.spec.layer_bytes) + self.spec.output_bytes

    @property
    def device_bytes(self) -> int:
        return self.device_weights_bytes + self.kv_bytes + self.state_bytes + self.compute_bytes

    @property
    def host_bytes(self) -> int:
        """System memory when fully offloaded: the input layer (mapped from the file), and the
        recurrent states saved in RAM (rollback snapshots, prompt checkpoints at most)."""
        return self.spec.input_bytes + self.snapshot_bytes + self.checkpoint_bytes

    @property
    def cpu_bytes(self) -> int:
        """Everything in system memory (CPU-only run): the mapped file, KV cache, recurrent state
        (and its saved copies) and compute."""
        return (
            self.spec.file_weights_bytes + self.kv_bytes + self.state_bytes + self.snapshot_bytes
            + self.checkpoint_bytes + self.compute_bytes
        )  # fmt: skip

    def partial_device_bytes(self, n_gpu_layers: int) -> int:
        """Device memory with only the last `n_gpu_layers` repeating layers offloaded (llama.cpp's
        order); the output head stays on the CPU then."""
        k = max(0, min(n_gpu_layers, self.spec.n_layer))
        first = self.spec.n_layer - k
        cache = sum(self.kv_layer_bytes[first:]) + sum(self.state_layer_bytes[first:])
        return sum(self.spec.layer_bytes[first:]) + cache + self.compute_bytes

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
            "weights_host_bytes": self.spec.input_bytes,
            "host_bytes": self.host_bytes,
            "kv_bytes": self.kv_bytes,
            "state_bytes": self.state_bytes,
            "state_cells": self.state_cells,
            "snapshot_bytes": self.snapshot_bytes,
            "checkpoint_bytes": self.checkpoint_bytes,
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
    # llama.cpp: one recurrent cell per slot, times 1 + n_rs_seq where the arch keeps them (targets)
    n_rs = rt.n_rs_seq if role == "target" and spec.rs_rollback else 0
    state_cells = rt.n_seq * (1 + n_rs) if any(spec.recurrent_layers) else 0
    per_layer = spec.state_layer_bytes
    state = tuple(state_cells * per_layer if r else 0 for r in spec.recurrent_layers) or (0,) * spec.n_layer
    per_seq = per_layer * sum(spec.recurrent_layers)
    snapshots = rt.n_seq * per_seq if state_cells and not n_rs else 0
    checkpoints = min(rt.n_seq * CHECKPOINTS_PER_SLOT * per_seq, CHECKPOINT_CAP_BYTES)
    return ModelPlan(
        role, spec, rt, n_cells, swa_cells, kv, _compute_bytes(spec, rt, n_cells, n_ub),
        state_cells, state, snapshots, checkpoints,
    )  # fmt: skip


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


@dataclass(frozen=True)
class EmbedPlan:
    """The served model's embeddings context (llama/embed.py): its own cache and a compute buffer
    for a whole input in one micro-batch, beside the target's weights (it has none of its own), and
    an output buffer in RAM with every token's logits and embedding (llama.cpp makes both)."""

    n_ctx: int
    cache_bytes: int  # KV cache (and recurrent state, one per sequence)
    compute_bytes: int
    output_bytes: int  # in RAM; it grows to this with the largest pass

    @property
    def device_bytes(self) -> int:
        return self.cache_bytes + self.compute_bytes

    @property
    def cpu_bytes(self) -> int:
        return self.device_bytes + self.output_bytes

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self) | {"device_bytes": self.device_bytes, "cpu_bytes": self.cpu_bytes}


def plan_embeddings(spec: ModelSpec, rt: Runtime) -> EmbedPlan | None:
    """The embeddings context's memory: n_ctx, n_batch and n_ubatch all embed_ctx; None without one."""
    n = rt.embed_ctx
    if n <= 0:
        return None
    one = plan_model(
        spec, Runtime(n_ctx=n, n_batch=n, n_ubatch=n, kv_type=rt.kv_type, flash_attn=rt.flash_attn)
    )
    cache = one.kv_bytes + one.state_bytes * EMBED_SEQS
    return EmbedPlan(n, cache, one.compute_bytes, n * (spec.n_vocab + spec.n_embd) * 4)


# ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PairPlan:
    target: ModelPlan
    draft: ModelPlan | None
    headroom_bytes: int = HEADROOM_BYTES
    embed: EmbedPlan | None = None  # serve's embeddings context, made on the first request for one
    projector: ProjectorFacts | None = None  # the target's mmproj: its weights and vision graph
    draft_projector: ProjectorFacts | None = None  # the draft's own (--draft-mmproj)

    @property
    def models(self) -> tuple[ModelPlan, ...]:
        return (self.target,) + ((self.draft,) if self.draft else ())

    @property
    def rt(self) -> Runtime:
        return self.target.rt

    @property
    def projector_bytes(self) -> int:
        """The projectors' weights and compute buffers, where the target goes (mtmd follows it; a
        draft's projector counted there too: a small over-count when the draft sits elsewhere)."""
        both = (self.projector, self.draft_projector if self.draft else None)
        return sum(p.weights_bytes + p.compute_bytes for p in both if p is not None)

    @property
    def device_bytes(self) -> int:
        """Accelerator memory for a full offload of both models (and the embeddings context and
        the projector), headroom included."""
        return (
            sum(m.device_bytes for m in self.models)
            + self.embed_device_bytes
            + self.projector_bytes
            + self.headroom_bytes
        )

    @property
    def embed_device_bytes(self) -> int:
        return self.embed.device_bytes if self.embed else 0

    @property
    def cpu_bytes(self) -> int:
        embed = self.embed.cpu_bytes if self.embed else 0
        return sum(m.cpu_bytes for m in self.models) + embed + self.projector_bytes

    def with_runtime(self, **changes: Any) -> "PairPlan":
        rt = dataclasses.replace(self.rt, **changes)
        draft = self.draft.spec if self.draft else None
        return dataclasses.replace(
            plan_pair(self.target.spec, draft, rt, self.projector, self.draft_projector),
            headroom_bytes=self.headroom_bytes,
        )

    def without_draft(self) -> "PairPlan":
        return dataclasses.replace(self, draft=None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "n_ctx": self.rt.n_ctx,
            "n_seq": self.rt.n_seq,
            "kv_type": self.rt.kv_type,
            "flash_attn": self.rt.flash_attn,
            "n_ubatch": self.rt.n_ubatch,
            "swa_full": self.rt.swa_full,
            "models": [m.to_dict() for m in self.models],
            "embeddings": self.embed.to_dict() if self.embed else None,
            "projector": self.projector.to_dict() if self.projector is not None else None,
            "draft_projector": self.draft_projector.to_dict()
            if self.draft_projector and self.draft
            else None,
            "headroom_bytes": self.headroom_bytes,
            "device_bytes": self.device_bytes,
            "cpu_bytes": self.cpu_bytes,
        }


def plan_pair(
    target: ModelSpec,
    draft: ModelSpec | None,
    rt: Runtime,
    projector: ProjectorFacts | None = None,
    draft_projector: ProjectorFacts | None = None,
) -> PairPlan:
    return PairPlan(
        plan_model(target, rt, "target"),
        plan_model(draft, rt, "draft") if draft else None,
        embed=plan_embeddings(target, rt),
        projector=projector,
        draft_projector=draft_projector,
    )


def gpu_layers_that_fit(plan: PairPlan, free_bytes: int) -> int:
    """Target repeating layers that fit next to a fully offloaded draft (0 when even the draft does
    not fit)."""
    budget = free_bytes - plan.headroom_bytes - (plan.draft.device_bytes if plan.draft else 0)
    budget -= plan.embed_device_bytes  # counted whole: its cache follows the layers, its compute does not
    budget -= plan.projector_bytes
    best = 0
    for k in range(plan.target.spec.n_layer + 1):
        if plan.target.partial_device_bytes(k) <= budget:
            best = k
    return best
