"""`localspec doctor`: the llama.cpp build, its devices, the memory plan of a pair, the verdict and the
placement llama.cpp actually chose (both models loaded with a tiny context). `collect()` returns
data; the table and --json are two renderings of it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from localspec.cli.common import resolve_settings, settings_options
from localspec.draft_len.netcost import verify_times

VERIFY_N_CTX = 512  # enough to reserve every buffer; the plan is recomputed at this size to compare


@click.command()
@settings_options("model", also=("embed_ctx",))  # serve's embeddings context, when given
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of the table.")
@click.option("--no-load", is_flag=True, help="Plan only: do not load the models to verify placement.")
def doctor(as_json: bool, no_load: bool, **kwargs: Any) -> None:
    """Devices, memory plan, verdict and verified placement (models optional)."""
    settings = resolve_settings(kwargs)
    report = collect(settings, load=not no_load)
    click.echo(json.dumps(report, indent=2) if as_json else render(report))


def collect(settings: Any, *, load: bool = True) -> dict[str, Any]:
    from localspec import llama  # noqa: PLC0415 - keep --help instant
    from localspec.engine.loader import load_pair  # noqa: PLC0415
    from localspec.gguf.memory_plan import fmt_bytes  # noqa: PLC0415

    llama.add_rpc_servers(settings.rpc_endpoints)
    devices = llama.devices()
    out: dict[str, Any] = {
        "llama_cpp_python": llama.llama_cpp_version(),
        "gpu_offload": llama.supports_gpu_offload(),
        "rpc_support": llama.rpc_supported(),
        "system_info": llama.system_info(),
        "cpu_variant": _variant(llama.cpu_variant()),
        "row_kernels": _row_kernels(),
        "devices": [d.__dict__ | {"offloads": d.offloads, "remote": d.remote} for d in devices],
    }
    if settings.target is None:
        return out
    planned = load_pair(settings, dry_run=True)  # `run` would refuse an incompatible pair; still shown
    out["memory"] = _memory(settings)
    if planned.pair_report is not None:
        out["pair"] = {"ok": planned.pair_report.ok, "message": planned.pair_report.message}
    plan = planned.plan
    out["plan"] = plan.to_dict()
    cpu = next((d for d in devices if d.kind == "cpu"), None)
    out["system_memory"] = {"need_bytes": plan.cpu_bytes, "free_bytes": cpu.free_bytes if cpu else None}
    if planned.refused is not None:
        out["refused"] = planned.refused
        return out
    decision = planned.decision
    out["decision"] = decision.to_dict()
    if (
        settings.draft is not None or settings.draft_source != "model"
    ):  # a drafter named: a GGUF, or a kind with none
        out["tuner_memory"] = _remembered(settings, decision)
    if not load:
        return out
    # both models loaded as planned with a tiny context: llama.cpp's log says where it put them
    tiny = settings.replace(n_ctx=min(settings.n_ctx, VERIFY_N_CTX))
    with load_pair(tiny, strict=False, decision=decision) as loaded:
        verified, vplan = loaded.report, loaded.plan
        rpc_times = verify_times(loaded.target_ctx) if decision.mode == "rpc" else None
        _measured_rollback(out["memory"], loaded)
        top_k = loaded.target_ctx.top_k
    out["verified"] = verified.to_dict() | {"n_ctx": vplan.rt.n_ctx, "summary": verified.summary()}
    out["verified"]["backend_top_k"] = top_k
    out["verified"]["accuracy"] = {
        m.role: {
            k: f"{m.off_by(k):.1%} ({fmt_bytes(p)} planned, {fmt_bytes(s)} seen)"
            for k, (p, s) in m.sizes.items()
        }
        for m in verified.models
    }
    if rpc_times is not None:
        out["network"] = _network_cost(vplan, devices, tiny, rpc_times)
    return out


def _variant(v: Any) -> dict[str, Any]:
    return {"name": v.name, "path": str(v.path) if v.path else None, "score": v.score, "reason": v.reason}


def _row_kernels() -> str | None:
    """The vector instructions the sampler's compiled row kernels run on; None where they did not build."""
    from localspec.decode import sampling  # noqa: PLC0415

    return sampling.KERNEL.isa() if sampling.KERNEL is not None else None


def _variant_line(v: dict[str, Any]) -> str:
    if v["path"] is None:
        return f"{v['name']} ({v['reason']})"
    return f"{v['name']} ({v['reason']}; ggml score {v['score']}; {v['path']})"


def _memory(settings: Any) -> dict[str, Any]:
    """Each model's memory kind and the blocks it carries to draft with, from its header (what
    speculation will cost on it)."""
    from localspec.draft_kinds import describe, header_layers  # noqa: PLC0415
    from localspec.gguf.file import read_header  # noqa: PLC0415
    from localspec.gguf.memory_kind import memory_facts  # noqa: PLC0415

    roles = {"target": settings.target, "draft": settings.draft if settings.speculative else None}
    out = {}
    for role, path in roles.items():
        if path is not None:
            f = memory_facts(path)
            layers = {f"{name}_layers": n for name, n in header_layers(read_header(path)).items()}
            out[role] = {"kind": f.kind, "rollback": f.rollback, **layers, "line": describe(path)}
    return out


def _measured_rollback(memory: dict[str, Any], loaded: Any) -> None:
    """The loaded contexts' own answer (llama.h), and what a rollback cost them, measured."""
    from localspec.draft_len.calibrate import rollback_cost  # noqa: PLC0415

    for role, ctx in (("target", loaded.target_ctx), ("draft", loaded.draft_ctx)):
        if role in memory and ctx is not None and ctx.memory_kind != "attention":
            prefix = ctx.model.tokenize("The quick brown fox jumps over the lazy dog.", add_special=True)
            memory[role] |= {"loaded_kind": ctx.memory_kind} | rollback_cost(ctx, prefix)


def _remembered(settings: Any, decision: Any) -> dict[str, Any]:
    """What auto-K remembers of this pair on this build and device (see tuner_memory)."""
    from localspec.draft_kinds import cache_key  # noqa: PLC0415
    from localspec.draft_len.memory import TunerMemory, memory_key  # noqa: PLC0415

    notes: list[str] = []
    mem = TunerMemory(
        memory_key(settings, decision.target_gpu_layers, decision.draft_gpu_layers, cache_key(settings)),
        note=notes.append,
    )
    rec = mem.load() if settings.tuner_cache else None
    out: dict[str, Any] = {"path": str(mem.path), "enabled": settings.tuner_cache, "notes": notes}
    if rec is not None:
        reached = [t for t in rec.tried if t > 0]
        out |= {
            "saved_at": rec.saved_at,
            "verify_ms": {n: round(t * 1e3, 2) for n, t in sorted(rec.verify_s.items())},
            "draft_ms_per_token": round(rec.draft_s * 1e3, 2) if rec.draft_s else None,
            "catch_up_ms_per_token": round(rec.catch_s * 1e3, 3) if rec.catch_s else None,
            "acceptance_by_pos": [round(a / t, 3) for a, t in zip(rec.acc, rec.tried) if t > 0][:8],
            "evidence_rounds": round(reached[0], 1) if reached else 0.0,
        }
    return out


def _network_cost(vplan: Any, devices: Any, s: Any, rpc_times: dict) -> dict:
    """The split target's verify times against the same batches all-local (when it fits here)."""
    from localspec import llama  # noqa: PLC0415
    from localspec.draft_len.netcost import compare  # noqa: PLC0415
    from localspec.engine import placement  # noqa: PLC0415
    from localspec.errors import LocalspecError  # noqa: PLC0415

    out: dict[str, Any] = {"rpc_ms": {n: round(t * 1e3, 3) for n, t in rpc_times.items()}}
    local_s = s.replace(rpc=None)
    try:
        local = placement.enforce(vplan.without_draft(), devices, local_s)
    except LocalspecError as e:
        out["skipped"] = f"the target does not fit locally, so no all-local baseline: {e}"
        return out
    cpu = next((d for d in devices if d.kind == "cpu"), None)
    if local.mode == "cpu" and cpu is not None and vplan.target.cpu_bytes > cpu.free_bytes:
        out["skipped"] = "the target does not fit in local memory, so no all-local baseline"
        return out
    with (
        llama.Model(
            s.target, n_gpu_layers=local.target_gpu_layers, devices=local.model_devices("target")
        ) as model,
        llama.Context(model, **s.context_args()) as ctx,
    ):
        local_times = verify_times(ctx)
    out["local_placement"] = local.mode
    out["per_batch"] = [c.to_dict() for c in compare(rpc_times, local_times)]
    return out


# ---------------------------------------------------------------------------------------------------
def render(r: dict[str, Any]) -> str:
    """The report as a table, one section after another (each a function of the report's part)."""
    rows = _build_rows(r)
    if r.get("plan") is None:
        rows.append(("models", "none given (pass --pair DIR or --target/--draft to plan and verify)"))
        return _table(rows)
    rows += _memory_rows(r) + _plan_rows(r["plan"])
    if "refused" in r:
        rows.append(("verdict", "REFUSED: " + r["refused"]))
        return _table(rows)
    rows += _decision_rows(r) + _tuner_rows(r.get("tuner_memory"))
    rows += _verified_rows(r.get("verified")) + _network_rows(r.get("network"))
    return _table(rows)


Rows = list[tuple[str, str]]


def _build_rows(r: dict[str, Any]) -> Rows:
    """This llama.cpp build, its kernels and the devices it sees."""
    from localspec.gguf.memory_plan import fmt_bytes  # noqa: PLC0415

    rows = [
        (
            "llama.cpp",
            f"llama-cpp-python {r['llama_cpp_python']}; GPU offload: "
            + ("yes" if r["gpu_offload"] else "no (CPU-only build)"),
        ),
        ("features", r["system_info"]),
        ("kernels", _variant_line(r["cpu_variant"])),
        (
            "sampler",
            f"compiled row kernels ({r['row_kernels']})"
            if r["row_kernels"]
            else "numpy only: the compiled row kernels did not build (reinstall with a C compiler)",
        ),
    ]
    for i, d in enumerate(r["devices"]):
        rows.append(
            (
                "devices" if i == 0 else "",
                f"{d['name']:<10} {'remote' if d.get('remote') else d['kind']:<6} "
                f"{fmt_bytes(d['free_bytes'])} free of {fmt_bytes(d['total_bytes'])}  {d['description']}"
                + ("  (rpc-server)" if d.get("remote") else ""),
            )
        )
    return rows


def _memory_rows(r: dict[str, Any]) -> Rows:
    """The pair check, and each model's memory kind (and what its rollback cost, measured)."""
    from localspec.gguf.memory_plan import fmt_bytes  # noqa: PLC0415

    rows = []
    if "pair" in r:
        rows.append(("pair", ("" if r["pair"]["ok"] else "REFUSED by run: ") + r["pair"]["message"]))
    for i, (role, m) in enumerate(r.get("memory", {}).items()):
        rows.append(("memory" if i == 0 else "", f"{role:<6} {m['line']}"))
        if "rollback_ms" in m:
            cost = f"measured: rollback {m['rollback_ms']:.2f} ms, replay {m['replay_ms']:.2f} ms per round"
            if "snapshot_ms" in m:
                cost += f", snapshot {m['snapshot_ms']:.2f} ms of {fmt_bytes(m['state_bytes'])}"
            rows.append(("", f"       {cost} (a verify of 4 drafts, 2 kept)"))
    return rows


def _plan_rows(plan: dict[str, Any]) -> Rows:
    """The memory plan: the contexts, each model's weights, KV, compute and recurrent state."""
    from localspec.gguf.memory_plan import fmt_bytes  # noqa: PLC0415

    rows = [
        (
            "plan",
            f"n_ctx {plan['n_ctx']} x {plan.get('n_seq', 1)} slot(s), KV {plan['kv_type']}, flash-attn {plan['flash_attn']}, "
            f"n_ubatch {plan['n_ubatch']}",
        )
    ]
    for m in plan["models"]:
        swa = f", SWA cache {m['swa_cells']} cells" if m["swa_cells"] else ""
        rows.append(("", f"{m['role']:<6} {m['name']} ({m['arch']}, {m['n_layer']} layers{swa})"))
        rows.append(
            (
                "",
                f"       weights {fmt_bytes(m['weights_device_bytes'])} on device "
                f"(+{fmt_bytes(m['weights_host_bytes'])} input layer in RAM), KV "
                f"{fmt_bytes(m['kv_bytes'])}, compute {fmt_bytes(m['compute_bytes'])}",
            )
        )
        if m.get("state_cells"):  # recurrent layers: their state per slot (x (1 + n_rs_seq) with rs)
            saved = (
                f", {fmt_bytes(m['snapshot_bytes'])} of saved states in RAM" if m["snapshot_bytes"] else ""
            )
            saved += f", prompt checkpoints up to {fmt_bytes(m['checkpoint_bytes'])} in RAM"
            rows.append(
                (
                    "",
                    f"       recurrent state {fmt_bytes(m['state_bytes'])} ({m['state_cells']} copies){saved}",
                )
            )
    e = plan.get("embeddings")
    if e:
        rows.append(
            (
                "",
                f"embed  --embed-ctx {e['n_ctx']} (serve, made on the first request): KV "
                f"{fmt_bytes(e['cache_bytes'])}, compute {fmt_bytes(e['compute_bytes'])}, "
                f"output {fmt_bytes(e['output_bytes'])} in RAM",
            )
        )
    for key, label in (("projector", "mmproj"), ("draft_projector", "draft mmproj")):
        pj = plan.get(key)  # --mmproj, --draft-mmproj: counted where the target goes (mtmd puts it there)
        if pj:
            rows.append(
                (
                    "",
                    f"{label} {Path(pj['path']).name} ({pj['projector_type']}, {pj['image_size']} px images): "
                    f"weights {fmt_bytes(pj['weights_bytes'])}, vision compute ~{fmt_bytes(pj['compute_bytes'])}",
                )
            )
    rows.append(
        (
            "",
            f"full offload needs {fmt_bytes(plan['device_bytes'])} (headroom "
            f"{fmt_bytes(plan['headroom_bytes'])}); CPU-only needs {fmt_bytes(plan['cpu_bytes'])}",
        )
    )
    return rows


def _decision_rows(r: dict[str, Any]) -> Rows:
    """Whether it fits, and where placement puts each model."""
    from localspec.gguf.memory_plan import fmt_bytes  # noqa: PLC0415

    rows = []
    dec = r["decision"]
    v = dec["verdict"]
    if v is None:
        mem = r["system_memory"]
        free = f", {fmt_bytes(mem['free_bytes'])} free" if mem["free_bytes"] else ""
        rows.append(("verdict", f"CPU: needs {fmt_bytes(mem['need_bytes'])} of system memory{free}"))
    else:
        status = "fits" if v["fits"] else "does NOT fit"
        rows.append(
            (
                "verdict",
                f"full offload {status}: {fmt_bytes(v['need_bytes'])} needed on {v['device']}, "
                f"{fmt_bytes(v['free_bytes'])} free",
            )
        )
        for f in v["fixes"]:
            rows.append(("", f"fix: {f['flags']} (needs {fmt_bytes(f['device_bytes'])})"))
    if dec["mode"] == "rpc":
        draft_on = ", ".join(dec["draft_devices"]) or "the CPU"
        line = (
            f"rpc: target {dec['target_gpu_layers']} layers over {', '.join(dec['devices'])}; "
            f"draft on {draft_on}, local"
        )
    else:
        line = (
            f"{dec['mode']}: n_gpu_layers target {dec['target_gpu_layers']}, draft {dec['draft_gpu_layers']}"
            + (f" on {', '.join(dec['devices'])}" if dec["devices"] else "")
        )
    rows.append(("decision", line))
    for line in ([dec["banner"]] if dec["banner"] else []) + [f"warning: {w}" for w in dec["warnings"]]:
        rows.append(("", line))
    return rows


def _tuner_rows(tm: dict[str, Any] | None) -> Rows:
    """What auto-K remembers of this pair on this build and device."""
    if tm is None:
        return []
    rows = []
    if not tm["enabled"]:
        rows.append(("auto-K", "memory off (--no-tuner-cache): costs are measured at every load"))
    elif "verify_ms" not in tm:
        rows.append(("auto-K", f"nothing remembered yet ({tm['path']}): costs are measured at load"))
    else:
        import datetime  # noqa: PLC0415

        when = datetime.datetime.fromtimestamp(tm["saved_at"]).strftime("%Y-%m-%d %H:%M")
        rows.append(("auto-K", f"remembered {when} in {tm['path']}"))
        rows.append(("", "verify ms by batch: " + ", ".join(f"{n}: {t}" for n, t in tm["verify_ms"].items())))
        catch = tm["catch_up_ms_per_token"]
        rows.append(
            ("", f"draft ms/token: {tm['draft_ms_per_token']}" + (f", catching up {catch}" if catch else ""))
        )
        if tm["acceptance_by_pos"]:
            acc = ", ".join(f"{a:.0%}" for a in tm["acceptance_by_pos"])
            rows.append(("", f"acceptance by position: {acc} (~{tm['evidence_rounds']:.0f} rounds)"))
    return rows + [("", n) for n in tm["notes"]]


def _verified_rows(ver: dict[str, Any] | None) -> Rows:
    """The models loaded at a small n_ctx: llama.cpp's log against the plan, and the rows' form."""
    if not ver:
        return []
    rows = [("verified", f"loaded with n_ctx {ver['n_ctx']}; llama.cpp's log vs the plan:")]
    rows += [("", line) for line in ver["summary"].splitlines()]
    for role, acc in ver["accuracy"].items():
        rows.append(("", f"{role:<6} plan error: " + ", ".join(f"{k} {v}" for k, v in acc.items())))
    if not ver["problems"]:
        rows.append(("", "placement as planned"))
    top_k = ver.get("backend_top_k", 0)
    rows.append(
        ("rows", f"sampled rows leave llama_decode as their {top_k} largest logits (backend top-k)")
        if top_k
        else ("rows", "whole logits rows (--backend-top-k: auto is off on a CPU)")
    )
    return rows


def _network_rows(net: dict[str, Any] | None) -> Rows:
    """A target split over rpc-servers: what the network adds to a verify, per batch size."""
    if not net:
        return []
    if "per_batch" not in net:
        return [
            ("network", net["skipped"]),
            ("", "verify ms per batch over RPC: " + ", ".join(f"{n}: {t}" for n, t in net["rpc_ms"].items())),
        ]
    rows = [("network", f"verify time per batch: split over RPC vs all-local ({net['local_placement']})")]
    for c in net["per_batch"]:
        rows.append(
            (
                "",
                f"{c['batch']:>3} tokens: {c['rpc_ms']:8.1f} ms vs {c['local_ms']:8.1f} ms; network "
                f"{c['network_ms']:7.1f} ms ({c['share']:.0%} of the verify)",
            )
        )
    return rows


def _table(rows: Rows) -> str:
    return "\n".join(f"{k:<10} {v}".rstrip() for k, v in rows)
