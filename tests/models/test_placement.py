"""Placement policy with synthetic device inventories, and verification against llama.cpp log lines
(real ones captured from this CPU build, and GPU ones built from llama.cpp's format strings)."""

from __future__ import annotations

from pathlib import Path

import pytest

from localspec.config.settings import Settings
from localspec.engine import placement as P
from localspec.errors import LocalspecError
from localspec.gguf.memory_plan import GiB, MiB, Runtime, plan_pair, read_spec
from localspec.llama import Device

from .. import sparse_gguf

DATA = Path(__file__).parent.parent / "data"
CPU = Device("CPU", "Intel(R) Xeon(R)", "cpu", 64 * GiB, 60 * GiB, "CPU")


def gpu(name: str = "CUDA0", free_gib: float = 23.0, total_gib: float = 24.0, kind: str = "gpu") -> Device:
    return Device(name, f"NVIDIA test card {name}", kind, int(total_gib * GiB), int(free_gib * GiB), "CUDA")


def settings(**kw) -> Settings:
    return Settings(**kw)


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    d = tmp_path_factory.mktemp("sparse")
    return read_spec(sparse_gguf.qwen25_32b_q4_k_m(d)), read_spec(sparse_gguf.qwen25_05b_q8_0(d))


@pytest.fixture(scope="module")
def plan8k(big):
    return plan_pair(*big, Runtime(n_ctx=8192))


@pytest.fixture(scope="module")
def plan32k(big):
    return plan_pair(*big, Runtime(n_ctx=32768))


# -- policy ------------------------------------------------------------------------------------------
def test_fits_offloads_everything_on_one_card(plan8k):
    d = P.enforce(plan8k, [CPU, gpu()], settings())
    assert (d.mode, d.target_gpu_layers, d.draft_gpu_layers) == ("gpu", 65, 25)
    assert d.devices == ("CUDA0",) and not d.pin
    assert d.banner is None and not d.warnings and d.messages() == []
    assert d.verdict.fits


def test_does_not_fit_refuses_with_the_numbers(plan32k):
    with pytest.raises(LocalspecError) as e:
        P.enforce(plan32k, [CPU, gpu()], settings())
    msg = str(e.value)
    assert "does not fit" in msg and "CUDA0" in msg
    assert "--n-ctx 12288" in msg and "--kv-type q8_0 --n-ctx" in msg
    assert "--allow-partial-offload" in msg and "53/65 target layers" in msg


def test_partial_allowed_warns_loudly(plan32k):
    d = P.enforce(plan32k, [CPU, gpu()], settings(allow_partial_offload=True))
    assert d.mode == "partial"
    assert d.target_gpu_layers == 53 and d.draft_gpu_layers == 25  # the draft stays whole on the card
    assert d.devices == ("CUDA0",)
    (w,) = d.warnings
    assert w.startswith("PARTIAL OFFLOAD: 53/65 target layers on CUDA0") and "speculative gains shrink" in w
    assert d.messages()[0].startswith("warning: PARTIAL OFFLOAD")
    # what it keeps on the card really fits
    used = plan32k.target.partial_device_bytes(53) + plan32k.draft.device_bytes + plan32k.headroom_bytes
    assert used <= 23 * GiB < used + plan32k.target.partial_device_bytes(1) - plan32k.target.compute_bytes


def test_explicit_partial_needs_the_flag(plan8k):
    with pytest.raises(LocalspecError, match="--n-gpu-layers 40 offloads only 40 of the target's 65"):
        P.enforce(plan8k, [CPU, gpu()], settings(n_gpu_layers=40))
    d = P.enforce(plan8k, [CPU, gpu()], settings(n_gpu_layers=40, allow_partial_offload=True))
    assert (d.mode, d.target_gpu_layers) == ("partial", 40)


def test_no_room_even_for_the_draft_runs_on_cpu(plan8k):
    d = P.enforce(plan8k, [CPU, gpu(free_gib=0.5, total_gib=2)], settings(allow_partial_offload=True))
    assert (d.mode, d.target_gpu_layers, d.draft_gpu_layers) == ("cpu", 0, 0)
    assert "not even the draft fits on CUDA0" in d.banner


def test_cpu_only_build_gets_a_one_line_banner(plan8k):
    d = P.enforce(plan8k, [CPU], settings())
    assert (d.mode, d.target_gpu_layers, d.draft_gpu_layers) == ("cpu", 0, 0)
    assert d.banner == P.CPU_ONLY_BANNER and "\n" not in d.banner
    assert d.messages() == [P.CPU_ONLY_BANNER]


def test_cpu_run_warns_when_system_memory_is_short(plan8k):
    small = Device("CPU", "tiny box", "cpu", 16 * GiB, 8 * GiB, "CPU")
    (w,) = P.enforce(plan8k, [small], settings()).warnings
    assert "of system memory" in w and "8.00 GiB is free" in w


def test_n_gpu_layers_zero_is_respected_and_said(plan8k):
    d = P.enforce(plan8k, [CPU, gpu()], settings(n_gpu_layers=0))
    assert d.mode == "cpu" and "--n-gpu-layers 0" in d.banner and "CUDA0 unused" in d.banner


def test_two_cards_pin_the_pair_to_the_one_that_holds_it(plan8k):
    d = P.enforce(plan8k, [CPU, gpu("CUDA0", free_gib=10), gpu("CUDA1", free_gib=23)], settings())
    assert d.mode == "gpu" and d.devices == ("CUDA1",) and d.pin  # draft and target on the same card


def test_two_small_cards_split_both_models_across_both(plan8k):
    d = P.enforce(plan8k, [CPU, gpu("CUDA0", 15, 16), gpu("CUDA1", 15, 16)], settings())
    assert d.mode == "gpu" and d.devices == ("CUDA0", "CUDA1") and not d.pin
    assert d.verdict.device == "CUDA0 + CUDA1"


def test_integrated_gpu_only_when_no_discrete_one(plan8k):
    igpu = gpu("Vulkan1", free_gib=30, total_gib=32, kind="igpu")
    assert P.enforce(plan8k, [CPU, igpu], settings()).devices == ("Vulkan1",)
    assert P.enforce(plan8k, [CPU, igpu, gpu("Vulkan0")], settings()).devices == ("Vulkan0",)


# -- verification against llama.cpp's log --------------------------------------------------------------
def _real(name: str) -> list[str]:
    return (DATA / f"llama_log_{name}_cpu.txt").read_text().splitlines()


def test_parse_real_cpu_log_lines():
    smol = P.parse_log(_real("smollm2"))
    assert smol.buffers["model"] == {"CPU_Mapped": round(92.10 * MiB)}
    assert smol.kv_total == round(11.25 * MiB) and smol.kv_cells == [512]
    assert smol.host_sum("compute") == round(98.25 * MiB)
    assert (
        smol.offloaded is None
        and set(smol.layer_devices.values()) == {"CPU"}
        and len(smol.layer_devices) == 31
    )  # + the output layer
    assert smol.accel_devices == set() and smol.layers_on_accel(30) == 0
    gemma = P.parse_log(_real("gemma3"))
    assert gemma.kv_total == round(9.0 * MiB) and gemma.kv_cells == [512, 512]  # global + SWA caches
    assert gemma.host_sum("model") == round(235.16 * MiB)  # the CPU_REPACK copy is not counted twice
    assert gemma.buffers["model"]["CPU_REPACK"] == round(12.66 * MiB)


def test_verify_real_cpu_logs_against_the_plan(smollm2_path, gemma_path):
    s = Settings(target=smollm2_path, draft=gemma_path, n_ctx=512)
    plan = P.plan_for(s)
    decision = P.enforce(plan, [CPU], s)
    report = P.verify(plan, decision, _real("smollm2"), _real("gemma3"))
    assert report.problems == [] and report.require_clean(s) == []
    for m in report.models:
        assert all(m.off_by(k) < P.TOLERANCE for k in m.sizes), m.sizes
    text = report.summary()
    assert text.splitlines()[0] == "placement: CPU only"
    assert "target all layers on the CPU; weights 92.1 MiB, KV 11.2 MiB" in text


# Built from llama.cpp's format strings (llama-model.cpp / llama-kv-cache.cpp / llama-context.cpp):
# this machine has no GPU to capture them from.
def _gpu_log(
    n_layer: int,
    offloaded: int,
    dev: str,
    model_mib: float,
    kv_mib: float,
    compute_mib: float,
    cells: int = 8192,
) -> list[str]:
    lines = [
        f"load_tensors: layer {i:3d} assigned to device {dev if i >= n_layer + 1 - offloaded else 'CPU'}, "
        "is_swa = 0"
        for i in range(n_layer + 1)
    ]
    lines += [
        f"load_tensors: offloading {min(offloaded, n_layer)} repeating layers to GPU",
        f"load_tensors: offloaded {offloaded}/{n_layer + 1} layers to GPU",
        f"load_tensors: {dev:>12} model buffer size = {model_mib:8.2f} MiB",
        f"load_tensors: {'CPU_Mapped':>12} model buffer size = {563.63:8.2f} MiB",
        f"llama_context: {'CUDA_Host':>10}  output buffer size = {0.58:8.2f} MiB",
        f"llama_kv_cache: {dev:>10} KV buffer size = {kv_mib:8.2f} MiB",
        f"llama_kv_cache: size = {kv_mib:8.2f} MiB ({cells:6d} cells,  {n_layer:2d} layers,  1/1 seqs), "
        f"K (f16): {kv_mib / 2:8.2f} MiB, V (f16): {kv_mib / 2:8.2f} MiB",
        f"sched_reserve: {dev:>10} compute buffer size = {compute_mib:8.2f} MiB",
        f"sched_reserve: {'CUDA_Host':>10} compute buffer size = {26.01:8.2f} MiB",
    ]
    return lines


def _as_planned(plan, who: str, dev: str = "CUDA0", offloaded: int | None = None) -> list[str]:
    mp = getattr(plan, who)
    n = mp.spec.n_layer
    return _gpu_log(
        n,
        n + 1 if offloaded is None else offloaded,
        dev,
        mp.device_weights_bytes / MiB,
        mp.kv_bytes / MiB,
        mp.compute_bytes / MiB,
    )


def test_verify_gpu_placement_as_planned(plan8k):
    s = settings()
    d = P.enforce(plan8k, [CPU, gpu()], s)
    report = P.verify(plan8k, d, _as_planned(plan8k, "target"), _as_planned(plan8k, "draft"))
    assert report.problems == []
    assert report.models[0].layers == 65 and report.models[1].layers == 25
    assert "target 65/65 layers offloaded" in report.summary()


def test_verify_catches_a_draft_on_the_cpu(plan8k):
    s = settings()
    d = P.enforce(plan8k, [CPU, gpu()], s)
    report = P.verify(plan8k, d, _as_planned(plan8k, "target"), _as_planned(plan8k, "draft", offloaded=0))
    assert report.problems == [
        "draft: only 0/25 layers on the accelerator (planned 25); the rest run from system RAM"
    ]
    with pytest.raises(LocalspecError, match="placement differs from the plan: draft: only 0/25"):
        report.require_clean(s)


def test_verify_catches_a_draft_on_another_device(plan8k):
    s = settings()
    d = P.enforce(plan8k, [CPU, gpu("CUDA0", 23), gpu("CUDA1", 10)], s)
    report = P.verify(
        plan8k, d, _as_planned(plan8k, "target", "CUDA0"), _as_planned(plan8k, "draft", "CUDA1")
    )
    assert report.problems == ["the draft is on CUDA1 but the target on CUDA0"]
    with pytest.raises(LocalspecError):
        report.require_clean(s)


def test_verify_catches_target_layers_spilling(plan8k):
    d = P.enforce(plan8k, [CPU, gpu()], settings())
    report = P.verify(plan8k, d, _as_planned(plan8k, "target", offloaded=60), _as_planned(plan8k, "draft"))
    (problem,) = report.problems
    assert problem.startswith("target: only 60/65 layers")
    with pytest.raises(LocalspecError):
        report.require_clean(settings())
    assert report.require_clean(settings(allow_partial_offload=True)) == [problem]  # then a warning


def test_verify_partial_offload_as_decided(plan32k):
    d = P.enforce(plan32k, [CPU, gpu()], settings(allow_partial_offload=True))
    mp = plan32k.target
    first = mp.spec.n_layer - 53
    target_log = _gpu_log(
        64,
        53,
        "CUDA0",
        sum(mp.spec.layer_bytes[first:]) / MiB,
        sum(mp.kv_layer_bytes[first:]) / MiB,
        mp.compute_bytes / MiB,
        cells=32768,
    )
    report = P.verify(plan32k, d, target_log, _as_planned(plan32k, "draft"))
    assert report.problems == []
    assert all(report.models[0].off_by(k) < 0.01 for k in ("weights", "KV"))
    assert report.summary().splitlines()[0] == "placement: CUDA0 + CPU"


def test_layer_assignments_count_when_the_summary_line_is_missing():
    lines = [
        f"load_tensors: layer {i:3d} assigned to device {'CUDA0' if i >= 10 else 'CPU'}, is_swa = 0"
        for i in range(31)
    ]
    obs = P.parse_log(lines)
    assert obs.offloaded is None and obs.layers_on_accel(30) == 21 and obs.accel_devices == {"CUDA0"}


# -- the engine runs all of this before and after loading ------------------------------------------------
def test_engine_plans_enforces_and_verifies(smollm2_path):
    from localspec.engine import Engine

    said: list[str] = []
    s = Settings(target=smollm2_path, draft=smollm2_path, n_ctx=512)
    with Engine(s, log=said.append) as eng:
        assert eng.decision.mode == "cpu" and eng.placement.problems == []
    assert said[0] == P.CPU_ONLY_BANNER and said[1].startswith("placement: CPU only\n  target all layers")


def test_engine_refuses_before_loading_when_the_card_is_too_small(smollm2_path, monkeypatch):
    from localspec import llama
    from localspec.engine import Engine

    monkeypatch.setattr(llama, "devices", lambda: [CPU, gpu(free_gib=1.0, total_gib=2)])
    loaded = []
    monkeypatch.setattr(llama, "Model", lambda *a, **k: loaded.append(a))
    with pytest.raises(LocalspecError, match="full offload does not fit.*--n-ctx"):
        Engine(Settings(target=smollm2_path, draft=smollm2_path, n_ctx=8192))
    assert loaded == []


def test_pinning_to_an_unknown_device_is_a_clear_error(smollm2_path):
    from localspec import llama

    with pytest.raises(LocalspecError, match="no llama.cpp device named 'CUDA7'"):
        llama.Model(smollm2_path, devices=["CUDA7"])
