"""The memory plan on recurrent memories, against what llama.cpp allocates (its context log and the
size of a saved sequence): a hybrid has KV on its attention layers only and recurrent state per slot
x (1 + n_rs_seq); a pure recurrent model has no KV cache at all; a snapshot rollback keeps one
saved state per slot in RAM."""

from __future__ import annotations

import pytest

from localspec.config.settings import Settings
from localspec.engine.loader import load_pair
from localspec.engine.placement import parse_log
from localspec.gguf.memory_plan import CHECKPOINTS_PER_SLOT, MiB, Runtime, plan_model, read_spec
from localspec.llama import Context, Model
from tools.synthetic.arch import Qwen35Shape, write_mamba, write_qwen35

LOG_ROUNDING = 0.006 * MiB  # llama.cpp logs MiB with two decimals


@pytest.fixture(scope="module")
def models(tmp_path_factory, smollm2_path):
    d = tmp_path_factory.mktemp("plan-recurrent")
    return {
        "qwen35": write_qwen35(smollm2_path, d / "qwen35.gguf", seed=1),
        "mamba": write_mamba(smollm2_path, d / "mamba.gguf", seed=2),
        "qwen35-mtp": write_qwen35(smollm2_path, d / "mtp.gguf", shape=Qwen35Shape(nextn=1), seed=3),
    }


def test_which_layers_hold_what(models):
    q, m = read_spec(models["qwen35"]), read_spec(models["mamba"])
    assert q.recurrent_layers == (True, True, True, False) and q.rs_rollback  # every 4th layer attends
    assert [kv for kv, _ in q.kv_dims] == [0, 0, 0, 2 * 64]
    assert q.state_dims == (3 * (128 + 2 * 2 * 32), 32 * 128)  # conv window of q, k, v; 4 heads of 32x32
    assert m.recurrent_layers == (True,) * 4 and not m.rs_rollback
    assert all(kv == (0, 0) for kv in m.kv_dims) and m.state_dims == (3 * 512, 16 * 512)
    mtp = read_spec(models["qwen35-mtp"])  # the MTP block (layer 4) keeps nothing in the target's memory
    assert mtp.recurrent_layers[4:] == (False,) and mtp.kv_dims[4] == (0, 0)


@pytest.mark.parametrize("n_seq, n_rs", [(1, 0), (4, 0), (4, 8)])
@pytest.mark.parametrize("which", ["qwen35", "mamba", "qwen35-mtp"])
def test_plan_matches_what_llama_cpp_allocates(models, which, n_seq, n_rs):
    with Model(models[which]) as model, Context(model, n_ctx=512, n_seq=n_seq, n_rs_seq=n_rs) as ctx:
        seen = parse_log(model.load_log + ctx.init_log)
        plan = plan_model(read_spec(model.path), Runtime(n_ctx=512, n_seq=n_seq, n_rs_seq=n_rs))
        assert plan.state_cells == seen.rs_cells * (
            1 + seen.rs_seq
        )  # mamba clamps n_rs_seq to 0, and so does the plan
        assert abs(plan.state_bytes - seen.rs_total) <= LOG_ROUNDING, (plan.state_bytes, seen.rs_total)
        assert abs(plan.kv_bytes - seen.kv_total) <= max(LOG_ROUNDING, 0.02 * seen.kv_total)
        if which == "mamba":
            assert plan.kv_bytes == seen.kv_total == 0
        if ctx.rollback == "rs":
            assert plan.snapshot_bytes == 0
            return
        # a snapshot rollback saves each slot's state: what llama_state_seq_get_size_ext says it is
        prompt = model.tokenize("The lighthouse")
        ctx.eval(prompt, 0, 1)
        ctx.truncate(len(prompt))  # settled: the next decode saves the state first
        ctx.eval(prompt[-1:], len(prompt), 1)
        saved = ctx.rollback_stats.snapshot_bytes
        assert 0 <= saved - plan.snapshot_bytes / n_seq <= 1024, (saved, plan.snapshot_bytes / n_seq)
        assert plan.checkpoint_bytes == CHECKPOINTS_PER_SLOT * plan.snapshot_bytes  # as many per slot at most


def test_the_loaded_pair_reports_its_recurrent_state(models):
    """The loader's plan (n_rs_seq for the target, none for its draft) against the loaded contexts."""
    s = Settings.load(target=models["qwen35"], draft=models["qwen35"], n_ctx=512, parallel=2, draft_max="4")
    with load_pair(s) as lp:
        target, draft = lp.report.models
        assert target.plan.state_cells == 2 * (1 + 4) and draft.plan.state_cells == 2
        assert target.plan.snapshot_bytes == 0 and draft.plan.snapshot_bytes > 0
        for m in (target, draft):
            planned, seen = m.sizes["recurrent state"]
            assert abs(planned - seen) <= LOG_ROUNDING, (m.role, planned, seen)
