"""Does a planned pair fit the free memory, and if not, what would - with numbers: the flags that
make it fit (a shorter context, a smaller KV type, fewer GPU layers, no draft, a smaller target)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from localspec.gguf.memory_plan import CTX_PAD, PairPlan, fmt_bytes


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
        f"{m.role}: weights {fmt_bytes(m.device_weights_bytes)} + KV {fmt_bytes(m.kv_bytes)}"
        + (f" + recurrent state {fmt_bytes(m.state_bytes)}" if m.state_bytes else "")
        + f" + compute {fmt_bytes(m.compute_bytes)}"
        for m in plan.models
    ]
    if plan.projector is not None:
        two = plan.draft_projector is not None and plan.draft is not None
        parts.append(f"vision projector{'s' if two else ''} {fmt_bytes(plan.projector_bytes)}")
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
