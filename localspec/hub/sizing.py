"""Recommended n_ctx per card size, computed from the memory plan before anything is downloaded.

A preset carries the architecture facts of config.json ([target.arch]) and the file size the Hub
shows; from those we build the `ModelSpec` that memory_plan would read from the GGUF header, then
search the largest context whose full-offload plan fits the card. Tensor sizes are estimated: the
input and output layers at llama.cpp's default types for the quant, the rest of the file split
evenly over the layers (the repeating layers are >90% of a model, so the estimate is close).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from localspec.gguf.memory_plan import SWA_PERIOD, GiB, MiB, ModelSpec, Runtime, plan_pair
from localspec.gguf.projector import ProjectorFacts
from localspec.hub.presets import CARDS_GB

# what a desktop's display server and driver already hold on the card before we start
DESKTOP_RESERVE = 512 * MiB
CTX_STEP = 1024
CTX_CAP = 32768  # beyond this the recommendation stops: long contexts are a choice, not a default
# bits per weight of the input (token_embd) and output layers, by the file's quant, as llama.cpp's
# quantizer picks them: Q4_K_M keeps token_embd at Q4_K and raises output.weight to Q6_K.
_EMBD_BPW = {"q4_k_m": 4.5, "q8_0": 8.5, "f16": 16.0, "bf16": 16.0}
_OUT_BPW = {"q4_k_m": 6.5625, "q8_0": 8.5, "f16": 16.0, "bf16": 16.0}


def spec_from_arch(arch: dict[str, Any], file_bytes: int, quant: str, name: str = "") -> ModelSpec:
    """The ModelSpec memory_plan would read from the GGUF header, from config.json facts."""
    n_layer, n_embd, n_vocab = int(arch["n_layer"]), int(arch["n_embd"]), int(arch["n_vocab"])
    head_dim = int(arch.get("head_dim") or n_embd // int(arch["n_head"]))
    kv = int(arch["n_head_kv"]) * head_dim
    embd = int(n_vocab * n_embd * _EMBD_BPW[quant] / 8)
    out = int(n_vocab * n_embd * _OUT_BPW[quant] / 8)
    tied = bool(arch.get("tied", False))
    # a tied head is stored once (at the output type) and duplicated onto the device at load
    stored = out if tied else embd + out
    per_layer = max(0, file_bytes - stored) // n_layer
    n_swa = int(arch.get("sliding_window", 0) or 0)
    period = SWA_PERIOD.get(str(arch.get("gguf_arch")), 0) if n_swa else 0
    swa = tuple(bool(period) and i % period < period - 1 for i in range(n_layer))
    return ModelSpec(
        path=Path(name or "hub"),
        arch=str(arch.get("gguf_arch", "llama")),
        name=name,
        n_layer=n_layer,
        n_embd=n_embd,
        n_ff=int(arch["n_ff"]),
        n_head=int(arch["n_head"]),
        n_vocab=n_vocab,
        kv_dims=((kv, kv),) * n_layer,
        swa_layers=swa,
        n_swa=n_swa,
        layer_bytes=(per_layer,) * n_layer,
        input_bytes=out if tied else embd,
        output_bytes=out,
        file_weights_bytes=file_bytes,
        n_params=0,
    )


def largest_fitting_ctx(
    target: ModelSpec,
    draft: ModelSpec,
    free_bytes: int,
    *,
    max_ctx: int = CTX_CAP,
    kv_type: str = "f16",
    projector: ProjectorFacts | None = None,
) -> int:
    """The largest n_ctx (a multiple of 1024, at most max_ctx) at which both models (and the
    target's projector) fit fully in `free_bytes` of device memory; 0 when not even 1024 tokens fit
    (partial offload then)."""
    best = 0
    for n_ctx in range(CTX_STEP, max_ctx + 1, CTX_STEP):
        rt = Runtime(n_ctx=n_ctx, kv_type=kv_type)
        if plan_pair(target, draft, rt, projector).device_bytes > free_bytes:
            break
        best = n_ctx
    return best


def recommended_n_ctx(
    target: ModelSpec,
    draft: ModelSpec,
    card_bytes: int,
    *,
    max_ctx: int = CTX_CAP,
    projector: ProjectorFacts | None = None,
) -> int:
    """largest_fitting_ctx on a desktop card of `card_bytes` (the display already holds some)."""
    return largest_fitting_ctx(
        target, draft, card_bytes - DESKTOP_RESERVE, max_ctx=max_ctx, projector=projector
    )


def preset_n_ctx(preset: Any) -> dict[str, int]:
    """{"gpu_12gb": n, "gpu_16gb": n, "gpu_24gb": n} for a Preset, from its arch facts and sizes
    (and its projector's weights, where it names one)."""

    specs = [
        spec_from_arch(m.arch, int(m.size_gb * 1e9), m.quant, m.label) for m in (preset.target, preset.draft)
    ]
    max_ctx = min(CTX_CAP, int(preset.target.arch.get("n_ctx_train", CTX_CAP)))
    proj = _projector_weights(preset.target)
    return {
        f"gpu_{gb}gb": recommended_n_ctx(specs[0], specs[1], gb * GiB, max_ctx=max_ctx, projector=proj)
        for gb in CARDS_GB
    }


def _projector_weights(target: Any) -> ProjectorFacts | None:
    """A preset's projector as the plan counts it before its header is read: its file size as
    weights, no vision graph (that buffer's estimate needs the header: pull plans it then)."""
    if not target.mmproj or not target.mmproj_size_gb:
        return None
    size = int(target.mmproj_size_gb * 1e9)
    return ProjectorFacts(Path(target.mmproj), "?", None, 0, 0, 0, 0, 0, 1, size)
