"""`localspec bench`: aggregation on fixed numbers, prompt fitting, llama.cpp output parsing, the
reports, and one tiny real run of the command (SmolLM2 drafting for itself)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from localspec import paths
from localspec.bench import aggregate as agg
from localspec.bench import peer, report
from localspec.bench.prompts import KINDS, BenchPrompt, fit, fit_prompts, load_prompts, select
from localspec.bench.runner import BenchTable, configs_for, measure, parse_draft_max
from localspec.errors import LocalspecError


# -- aggregation -------------------------------------------------------------------------------
def test_spread_odd_even_single_empty():
    s = agg.spread([5, 1, 3, 2, 4])
    assert (s.median, s.lo, s.hi, s.q1, s.q3, s.n) == (3, 1, 5, 2, 4, 5)
    s = agg.spread([4, 1, 3, 2])
    assert (s.median, s.q1, s.q3, s.iqr) == (2.5, 1.75, 3.25, 1.5)
    assert agg.spread([7.0]) == agg.Spread(7.0, 7.0, 7.0, 7.0, 7.0, 1)
    assert agg.spread([]).n == 0


def _s(
    config,
    run,
    *,
    tokens,
    ms,
    pid="a",
    kind="chat",
    drafted=0,
    accepted=0,
    rounds=0,
    draft_ms=0.0,
    verify_ms=0.0,
    n_generated=None,
):
    n = tokens if n_generated is None else n_generated
    return agg.Sample(
        config=config,
        run=run,
        prompt_id=pid,
        kind=kind,
        n_prompt=16,
        n_generated=n,
        finish_reason="length",
        decode_tokens=tokens,
        decode_ms=ms,
        total_ms=ms + 100,
        draft_ms=draft_ms,
        verify_ms=verify_ms,
        n_drafted=drafted,
        n_accepted=accepted,
        rounds=rounds,
    )


def test_summaries_pool_per_run_and_compute_speedup():
    samples = [
        # plain: run 0 = (10+10) tokens / 2 s = 10 tok/s; run 1 = 20 / 1 s = 20; run 2 = 15 tok/s
        _s("plain", 0, tokens=10, ms=1000),
        _s("plain", 0, tokens=10, ms=1000, pid="b", kind="code"),
        _s("plain", 1, tokens=20, ms=1000),
        _s("plain", 2, tokens=15, ms=1000),
        # K=2: 30 tok/s in every run; 8 of 10 drafted accepted over 5 rounds
        _s("K=2", 0, tokens=30, ms=1000, drafted=4, accepted=3, rounds=2, draft_ms=200, verify_ms=600),
        _s("K=2", 1, tokens=30, ms=1000, drafted=4, accepted=4, rounds=2, draft_ms=200, verify_ms=600),
        _s(
            "K=2",
            2,
            tokens=30,
            ms=1000,
            drafted=2,
            accepted=1,
            rounds=1,
            draft_ms=200,
            verify_ms=600,
            n_generated=12,
        ),
    ]
    plain, k2 = agg.summarize_all(samples, [("plain", False, ""), ("K=2", True, "2")], gen_tokens=20)
    assert plain.decode_tok_s.median == 15 and (plain.decode_tok_s.lo, plain.decode_tok_s.hi) == (10, 20)
    assert plain.speedup == 1.0
    assert k2.speedup == pytest.approx(30 / 15)
    assert k2.acceptance_rate == pytest.approx(8 / 10)
    assert k2.mean_accepted_len == pytest.approx(8 / 5)
    assert (k2.draft_share, k2.verify_share) == (pytest.approx(0.2), pytest.approx(0.6))
    assert k2.early_stops == 1 and plain.early_stops == 3  # generated fewer than gen_tokens=20
    assert plain.by_kind == {"chat": pytest.approx(45 / 3), "code": 10}
    assert agg.best([plain, k2]) is k2 and agg.best([plain, k2], speculative=False) is plain


def test_no_baseline_means_no_speedup():
    (k,) = agg.summarize_all([_s("K=1", 0, tokens=5, ms=500)], [("K=1", True, "1")], gen_tokens=5)
    assert k.speedup == 0.0 and k.decode_tok_s.median == 10


# -- configurations and prompts ----------------------------------------------------------------
def test_parse_draft_max():
    assert parse_draft_max("1, 2,auto,2") == ["1", "2", "auto"]
    for bad in ("0", "x", "", "65"):
        with pytest.raises(LocalspecError):
            parse_draft_max(bad)
    assert [c.name for c in configs_for(["1", "auto"], has_draft=True)] == ["plain", "K=1", "auto"]
    assert [c.name for c in configs_for(["1"], has_draft=False)] == ["plain"]


def test_fit_cuts_and_pads():
    assert fit([1, 2, 3, 4], 2) == [1, 2]
    assert fit([1, 2], 7, [0]) == [1, 2, 0, 1, 2, 0, 1]
    with pytest.raises(LocalspecError):
        fit([], 3)


def test_bundled_prompts_cover_every_kind():
    prompts = load_prompts()
    kinds = {p.kind for p in prompts}
    assert kinds == set(KINDS)
    assert all(sum(p.kind == k for p in prompts) >= 3 for k in kinds)
    assert [p.kind for p in select(prompts, 1)] == sorted(kinds, key=[p.kind for p in prompts].index)


def test_bad_prompt_file(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text('{"id": "x"}\n')
    with pytest.raises(LocalspecError, match="line 1"):
        load_prompts(f)
    with pytest.raises(LocalspecError, match="not found"):
        load_prompts(tmp_path / "missing.jsonl")


@dataclass
class _Vocab:
    bos: int = 1
    add_bos: bool = True


@dataclass
class _FakeTok:
    """One token per character (code point); '<u>' and '</u>' are single special tokens."""

    vocab: _Vocab = field(default_factory=_Vocab)

    def tokenize(self, text, *, add_special=True, parse_special=False):
        out = [1] if add_special else []
        i = 0
        while i < len(text):
            for sp, tok in (("<u>", 2), ("</u>", 3)):
                if parse_special and text.startswith(sp, i):
                    out.append(tok)
                    i += len(sp)
                    break
            else:
                out.append(ord(text[i]))
                i += 1
        return out

    def token_text(self, token):
        return "<s>"

    def token_bytes(self, token, *, special=False):
        return chr(token).encode() if token > 3 else b""

    def chat_template(self):
        return "{% for m in messages %}<u>{{ m['content'] }}</u>{% endfor %}"


def test_fit_prompts_exact_length_with_chat_frame():
    prompts = [BenchPrompt("c", "chat", "hi", chat=True), BenchPrompt("t", "long", "abcdefghij")]
    chat_p, text_p = fit_prompts(prompts, _FakeTok(), 8)
    assert len(chat_p.tokens) == len(text_p.tokens) == 8
    assert chat_p.tokens[:2] == (1, 2) and chat_p.tokens[-1] == 3  # BOS, frame head ... frame tail
    assert text_p.tokens == (1, *map(ord, "abcdefg"))
    with pytest.raises(LocalspecError, match="too small"):
        fit_prompts(prompts[:1], _FakeTok(), 3)


# -- llama.cpp peer ----------------------------------------------------------------------------
PEER_OUT = """
main: encoded   40 tokens in    0.052 seconds, speed:  769.231 t/s
main: decoded   65 tokens in    1.300 seconds, speed:   50.000 t/s

main: n_draft   = 4
main: n_predict = 65
main: n_drafted = 48
main: n_accept  = 36
main: accept    = 75.000%
"""


def test_parse_speculative_simple():
    r = peer.parse_speculative_simple(PEER_OUT)
    assert (r.n_prompt, r.n_decoded, r.n_drafted, r.n_accepted) == (40, 65, 48, 36)
    assert (r.encode_s, r.decode_s) == (0.052, 1.3)
    with pytest.raises(LocalspecError, match="timing output"):
        peer.parse_speculative_simple("llama_model_load: error")


def test_peer_missing_binary_says_how_to_build(tmp_path):
    with pytest.raises(LocalspecError, match="make peer.*LOCALSPEC_PEER_BIN"):
        peer.peer_binary("llama-speculative-simple", tmp_path)


def test_peer_greedy_at_temperature_zero(tmp_path):
    ps = peer.PeerSettings(
        target=Path("t.gguf"),
        draft=Path("d.gguf"),
        n_threads=2,
        n_ctx=512,
        n_batch=512,
        n_ubatch=512,
        flash_attn="auto",
        kv_type="f16",
        top_k=40,
        top_p=0.95,
        min_p=0.05,
    )
    assert peer.sampling_args(ps, 0.0, 7) == ["--temp", "0", "--top-k", "1", "--seed", "7"]
    assert "--min-p" in peer.sampling_args(ps, 0.8, 7)
    (tmp_path / "llama-speculative-simple").write_text("")
    cmd = peer.speculative_simple_cmd(ps, "hello", 4, gen_tokens=8, temperature=0, seed=1, bin_dir=tmp_path)
    assert cmd[cmd.index("--spec-draft-n-max") + 1] == "4" and cmd[cmd.index("-t") + 1] == "2"
    assert cmd[cmd.index("-ngl") + 1] == "0" and "draft-simple" in cmd


# -- reports -----------------------------------------------------------------------------------
def _fake_report() -> report.BenchReport:
    samples = [_s("plain", r, tokens=10, ms=1000) for r in range(2)]
    samples += [_s("K=2", r, tokens=20, ms=1000, drafted=10, accepted=7, rounds=5) for r in range(2)]
    samples += [_s("auto", r, tokens=25, ms=1000, drafted=12, accepted=9, rounds=5) for r in range(2)]
    cfgs = [("plain", False, ""), ("K=2", True, "2"), ("auto", True, "auto")]
    ours = BenchTable(0.0, agg.summarize_all(samples, cfgs, 10), samples)
    # llama-bench's plain in the interleave: run 0 at 12.5 tok/s (ours 10: 0.8x), run 1 at 8 (1.25x)
    psamples = [_s("plain", 0, tokens=10, ms=800), _s("plain", 1, tokens=10, ms=1250)]
    psamples += [_s("K=2", r, tokens=15, ms=1000, drafted=10, accepted=6) for r in range(2)]
    pcfgs = [("plain", False, ""), ("K=2", True, "2")]
    theirs = BenchTable(0.0, agg.summarize_all(psamples, pcfgs, 10), psamples)
    res = report.TempResult(ours, theirs)
    return report.BenchReport(
        params={"n_prompts": 1, "kinds": ["chat"]}, machine={"cpu": "test"}, results=[res]
    )


def test_reports_from_fixed_numbers(tmp_path):
    rep = _fake_report()
    c = rep.results[0].comparison()
    assert c["localspec_config"] == "auto" and c["ratio"] == pytest.approx(25 / 15)
    # the plain ratio pairs samples by run: 0.8x and 1.25x, not the ratio of the two medians
    pr = rep.results[0].plain_ratio()
    assert (pr.n, pr.lo, pr.hi) == (2, pytest.approx(0.8), pytest.approx(1.25))
    md = report.markdown(rep, plot="bench.png")
    assert "| K=2 | 20.0 (20.0-20.0) |" in md and "2.00x" in md and "1.67x" in md and "bench.png" in md
    assert "| plain (llama-bench) | 10.2 (8.0-12.5) | - | - | 1.02x |" in md
    assert "plain: localspec / llama-bench 1.02x (0.80-1.25, 2 paired samples)" in md
    report.write_json(rep, tmp_path / "r.json")
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["tables"][0]["comparison"]["llamacpp_config"] == "K=2"
    assert data["tables"][0]["llamacpp_plain_tok_s"]["median"] == pytest.approx(10.25)
    report.plot(rep, tmp_path / "r.png")
    assert (tmp_path / "r.png").read_bytes()[:4] == b"\x89PNG"


def test_fitted_prompts_never_cut_through_a_character(smollm2):
    """Byte-level BPE splits CJK characters and emoji into several tokens: a cut at a fixed token
    count must not leave half a character (llama.cpp would see U+FFFD and loop on garbage)."""
    prompts = [p for p in load_prompts() if p.kind == "chinese"]
    prompts.append(
        BenchPrompt("emoji", "chat", "Party time 🎉🎊🥳 with friends 👩‍👩‍👧‍👦 and cake 🍰! " * 6, False)
    )
    for n in range(60, 90):
        for p in fit_prompts(prompts, smollm2, n):
            assert len(p.tokens) == n
            b"".join(smollm2.token_bytes(t) for t in p.tokens).decode("utf-8")  # raises if cut


# -- the command, for real but tiny -----------------------------------------------------------
def test_bench_command_tiny(smollm2_path, tmp_path):
    from click.testing import CliRunner

    from localspec.cli import cli

    out_json, out_md, out_png = tmp_path / "b.json", tmp_path / "b.md", tmp_path / "b.png"
    args = [
        "bench",
        "--target",
        str(smollm2_path),
        "--draft",
        str(smollm2_path),
        "--per-kind",
        "1",
        "--prompt-tokens",
        "40",
        "--gen-tokens",
        "8",
        "--runs",
        "1",
        "--warmup",
        "0",
        "--draft-max",
        "2,auto",
        "--temperature",
        "0,0.8",
        "--spec-mode",
        "pq,coupled,match",
        "--n-ctx",
        "256",
        "--n-threads",  # one thread: two OpenMP threads crawl when the 2 shared cores are busy
        "1",
        "--json",
        str(out_json),
        "--markdown",
        str(out_md),
        "--plot",
        str(out_png),
        "-q",
    ]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    data = json.loads(out_json.read_text())
    table, *sampled = data["tables"]  # greedy once; at T=0.8 the three rules side by side
    assert [(t["temperature"], t["spec_mode"]) for t in sampled] == [
        (0.8, m) for m in ("pq", "coupled", "match")
    ]
    acc = {t["spec_mode"]: {r["config"]: r["acceptance_rate"] for r in t["localspec"]} for t in sampled}
    # drafting for itself, p = q up to batch noise: the p/q and coupled rules keep nearly everything,
    # while sample-and-match keeps a draft only when the target's sample happens to equal it
    assert acc["pq"]["K=2"] > 0.85 and acc["pq"]["K=2"] >= acc["match"]["K=2"]
    assert acc["coupled"]["K=2"] > 0.85 and acc["coupled"]["K=2"] >= acc["match"]["K=2"]
    rows = {r["config"]: r for r in table["localspec"]}
    assert list(rows) == ["plain", "K=2", "auto"]
    plain = rows["plain"]["decode_tok_s"]["median"]
    assert plain > 0 and rows["plain"]["speedup"] == pytest.approx(1.0)
    for name in ("K=2", "auto"):
        r = rows[name]
        assert r["speedup"] == pytest.approx(r["decode_tok_s"]["median"] / plain)
        assert 0.0 <= r["acceptance_rate"] <= 1.0
        # a model drafting for itself at temperature 0 keeps nearly everything it drafts; auto may
        # draft nothing (a draft as dear as its target cannot pay) or offer lookup proposals, which
        # self-drafting does not make likelier: over 8 tokens one rejected proposal halves its rate
        assert r["acceptance_rate"] > 0.9 or name == "auto"
        assert 0.0 <= r["draft_share"] + r["verify_share"] <= 1.0
    assert {s["n_prompt"] for s in table["samples"]} == {40}
    assert len(table["samples"]) == 3 * len(KINDS)  # configurations x one prompt per kind
    md = out_md.read_text()
    assert "| plain |" in md and "b.png" in md and "### T=0.8 match" in md
    assert out_png.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_peer_runs_llama_cpp(smollm2_path):
    """The real llama-speculative-simple, when tools/build/build_peer.sh has built it."""
    if not (paths.peer_bin() / "llama-speculative-simple").exists():
        pytest.skip("llama.cpp peer not built (tools/build/build_peer.sh)")
    from localspec.bench.prompts import FittedPrompt

    ps = peer.PeerSettings(
        target=smollm2_path,
        draft=smollm2_path,
        n_threads=1,
        n_ctx=256,
        n_batch=256,
        n_ubatch=256,
        flash_attn="auto",
        kv_type="f16",
        top_k=40,
        top_p=0.95,
        min_p=0.05,
    )
    side = peer.PeerSide(ps, lambda _p: "The capital of France is", [2], temperature=0, gen_tokens=8)
    (table,) = measure(
        [side], [FittedPrompt("x", "long", (1, 2, 3))], temperature=0, gen_tokens=8, runs=1, warmup=0
    )
    plain, k2 = table.summaries  # llama-bench's plain decode first, inside the interleave
    assert not plain.speculative and plain.decode_tok_s.median > 0
    assert table.samples[0].n_prompt == 3 and table.samples[0].decode_tokens == 8
    assert k2.decode_tok_s.median > 0 and k2.acceptance_rate > 0.9


def test_bench_concurrency_tiny(smollm2_path, tmp_path):
    from click.testing import CliRunner

    from localspec.cli import cli

    out_json, out_md = tmp_path / "c.json", tmp_path / "c.md"
    args = ["bench", "--target", str(smollm2_path), "--draft", str(smollm2_path), "--per-kind", "1",
            "--prompt-tokens", "40", "--gen-tokens", "6", "--runs", "1", "--warmup", "0", "--draft-max", "2",
            "--concurrency", "1,4", "--n-ctx", "128", "--json", str(out_json), "--markdown", str(out_md), "-q"]  # fmt: skip
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    rows = {(r["config"], r["concurrency"]): r for r in json.loads(out_json.read_text())["rows"]}
    assert set(rows) == {(c, n) for c in ("plain", "K=2") for n in (1, 4)}
    for r in rows.values():
        n = len(KINDS) // r["concurrency"] * r["concurrency"]  # whole waves of N prompts
        assert r["n_requests"] == n and n <= r["n_tokens"] <= 6 * n
        assert r["aggregate_tok_s"] > 0 and r["per_request_tok_s"] > 0 and r["ttft_ms"] > 0
    # four at once: each request shares the rounds, so it runs slower than alone
    assert rows[("plain", 4)]["per_request_tok_s"] < rows[("plain", 1)]["per_request_tok_s"]
    assert "| localspec | K=2 | 4 |" in out_md.read_text()


def test_bench_concurrency_is_checked(smollm2_path):
    from click.testing import CliRunner

    from localspec.cli import cli

    result = CliRunner().invoke(cli, ["bench", "--target", str(smollm2_path), "--concurrency", "0,x"])
    assert result.exit_code == 1 and "--concurrency takes numbers" in str(result.exception)


def test_peer_server_command(tmp_path):
    ps = peer.PeerSettings(
        target=Path("t.gguf"), draft=Path("d.gguf"), n_threads=2, n_ctx=512, n_batch=512, n_ubatch=512,
        flash_attn="auto", kv_type="f16", top_k=40, top_p=0.95, min_p=0.05,
    )  # fmt: skip
    (tmp_path / "llama-server").write_text("")
    plain = peer.server_cmd(ps, 4, None, port=8080, bin_dir=tmp_path)
    assert plain[plain.index("-np") + 1] == "4" and plain[plain.index("-c") + 1] == "2048" and "-kvu" in plain
    assert "-md" not in plain
    spec = peer.server_cmd(ps, 4, 3, port=8080, bin_dir=tmp_path)
    assert spec[spec.index("--spec-draft-n-max") + 1] == "3" and spec[spec.index("-md") + 1] == "d.gguf"
    assert peer.server_sampling(ps, 0.0) == {"temperature": 0.0, "top_k": 1}


@pytest.mark.slow
def test_peer_server_concurrency(smollm2_path):
    """The real llama-server -np 2, when tools/build/build_peer.sh has built it."""
    if not (paths.peer_bin() / "llama-server").exists():
        pytest.skip("llama.cpp peer not built (tools/build/build_peer.sh)")
    from localspec.bench import concurrency as conc
    from localspec.bench.prompts import FittedPrompt

    ps = peer.PeerSettings(
        target=smollm2_path, draft=smollm2_path, n_threads=1, n_ctx=256, n_batch=256, n_ubatch=256,
        flash_attn="auto", kv_type="f16", top_k=40, top_p=0.95, min_p=0.05,
    )  # fmt: skip
    prompts = [FittedPrompt(str(i), "long", (1,)) for i in range(2)]
    with conc.PeerServer(ps, 2, 2) as server:
        wall, reqs = conc.peer_wave(
            server, ps, prompts, lambda p: "The capital of France is", temperature=0, gen_tokens=8, seed=0
        )
    assert wall > 0 and all(r.n_generated > 0 and r.total_s > 0 for r in reqs)
