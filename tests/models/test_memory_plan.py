"""The memory planner: against llama.cpp's own numbers on the real models, and on paper for big pairs
(realistic GGUF headers over sparse files) on a 24 GB card."""

from __future__ import annotations

import re

import pytest

from localspec.engine.placement import parse_log
from localspec.gguf.memory_fit import verdict
from localspec.gguf.memory_plan import GiB, MiB, Runtime, plan_model, plan_pair, read_spec

from .. import sparse_gguf

CARD_24GB_FREE = 23 * GiB  # an RTX 4090 / 3090 with a desktop running
REAL_CASES = [  # n_ctx, n_batch (= n_ubatch), flash_attn, kv_type
    (512, 512, "auto", "f16"),
    (300, 512, "auto", "f16"),  # padded to 256 cells; batches clamp to the requested n_ctx
    (4096, 512, "auto", "q8_0"),
    (2048, 128, "off", "f16"),
]


def _measured(model, n_ctx, n_batch, fa, kv):
    from localspec.llama import Context

    with Context(model, n_ctx=n_ctx, n_batch=n_batch, n_ubatch=n_batch, flash_attn=fa, kv_type=kv) as ctx:
        return parse_log(model.load_log + ctx.init_log)


def _close(planned: int, seen: int, tol: float = 0.10) -> bool:
    return abs(planned - seen) <= tol * seen


@pytest.fixture(scope="module")
def gemma(gemma_path):
    from localspec.llama import Model

    with Model(gemma_path) as m:
        yield m


@pytest.mark.parametrize("case", REAL_CASES, ids=lambda c: "-".join(map(str, c)))
@pytest.mark.parametrize("which", ["smollm2", "gemma"])
def test_plan_matches_llama_cpp_log(which, case, smollm2, gemma):
    model = smollm2 if which == "smollm2" else gemma
    n_ctx, n_batch, fa, kv = case
    plan = plan_model(
        read_spec(model.path),
        Runtime(n_ctx=n_ctx, n_batch=n_batch, n_ubatch=n_batch, flash_attn=fa, kv_type=kv),
    )
    seen = _measured(model, n_ctx, n_batch, fa, kv)
    assert _close(plan.spec.file_weights_bytes, seen.host_sum("model"))
    assert _close(plan.kv_bytes, seen.kv_total), (plan.kv_bytes / MiB, seen.kv_total / MiB)
    assert seen.kv_cells and all(c == plan.n_cells for c in seen.kv_cells)
    assert _close(plan.compute_bytes, seen.host_sum("compute")), (
        plan.compute_bytes / MiB,
        seen.host_sum("compute") / MiB,
    )
    assert plan.spec.file_weights_bytes == model.size_bytes  # llama_model_size agrees with the header


def test_default_pair_plan_matches_log(standin_pair):
    from localspec.config.pair_toml import read_pair
    from localspec.llama import Context, Model

    pair = read_pair(standin_pair)
    plan = plan_pair(read_spec(pair.target), read_spec(pair.draft), Runtime(n_ctx=1024))
    for mp, path in ((plan.target, pair.target), (plan.draft, pair.draft)):
        with Model(path) as m, Context(m, n_ctx=1024) as ctx:
            seen = parse_log(m.load_log + ctx.init_log)
        assert _close(mp.spec.file_weights_bytes, seen.host_sum("model"))
        assert _close(mp.kv_bytes, seen.kv_total)


def test_gemma3_sliding_window_layers(gemma_path):
    spec = read_spec(gemma_path)
    assert spec.n_swa == 512
    assert [i for i, swa in enumerate(spec.swa_layers) if not swa] == [5, 11, 17]  # every 6th is global
    full = plan_model(spec, Runtime(n_ctx=8192, swa_full=True))
    window = plan_model(spec, Runtime(n_ctx=8192, swa_full=False))
    per_cell_layer = 2 * 256 * 2  # K + V, one KV head of 256, f16
    assert full.kv_bytes == 18 * 8192 * per_cell_layer
    # SWA layers keep window + one micro-batch, padded to 256: 512 + 512 -> 1024 cells
    assert window.swa_cells == 1024
    assert window.kv_bytes == (3 * 8192 + 15 * 1024) * per_cell_layer


def test_tied_output_is_counted_on_the_device(smollm2_path):
    spec = read_spec(smollm2_path)  # SmolLM2 ties its head to token_embd
    embd = 30081024
    assert spec.input_bytes == embd
    assert spec.output_bytes == embd + 576 * 4  # the duplicated head + output_norm
    assert sum(spec.layer_bytes) + spec.input_bytes + 576 * 4 == spec.file_weights_bytes


def test_per_layer_kv_heads_and_swa_pattern_arrays(tmp_path):
    from gguf import GGMLQuantizationType as Q

    n_layer = 4
    tensors = [("token_embd.weight", (256, 1000), Q.F16)] + [
        (f"blk.{i}.attn_q.weight", (256, 256), Q.F16) for i in range(n_layer)
    ]
    path = sparse_gguf.write_sparse(
        tmp_path / "odd.gguf",
        "llama",
        {
            "{arch}.block_count": n_layer,
            "{arch}.embedding_length": 256,
            "{arch}.feed_forward_length": 512,
            "{arch}.attention.head_count": 4,
            "{arch}.attention.head_count_kv": [0, 1, 2, 4],
            "{arch}.attention.sliding_window": 128,
            "{arch}.attention.sliding_window_pattern": [True, True, False, False],
        },
        tensors,
    )
    spec = read_spec(path)
    assert spec.kv_dims == ((0, 0), (64, 64), (128, 128), (256, 256))
    assert spec.swa_layers == (True, True, False, False)
    plan = plan_model(spec, Runtime(n_ctx=1024, n_ubatch=128, n_batch=128, swa_full=False))
    assert plan.swa_cells == 256
    assert plan.kv_layer_bytes == (0, 256 * 64 * 4, 1024 * 128 * 4, 1024 * 256 * 4)


# ---------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def big(tmp_path_factory):
    d = tmp_path_factory.mktemp("sparse")
    return {
        "t32b": read_spec(sparse_gguf.qwen25_32b_q4_k_m(d)),
        "d05b": read_spec(sparse_gguf.qwen25_05b_q8_0(d)),
        "d3b": read_spec(sparse_gguf.qwen25_3b_q8_0(d)),
        "t70b": read_spec(sparse_gguf.llama3_70b_q4_k_m(d)),
        "dir": d,
    }


def test_sparse_files_are_realistic_and_use_no_disk(big):
    path = big["t32b"].path
    assert 19.7e9 < path.stat().st_size < 20.0e9  # the real Q4_K_M file is 19.85 GB
    assert path.stat().st_blocks * 512 < 1 << 20
    assert 32.5e9 < big["t32b"].n_params < 33e9
    assert 0.45e9 < big["d05b"].file_weights_bytes < 0.6e9


def _flags(fix: str) -> dict[str, str]:
    return dict(re.findall(r"--(n-ctx|kv-type) (\S+)", fix))


def _apply(plan, flags):
    changes = {}
    if "n-ctx" in flags:
        changes["n_ctx"] = int(flags["n-ctx"])
    if "kv-type" in flags:
        changes["kv_type"] = flags["kv-type"]
    return plan.with_runtime(**changes)


def test_32b_pair_at_8k_fits_a_24gb_card(big):
    plan = plan_pair(big["t32b"], big["d05b"], Runtime(n_ctx=8192))
    assert plan.target.kv_bytes == 2 * GiB  # 64 layers x 8 heads x 128 x (K+V) x f16 x 8192
    assert plan.draft.kv_bytes == 96 * MiB
    # the token embeddings stay in system RAM (llama.cpp keeps the input layer on the CPU)
    assert (
        plan.target.device_weights_bytes == plan.target.spec.file_weights_bytes - plan.target.spec.input_bytes
    )
    v = verdict(plan, CARD_24GB_FREE, "CUDA0")
    assert v.fits and not v.fixes
    assert 21 * GiB < v.need_bytes < 22.5 * GiB


def test_32b_pair_at_32k_does_not_fit_and_says_what_would(big):
    plan = plan_pair(big["t32b"], big["d05b"], Runtime(n_ctx=32768))
    v = verdict(plan, CARD_24GB_FREE, "CUDA0")
    assert not v.fits
    assert 27 * GiB < v.need_bytes < 29 * GiB
    msg = v.message()
    assert "KV 8.00 GiB" in msg and "23.00 GiB is free" in msg
    fixes = [str(f) for f in v.fixes]
    ctx_only = next(f for f in fixes if f.startswith("--n-ctx"))
    q8 = next(f for f in fixes if f.startswith("--kv-type q8_0 --n-ctx"))
    n_ctx, n_ctx_q8 = int(_flags(ctx_only)["n-ctx"]), int(_flags(q8)["n-ctx"])
    assert 8192 <= n_ctx < 16384 and n_ctx_q8 > n_ctx
    for f in (ctx_only, q8):  # every suggestion really fits, and is the largest context that does
        fixed = _apply(plan, _flags(f))
        assert fixed.device_bytes <= CARD_24GB_FREE
        assert fixed.with_runtime(n_ctx=fixed.rt.n_ctx + 1024).device_bytes > CARD_24GB_FREE
    assert not any("draft" in f for f in fixes)  # the target alone does not fit at 32k either


def test_q8_kv_alone_is_suggested_when_it_is_enough(big):
    plan = plan_pair(big["t32b"], big["d05b"], Runtime(n_ctx=16384))
    v = verdict(plan, CARD_24GB_FREE)
    assert not v.fits
    q8 = next(f for f in v.fixes if f.flags == "--kv-type q8_0")
    assert "KV 4.19 GiB -> 2.22 GiB" in q8.note
    off = verdict(plan.with_runtime(flash_attn="off"), CARD_24GB_FREE)
    assert not off.fits and any(f.flags.startswith("--kv-type q8_0 --flash-attn on") for f in off.fixes)


def test_a_big_draft_gets_a_smaller_draft_suggestion(big):
    plan = plan_pair(big["t32b"], big["d3b"], Runtime(n_ctx=8192))
    v = verdict(plan, CARD_24GB_FREE)
    assert not v.fits
    draft_fix = next(f for f in v.fixes if f.flags.startswith("a smaller draft"))
    room = CARD_24GB_FREE - plan.without_draft().device_bytes
    assert 0 < room < plan.draft.device_bytes
    assert draft_fix.device_bytes == CARD_24GB_FREE


def test_a_70b_target_needs_a_smaller_quantization(big):
    plan = plan_pair(big["t70b"], big["d05b"], Runtime(n_ctx=8192))
    v = verdict(plan, CARD_24GB_FREE)
    assert not v.fits and len(v.fixes) == 1
    fix = v.fixes[0].flags
    assert fix.startswith("a smaller target") and re.search(r"about 2\.\d bits/weight, now 4\.\d", fix)


def test_compute_buffer_without_flash_attention_grows_with_context(big):
    on = plan_model(big["t32b"], Runtime(n_ctx=32768, flash_attn="on"))
    off = plan_model(big["t32b"], Runtime(n_ctx=32768, flash_attn="off"))
    assert on.compute_bytes < 400 * MiB  # the logits of one 512-token micro-batch dominate
    assert off.compute_bytes > 2.5 * GiB  # 40 heads x 32768 x 512 f32 scores
