"""Recurrent and hybrid memories through the real llama.cpp: synthetic qwen35 (hybrid, with an MTP
block) and mamba (pure recurrent) GGUFs with SmolLM2's vocabulary load, decode, report their memory
kind, and roll back - through llama.cpp's n_rs_seq where the arch has it, through saved state
otherwise - to exactly the state a fresh context reaches; the MTP head is fed the right rows."""

from __future__ import annotations

import numpy as np
import pytest

from localspec.llama import Context, Model
from localspec.llama.mtp import MtpDrafter, n_layer_nextn
from tools.synthetic.arch import Qwen35Shape, write_mamba, write_qwen35


@pytest.fixture(scope="session")
def hybrid_dir(tmp_path_factory, smollm2_path):
    d = tmp_path_factory.mktemp("hybrid")
    write_qwen35(smollm2_path, d / "qwen35.gguf", shape=Qwen35Shape(nextn=1))
    write_qwen35(smollm2_path, d / "qwen35-bigram.gguf", shape=Qwen35Shape(nextn=1), mix=0.0)
    write_mamba(smollm2_path, d / "mamba.gguf")
    return d


def test_synthetic_models_load_with_smollm2_vocab(hybrid_dir, smollm2):
    for name, kind, nextn in (("qwen35.gguf", "hybrid", 1), ("mamba.gguf", "recurrent", 0)):
        with Model(hybrid_dir / name) as m:
            assert m.vocab == smollm2.vocab  # SmolLM2 can draft for it
            assert n_layer_nextn(m.ptr) == nextn
            with Context(m, n_ctx=128) as ctx:
                assert ctx.memory_kind == kind
                text = m.tokenize("Hello there")
                rows = ctx.eval(text, 0, len(text))
                assert rows.shape == (len(text), m.n_vocab) and np.isfinite(rows).all()
    with Context(smollm2, n_ctx=64) as ctx:
        assert (ctx.memory_kind, ctx.rollback) == ("attention", "truncate")


@pytest.mark.parametrize(
    "name, n_rs_seq, rollback",
    [("qwen35.gguf", 8, "rs"), ("qwen35.gguf", 0, "snapshot"), ("mamba.gguf", 8, "snapshot")],
)
def test_rollback_reaches_the_state_of_a_fresh_context(hybrid_dir, name, n_rs_seq, rollback):
    """A verify-shaped decode of 5 drafts, then keep 1..4 of them: the next token's logits match a
    fresh context that never saw the rejected ones (mamba has no rs: llama.cpp clamps it to 0)."""
    with Model(hybrid_dir / name) as m, Context(m, n_ctx=128, n_seq=2, n_rs_seq=n_rs_seq) as ctx:
        assert ctx.rollback == rollback
        with Context(m, n_ctx=128) as ref:
            prompt, drafts = m.tokenize("The quick brown fox jumps over"), [11, 22, 33, 44, 55]
            for keep in range(1, 5):
                ctx.reset()
                ctx.eval(prompt, 0, 1, seq=1)
                ctx.truncate(len(prompt), seq=1)  # settled: the next decode is tentative
                ctx.eval(drafts, len(prompt), len(drafts), seq=1)
                ctx.truncate(len(prompt) + keep, seq=1)
                past = ctx.past(1)
                assert past == (len(prompt) + keep if rollback == "rs" else len(prompt))
                tokens = prompt + drafts[:keep] + [99]
                got = ctx.eval(tokens[past:], past, 1, seq=1)[0]
                ref.reset()
                want = ref.eval(tokens, 0, 1)[0]
                np.testing.assert_allclose(got, want, atol=0.05)  # batch shapes differ: float noise only
                assert got.argmax() == want.argmax()
        stats = ctx.rollback_stats
        if rollback == "rs":
            assert stats.rs_rollbacks == 4 and stats.snapshots == 0
        else:
            assert stats.restores == 4 and stats.snapshot_bytes > 0


def test_rs_cannot_reach_before_its_decode_and_says_so(hybrid_dir):
    """rs keeps the states after the last decode's tokens, not before it: dropping all of them
    empties the sequence (past 0) rather than leaving a wrong state behind."""
    with Model(hybrid_dir / "qwen35.gguf") as m, Context(m, n_ctx=64, n_rs_seq=4) as ctx:
        ctx.eval([1, 2, 3], 0, 1)
        ctx.eval([4, 5], 3, 2)
        ctx.truncate(3)
        assert ctx.past(0) == 0 and ctx.rollback_stats.drops == 1


def test_mtp_head_on_a_bigram_trunk_predicts_the_token_after_next(hybrid_dir):
    """mix 0 makes the trunk a bigram and the exact head its copy: if every fed row pairs the right
    token with the right hidden state, each draft is what the target says one step later."""
    with (
        Model(hybrid_dir / "qwen35-bigram.gguf", model_params={"load_mtp": True}) as m,
        Context(m, n_ctx=128) as tgt,
    ):
        with MtpDrafter(tgt) as mtp:
            tokens = m.tokenize("The quick brown fox")
            tgt.eval(tokens[:-1], 0, 1)
            assert mtp.past(0) == tgt.past(0) == len(tokens) - 1  # fed by the target's decode
            predicted = []
            for _ in range(12):
                n = len(tokens)
                nxt = int(tgt.eval([tokens[-1]], n - 1, 1)[0].argmax())
                predicted.append(int(mtp.eval_batch([(0, [nxt], n, 1)])[0][0].argmax()))
                mtp.truncate(n)
                tokens.append(nxt)
            assert predicted[:-1] == tokens[-11:]


def test_mtp_refuses_models_without_mtp_layers(hybrid_dir, smollm2):
    from localspec.errors import LocalspecError

    with Context(smollm2, n_ctx=64) as ctx, pytest.raises(LocalspecError, match="no MTP layers"):
        MtpDrafter(ctx)
    with Model(hybrid_dir / "qwen35.gguf") as m, Context(m, n_ctx=64) as ctx:
        with pytest.raises(LocalspecError, match="without its MTP layers"):
            MtpDrafter(ctx)


def test_header_facts_agree_with_llama_cpp(hybrid_dir, smollm2_path):
    """gguf/memory_kind reads from the header what llama.h answers once loaded."""
    from localspec.draft_kinds import header_layers
    from localspec.gguf.file import read_header
    from localspec.gguf.memory_kind import memory_facts

    for path in (hybrid_dir / "qwen35.gguf", hybrid_dir / "mamba.gguf", smollm2_path):
        facts = memory_facts(path)
        with Model(path) as m, Context(m, n_ctx=64, n_rs_seq=8) as ctx:
            assert (facts.kind, facts.rollback) == (ctx.memory_kind, ctx.rollback), path.name
            assert header_layers(read_header(path))["mtp"] == n_layer_nextn(m.ptr)


@pytest.mark.parametrize("together", [(0, 1, 2), (1, 2)], ids=["unequal-decode", "another-ubatch"])
def test_a_decode_of_several_sequences_never_strands_a_rollback(hybrid_dir, together):
    """llama.cpp gathers a ubatch's sequences into adjacent cells by swapping cell records, not the
    rs planes behind them. With the cells out of order (seq 1, 0, 2), a decode of 3, 5 and 5 tokens
    (ubatches {0} then {1, 2}), or seq 0 alone and then {1, 2}, moves seq 0 off its planes: its
    rollback read seq 2's state (logits off by ~11) before the context decoded one sequence or one
    ubatch a call and ended the reach of those a call moved."""
    with Model(hybrid_dir / "qwen35.gguf") as m, Context(m, n_ctx=128, n_seq=3, n_rs_seq=8) as ctx:
        prompts = [m.tokenize(t) for t in ("The quick brown fox", "Once upon a time", "def f(x):")]
        drafts = [[11, 22, 33], [44, 55, 66, 77, 88], [12, 13, 14, 15, 16]]
        for s in (1, 0, 2):  # the cells they take
            ctx.eval(prompts[s], 0, 1, seq=s)
            ctx.truncate(len(prompts[s]), seq=s)
        rest = [s for s in (0, 1, 2) if s not in together]
        for group in ([rest] if rest else []) + [list(together)]:
            ctx.eval_batch([(s, drafts[s], len(prompts[s]), len(drafts[s])) for s in group])
        keeps = (2, 3, 4)
        for s in (0, 1, 2):
            ctx.truncate(len(prompts[s]) + keeps[s], seq=s)
        with Context(m, n_ctx=128) as ref:
            for s in (0, 1, 2):
                tokens = prompts[s] + drafts[s][: keeps[s]] + [99]
                past = ctx.past(s)
                got = ctx.eval(tokens[past:], past, 1, seq=s)[0]
                want = ref.eval(tokens, 0, 1)[0]
                ref.reset()
                np.testing.assert_allclose(got, want, atol=0.05)
        assert ctx.rollback_stats.rs_rollbacks >= 2
