"""Where the target and draft go, decided before loading and checked after.

Speculative decoding goes wrong silently when the draft lands on the CPU or a few target layers spill
to system RAM: every round then waits on the slow part and the speed-up melts away. So:
  - `plan_for(settings)` sizes the pair from its GGUF headers (memory_plan);
  - `enforce(plan, devices, settings)` picks n_gpu_layers for both models and refuses a partial
    offload unless settings.allow_partial_offload (then it warns loudly); the draft always goes where
    the target goes; a CPU-only build runs everything on the CPU with a one-line banner;
  - `verify(...)` parses what llama.cpp logged while loading and compares it with the plan.

Engine use:
    plan = plan_for(s); decision = enforce(plan, backend.devices(), s)
    Model(s.target, n_gpu_layers=decision.target_gpu_layers) ...
    report = verify(plan, decision, target_log=..., draft_log=...); report.require_clean(s)
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from localspec import draft_kinds
from localspec.errors import LocalspecError
from localspec.gguf.memory_fit import Verdict, verdict
from localspec.gguf.memory_plan import (
    ModelPlan,
    PairPlan,
    Runtime,
    fmt_bytes,
    gpu_layers_that_fit,
    plan_pair,
    read_spec,
)
from localspec.gguf.projector import projector_facts

MiB = 1 << 20
TOLERANCE = 0.10  # plan vs llama.cpp's own numbers
CPU_ONLY_BANNER = (
    "CPU-only llama.cpp build: target and draft run on the CPU "
    "(rebuild with `make setup CMAKE_ARGS=-DGGML_CUDA=on` or Metal/Vulkan to offload)"
)
PARTIAL_COST = (
    "every token now waits for the layers in system RAM, so the verify pass is no longer cheap "
    "and speculative gains shrink"
)


def plan_for(settings: Any) -> PairPlan:
    """The memory plan for settings.target (+ what the drafter adds: a draft model's), from headers only."""
    if settings.target is None:
        raise LocalspecError("no target model: pass --target PATH.gguf or --pair DIR")
    kind = draft_kinds.kind_of(settings)
    draft = kind.draft_spec(settings) if kind is not None else None
    mmproj = projector_facts(settings.mmproj) if settings.mmproj is not None else None
    seen = settings.draft_mmproj if draft is not None else None
    draft_mmproj = projector_facts(seen) if seen is not None else None
    return plan_pair(read_spec(settings.target), draft, Runtime.from_settings(settings), mmproj, draft_mmproj)


# ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Decision:
    mode: str  # "gpu" (everything offloaded), "partial", "cpu" or "rpc" (target split over rpc-servers)
    target_gpu_layers: int  # n_gpu_layers to load the target with
    draft_gpu_layers: int
    devices: tuple[str, ...] = ()  # accelerators both models use (empty: CPU); rpc: the target's
    pin: bool = False  # pass `devices` to llama_model_params.devices (several GPUs, pair fits on one)
    banner: str | None = None
    warnings: tuple[str, ...] = ()
    verdict: Verdict | None = None
    remote: tuple[str, ...] = ()  # rpc-server devices ("RPC0", ...) the target is split over
    # explicit llama_model_params.devices per model (None: as `pin` says); () pins to the CPU
    target_devices: tuple[str, ...] | None = None
    draft_devices: tuple[str, ...] | None = None

    def model_devices(self, role: str) -> tuple[str, ...] | None:
        """What to pass as backend.Model(devices=...) for "target" or "draft"."""
        explicit = self.target_devices if role == "target" else self.draft_devices
        if explicit is not None:
            return explicit
        return self.devices if self.pin else None

    def messages(self) -> list[str]:
        """What to print on stderr before loading (banner first)."""
        return ([self.banner] if self.banner else []) + [f"warning: {w}" for w in self.warnings]

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "target_gpu_layers": self.target_gpu_layers,
            "draft_gpu_layers": self.draft_gpu_layers,
            "devices": list(self.devices),
            "pin": self.pin,
            "banner": self.banner,
            "warnings": list(self.warnings),
            "verdict": self.verdict.to_dict() if self.verdict else None,
            "remote": list(self.remote),
            "target_devices": None if self.target_devices is None else list(self.target_devices),
            "draft_devices": None if self.draft_devices is None else list(self.draft_devices),
        }


def enforce(plan: PairPlan, devices: Sequence[Any], settings: Any) -> Decision:
    """Choose where both models go, or raise LocalspecError rather than spill silently.

    `devices` are backend.Device-like objects (name, description, kind, free_bytes, remote).
    Devices of rpc-servers count only when settings.rpc names them: then the target is split over
    them (and the local GPUs) while the draft stays local, where its many small steps pay no network
    round trips."""
    wanted = set(settings.rpc_endpoints)
    local = [d for d in devices if not d.remote]
    remote = [d for d in devices if d.remote and d.description in wanted]
    if remote:
        return _enforce_rpc(plan, local, remote, settings)
    decision = _enforce_local(plan, local, settings)
    if len(local) < len(devices):  # rpc-servers registered earlier in this process: keep off them
        pinned = decision.devices if decision.mode != "cpu" else ()
        decision = dataclasses.replace(decision, target_devices=pinned, draft_devices=pinned)
    return decision


def _enforce_rpc(plan: PairPlan, local: Sequence[Any], remote: Sequence[Any], settings: Any) -> Decision:
    n_full_t = plan.target.spec.n_layer + 1
    if settings.n_gpu_layers == 0:
        raise LocalspecError("--n-gpu-layers 0 keeps every layer local: drop --rpc or the layer limit")
    gpus = [d for d in local if d.kind == "gpu"] or [d for d in local if d.kind == "igpu"]
    head = plan.headroom_bytes
    draft_dev = max(gpus, key=lambda d: d.free_bytes) if gpus else None
    warnings: list[str] = []
    draft_bytes = plan.draft.device_bytes if plan.draft else 0
    if draft_dev is not None and plan.draft and draft_bytes + head > draft_dev.free_bytes:
        warnings.append(f"the draft does not fit on {draft_dev.name}: it runs on the CPU (slower drafting)")
        draft_dev = None
    # llama.cpp's own order: rpc-servers first, so only activations cross the network
    target_devs = list(remote) + list(gpus)
    names = tuple(d.name for d in target_devs)
    free = sum(d.free_bytes for d in target_devs) - head * (len(target_devs) - 1)
    free -= draft_bytes if draft_dev is not None else 0
    v = verdict(plan.without_draft(), free, " + ".join(f"{d.name} ({d.description})" for d in target_devs))
    k = n_full_t
    if not v.fits:
        k = gpu_layers_that_fit(plan.without_draft(), free)
    elif 0 < settings.n_gpu_layers < n_full_t:
        k = settings.n_gpu_layers
    if k < n_full_t:
        if not settings.allow_partial_offload:
            why = v.message() if not v.fits else f"--n-gpu-layers {settings.n_gpu_layers} keeps layers local"
            raise LocalspecError(
                f"{why}; add rpc-servers, or pass --allow-partial-offload to run with {k}/{n_full_t} target "
                f"layers on them ({PARTIAL_COST})"
            )
        warnings.append(
            f"PARTIAL OFFLOAD: {k}/{n_full_t} target layers on {' + '.join(names)}; {PARTIAL_COST}"
        )
    n_d = plan.draft.spec.n_layer + 1 if plan.draft and draft_dev is not None else 0
    where = f"{draft_dev.name} (local)" if draft_dev is not None else "the CPU (local)"
    return Decision(
        "rpc",
        k,
        n_d,
        names,
        verdict=v,
        warnings=tuple(warnings),
        banner=f"RPC split: target over {' + '.join(names)}; draft on {where}",
        remote=tuple(d.name for d in remote),
        target_devices=names,
        draft_devices=(draft_dev.name,) if draft_dev is not None else (),
    )


def _enforce_local(plan: PairPlan, devices: Sequence[Any], settings: Any) -> Decision:
    n_full_t = plan.target.spec.n_layer + 1  # repeating layers + the output layer
    n_full_d = plan.draft.spec.n_layer + 1 if plan.draft else 0
    # llama.cpp prefers discrete GPUs and only falls back to integrated ones
    acc = [d for d in devices if d.kind == "gpu"] or [d for d in devices if d.kind == "igpu"]
    if not acc:
        return Decision("cpu", 0, 0, banner=CPU_ONLY_BANNER, warnings=_ram_warnings(plan, devices))
    if settings.n_gpu_layers == 0:
        names = ", ".join(d.name for d in acc)
        return Decision(
            "cpu",
            0,
            0,
            banner=f"--n-gpu-layers 0: target and draft run on the CPU ({names} unused)",
            warnings=_ram_warnings(plan, devices),
        )

    best = max(acc, key=lambda d: d.free_bytes)
    v = verdict(plan, best.free_bytes, f"{best.name} ({best.description})")
    k_req = settings.n_gpu_layers
    if 0 < k_req < n_full_t:  # the user asked for a partial offload
        if not settings.allow_partial_offload:
            raise LocalspecError(
                f"--n-gpu-layers {k_req} offloads only {k_req} of the target's {n_full_t} layers; pass "
                f"--allow-partial-offload to run that way ({PARTIAL_COST}), or -1 for all ({v.message()})"
            )
        return _partial(plan, best, v, min(k_req, plan.target.spec.n_layer))
    if v.fits:
        return Decision("gpu", n_full_t, n_full_d, (best.name,), pin=len(acc) > 1, verdict=v)
    if len(acc) > 1:  # llama.cpp splits layers across GPUs; both models then use the same set
        free = sum(d.free_bytes for d in acc) - plan.headroom_bytes * (len(acc) - 1)
        v_all = verdict(plan, free, " + ".join(d.name for d in acc))
        if v_all.fits:
            return Decision("gpu", n_full_t, n_full_d, tuple(d.name for d in acc), verdict=v_all)
    k = gpu_layers_that_fit(plan, best.free_bytes)
    if not settings.allow_partial_offload:
        raise LocalspecError(
            f"{v.message()}; or pass --allow-partial-offload to run with {k}/{n_full_t} target layers on "
            f"{best.name} ({PARTIAL_COST})"
        )
    return _partial(plan, best, v, k)


def _partial(plan: PairPlan, dev: Any, v: Verdict, k: int) -> Decision:
    n_t = plan.target.spec.n_layer + 1
    draft_fits = plan.draft is None or plan.draft.device_bytes + plan.headroom_bytes <= dev.free_bytes
    if not draft_fits:  # the draft cannot sit where the target's layers are: nothing is offloaded
        return Decision(
            "cpu",
            0,
            0,
            verdict=v,
            warnings=(v.message(),),
            banner=f"not even the draft fits on {dev.name}: target and draft run on the CPU",
        )
    spilled = plan.target.spec.n_layer - k
    ram = sum(plan.target.spec.layer_bytes[:spilled]) + sum(plan.target.kv_layer_bytes[:spilled])
    warn = (
        f"PARTIAL OFFLOAD: {k}/{n_t} target layers on {dev.name}, {spilled} layers and the output head "
        f"({fmt_bytes(ram + plan.target.spec.output_bytes)}) in system RAM; {PARTIAL_COST}"
    )
    n_d = plan.draft.spec.n_layer + 1 if plan.draft else 0
    return Decision("partial", k, n_d, (dev.name,), verdict=v, warnings=(warn,))


def _ram_warnings(plan: PairPlan, devices: Sequence[Any]) -> tuple[str, ...]:
    cpu = next((d for d in devices if d.kind == "cpu"), None)
    if cpu is None or not cpu.free_bytes or plan.cpu_bytes <= cpu.free_bytes:
        return ()
    return (
        f"the pair needs {fmt_bytes(plan.cpu_bytes)} of system memory, {fmt_bytes(cpu.free_bytes)} is "
        "free: expect paging (try a smaller --n-ctx or --kv-type q8_0)",
    )


# ---------------------------------------------------------------------------------------------------
# llama.cpp's log, as 0.3.36 prints it (format strings in llama-model.cpp, llama-kv-cache.cpp,
# llama-context.cpp). Buffer names are devices ("CUDA0", "Vulkan0", "MTL0") or host memory
# ("CPU", "CPU_Mapped", "CPU_REPACK", "CUDA_Host", ...).
_OFFLOADED = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")
_LAYER_DEV = re.compile(r"layer\s+(\d+) assigned to device (\S+?),")
_BUFFER = re.compile(r"^\w+:\s+(\S+)\s+(model|KV|RS|compute|output) buffer size =\s+([\d.]+) MiB")
_RS_TOTAL = re.compile(
    r"llama_memory_recurrent: size\s*=\s*([\d.]+) MiB \(\s*(\d+) cells,.*?(?:(\d+) rs_seq)?\)"
)
_KV_TOTAL = re.compile(r"(?:llama_kv_cache\w*: size|KV self size)\s*=\s*([\d.]+) MiB(?: \(\s*(\d+) cells)?")


def is_host_buffer(name: str) -> bool:
    return name.upper().startswith("CPU") or name.lower().endswith("host")


@dataclass
class Observed:
    """What llama.cpp reported for one model and its context."""

    offloaded: tuple[int, int] | None = None  # (N, M) from "offloaded N/M layers to GPU"
    layer_devices: dict[int, str] = field(default_factory=dict)
    buffers: dict[str, dict[str, int]] = field(
        default_factory=lambda: {"model": {}, "KV": {}, "RS": {}, "compute": {}, "output": {}}
    )
    kv_total: int = 0
    kv_cells: list[int] = field(default_factory=list)
    rs_total: int = 0  # recurrent state (llama_memory_recurrent), all cells
    rs_cells: int = 0
    rs_seq: int = 0  # states kept per cell beyond the current one (n_rs_seq)

    def device_sum(self, kind: str) -> int:
        return sum(b for name, b in self.buffers[kind].items() if not is_host_buffer(name))

    def host_sum(self, kind: str) -> int:
        # a repacked weight is a CPU-friendly copy of one already mapped from the file
        return sum(
            b for name, b in self.buffers[kind].items() if is_host_buffer(name) and "REPACK" not in name
        )

    @property
    def accel_devices(self) -> set[str]:
        return {d for d in self.layer_devices.values() if not is_host_buffer(d)} | {
            n for n in self.buffers["model"] if not is_host_buffer(n)
        }

    def layers_on_accel(self, n_layer: int) -> int:
        """Layers offloaded, output layer included (llama.cpp counts n_layer + 1)."""
        if self.offloaded is not None:
            return self.offloaded[0]
        return sum(1 for i, d in self.layer_devices.items() if i <= n_layer and not is_host_buffer(d))

    def layers_by_device(self) -> dict[str, list[int]]:
        """Device -> the layers llama.cpp assigned to it (index n_layer is the output layer)."""
        out: dict[str, list[int]] = {}
        for i, dev in sorted(self.layer_devices.items()):
            out.setdefault(dev, []).append(i)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "offloaded": list(self.offloaded) if self.offloaded else None,
            "layers_by_device": self.layers_by_device(),
            "accel_devices": sorted(self.accel_devices),
            "buffers": self.buffers,
            "kv_total": self.kv_total,
            "kv_cells": self.kv_cells,
            "rs_total": self.rs_total,
            "rs_cells": self.rs_cells,
            "rs_seq": self.rs_seq,
        }


def parse_log(lines: Iterable[str]) -> Observed:
    obs = Observed()
    for line in lines:
        if m := _OFFLOADED.search(line):
            obs.offloaded = (int(m.group(1)), int(m.group(2)))
        elif m := _LAYER_DEV.search(line):
            obs.layer_devices[int(m.group(1))] = m.group(2)
        elif m := _BUFFER.search(line):
            kind = obs.buffers[m.group(2)]
            kind[m.group(1)] = kind.get(m.group(1), 0) + round(float(m.group(3)) * MiB)
        elif m := _RS_TOTAL.search(line):
            obs.rs_total += round(float(m.group(1)) * MiB)
            obs.rs_cells += int(m.group(2))
            obs.rs_seq = int(m.group(3) or 0)
        elif m := _KV_TOTAL.search(line):
            obs.kv_total += round(float(m.group(1)) * MiB)
            if m.group(2):
                obs.kv_cells.append(int(m.group(2)))
    return obs


# ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ModelCheck:
    role: str
    plan: ModelPlan
    seen: Observed
    expected_layers: int  # on the accelerator, output layer included
    layers: int  # seen there
    n_layers: int  # n_layer + 1
    sizes: dict[str, tuple[int, int]]  # what -> (planned, seen) bytes
    problems: tuple[str, ...]

    def off_by(self, what: str) -> float:
        planned, seen = self.sizes[what]
        return abs(seen - planned) / max(1, seen)

    def to_dict(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "expected_layers": self.expected_layers,
            "layers_on_accel": self.layers,
            "n_layers": self.n_layers,
            "sizes": {k: {"planned": p, "seen": s} for k, (p, s) in self.sizes.items()},
            "problems": list(self.problems),
            "seen": self.seen.to_dict(),
        }


@dataclass(frozen=True)
class PlacementReport:
    decision: Decision
    models: tuple[ModelCheck, ...]

    @property
    def problems(self) -> list[str]:
        return [p for m in self.models for p in m.problems]

    def require_clean(self, settings: Any) -> list[str]:
        """Raise when llama.cpp put things elsewhere than planned, unless partial offload is allowed
        (then the problems come back as warnings to print)."""
        strict = self.decision.mode in ("gpu", "rpc")
        if self.problems and strict and not settings.allow_partial_offload:
            raise LocalspecError(
                "placement differs from the plan: "
                + "; ".join(self.problems)
                + " (pass --allow-partial-offload to run anyway)"
            )
        return self.problems

    def summary(self) -> str:
        """A few lines for stderr at startup."""
        d = self.decision
        where = {
            "cpu": "CPU only",
            "gpu": " + ".join(d.devices),
            "partial": f"{' + '.join(d.devices)} + CPU",
            "rpc": f"target over {' + '.join(d.devices)}, draft local",
        }[d.mode]
        lines = [f"placement: {where}"]
        for m in self.models:
            parts = [
                f"{k} {fmt_bytes(s)}"
                + (f" (plan {fmt_bytes(p)})" if abs(s - p) > TOLERANCE * max(s, 1) else "")
                for k, (p, s) in m.sizes.items()
            ]
            on_cpu = d.mode == "cpu" or (m.role == "draft" and d.draft_devices == ())
            layers = "all layers on the CPU" if on_cpu else f"{m.layers}/{m.n_layers} layers offloaded"
            lines.append(f"  {m.role:<6} {layers}; " + ", ".join(parts))
            if d.mode == "rpc" and m.seen.layer_devices:
                spread = ", ".join(f"{dev} {_ranges(ls)}" for dev, ls in m.seen.layers_by_device().items())
                lines.append(f"         layers: {spread}")
        lines += [f"  problem: {p}" for p in self.problems]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "decision": self.decision.to_dict(),
            "models": [m.to_dict() for m in self.models],
            "problems": self.problems,
        }


def verify(
    plan: PairPlan, decision: Decision, target_log: Sequence[str], draft_log: Sequence[str] | None = None
) -> PlacementReport:
    """Compare what llama.cpp logged (Model.load_log + Context.init_log per model) with the plan."""
    cpu = decision.mode == "cpu"
    checks = [_check(plan.target, decision, decision.target_gpu_layers, parse_log(target_log), cpu)]
    if plan.draft is not None and draft_log is not None:
        draft_cpu = cpu or decision.draft_devices == ()
        seen = parse_log(draft_log)
        checks.append(_check(plan.draft, decision, decision.draft_gpu_layers, seen, draft_cpu))
        on_remote = sorted(seen.accel_devices & set(decision.remote))
        if on_remote:
            checks[1] = _with_problem(checks[1], f"draft: on {', '.join(on_remote)}, not local")
    if decision.mode == "rpc":
        unused = [r for r in decision.remote if r not in checks[0].seen.accel_devices]
        if unused and checks[0].seen.layer_devices:
            checks[0] = _with_problem(checks[0], f"target: no layers on {', '.join(unused)}")
    elif len(checks) == 2 and not cpu:
        t, d = checks[0].seen.accel_devices, checks[1].seen.accel_devices
        if d and t and not d <= t:
            problem = f"the draft is on {', '.join(sorted(d))} but the target on {', '.join(sorted(t))}"
            checks[1] = _with_problem(checks[1], problem)
    return PlacementReport(decision, tuple(checks))


def _check(mp: ModelPlan, decision: Decision, asked: int, seen: Observed, cpu: bool) -> ModelCheck:
    n = mp.spec.n_layer + 1
    expected = min(asked, n) if not cpu else 0
    layers = seen.layers_on_accel(mp.spec.n_layer)
    if cpu:
        sizes = {
            "weights": (mp.spec.file_weights_bytes, seen.host_sum("model")),
            "KV": (mp.kv_bytes, seen.kv_total or seen.host_sum("KV")),
            "compute": (mp.compute_bytes, seen.host_sum("compute")),
        }
        if mp.state_bytes:
            sizes["recurrent state"] = (mp.state_bytes, seen.rs_total)
    else:
        first = mp.spec.n_layer - min(expected, mp.spec.n_layer)  # llama.cpp offloads the last layers
        full = expected == n
        device_weights = mp.device_weights_bytes if full else sum(mp.spec.layer_bytes[first:])
        device_kv = mp.kv_bytes if full else sum(mp.kv_layer_bytes[first:])
        sizes = {
            "weights": (device_weights, seen.device_sum("model")),
            "KV": (device_kv, seen.device_sum("KV")),
            "compute": (mp.compute_bytes, seen.device_sum("compute")),
        }
        if mp.state_bytes:
            device_state = mp.state_bytes if full else sum(mp.state_layer_bytes[first:])
            sizes["recurrent state"] = (device_state, seen.device_sum("RS"))
    problems = []
    if layers < expected:
        problems.append(
            f"{mp.role}: only {layers}/{n} layers on the accelerator (planned {expected}); "
            f"the rest run from system RAM"
        )
    if decision.mode in ("gpu", "rpc") and not cpu and seen.host_sum("KV") and not seen.device_sum("KV"):
        problems.append(f"{mp.role}: the KV cache is in system RAM")
    if cpu and layers:
        problems.append(f"{mp.role}: {layers} layers offloaded although the plan was CPU only")
    return ModelCheck(mp.role, mp, seen, expected, layers, n, sizes, tuple(problems))


def _ranges(ids: Sequence[int]) -> str:
    """[0, 1, 2, 5, 6] -> '0-2,5-6'."""
    out: list[str] = []
    for i in ids:
        if out and int(out[-1].split("-")[-1]) == i - 1:
            out[-1] = f"{out[-1].split('-')[0]}-{i}"
        else:
            out.append(str(i))
    return ",".join(out)


def _with_problem(c: ModelCheck, problem: str) -> ModelCheck:
    return dataclasses.replace(c, problems=c.problems + (problem,))
