"""Presets, `localspec pull` / `list` and `--pair PRESET`, run with the real huggingface_hub client
against a Hub on loopback (tests/fake_hub.py). The served GGUFs are tiny real models made by our
converter from tests/fixtures_hf checkpoints (a few hundred KB, so transfers stay small)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from localspec.convert.synthetic_mmproj import ProjectorShape, write_mmproj
from localspec.errors import LocalspecError

from ..fake_hub import FakeHub
from ..fixtures_hf import tiny_hf
from ..helpers import png

ROOT = Path(__file__).resolve().parents[2]
TARGET = ("acme/tiny-GGUF", "tiny-a-Q4_K_M.gguf")
DRAFT = ("acme/tiny-draft-GGUF", "tiny-b-Q8_0.gguf")

PRESET = """
name = "{name}"
description = "test pair"
[target]
repo = "acme/tiny-GGUF"
file = "tiny-a-Q4_K_M.gguf"
size_gb = 0.0001
sha256 = "{sha}"
[draft]
repo = "{draft}"
quant = "q8_0"
size_gb = 0.0001
"""
# the target of a vision model: its repo holds projectors too (tiny's 64 wide, one for SmolLM2's 576
# as models/mmproj-smollm2-test.gguf, one cut short)
VISION = ("acme/tiny-vision-GGUF", "mmproj-tiny-F16.gguf")
VISION_PRESET = """
name = "{name}"
description = "test pair with a projector"
[target]
repo = "acme/tiny-vision-GGUF"
file = "tiny-a-Q4_K_M.gguf"
mmproj = "{mmproj}"
[draft]
repo = "acme/tiny-draft-GGUF"
quant = "q8_0"
"""


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    from localspec.convert.hf import convert_hf

    d = tmp_path_factory.mktemp("hub")
    quiet = lambda _m: None  # noqa: E731
    a = tiny_hf(d / "a", "LlamaForCausalLM", seed=0)
    b = tiny_hf(d / "b", "LlamaForCausalLM", seed=1)
    spm = tiny_hf(d / "spm", "MistralForCausalLM", seed=2)
    ga = convert_hf(a, d / "a.gguf", out_type="q4_k_m", log=quiet)
    gb = convert_hf(b, d / "b.gguf", out_type="q8_0", log=quiet)
    gs = convert_hf(spm, d / "s.gguf", out_type="q8_0", log=quiet)
    presets = d / "presets"
    presets.mkdir()
    (presets / "tiny.toml").write_text(PRESET.format(name="tiny", draft=DRAFT[0], sha="0" * 64))
    (presets / "bad.toml").write_text(PRESET.format(name="bad", draft="acme/spm-GGUF", sha=""))
    named = {
        "vision": VISION[1],
        "wide": "mmproj-smollm2.gguf",
        "cut": "mmproj-cut.gguf",
        "gone": "mmproj-x.gguf",
    }
    for preset, mmproj in named.items():
        (presets / f"{preset}.toml").write_text(VISION_PRESET.format(name=preset, mmproj=mmproj))
    fits = write_mmproj(d / "mmproj-tiny.gguf", shape=ProjectorShape(n_embd_text=64)).read_bytes()
    wide = write_mmproj(d / "mmproj-smollm2.gguf").read_bytes()  # seeded: models/mmproj-smollm2-test.gguf
    with FakeHub() as h:
        h.add(TARGET[0], {TARGET[1]: ga.read_bytes(), "README.md": b"tiny"})
        h.add(VISION[0], {TARGET[1]: ga.read_bytes(), VISION[1]: fits, "mmproj-smollm2.gguf": wide,
                          "mmproj-cut.gguf": fits[: len(fits) // 2]})  # fmt: skip
        h.add(DRAFT[0], {DRAFT[1]: gb.read_bytes(), "tiny-b-Q4_K_M.gguf": ga.read_bytes()})
        h.add("acme/spm-GGUF", {"spm-Q8_0.gguf": gs.read_bytes()})
        h.add("acme/tiny-hf", {f.name: f.read_bytes() for f in a.iterdir()})
        # a sharded layout (one shard here) beside the same weights as consolidated.safetensors
        weights = (a / "model.safetensors").read_bytes()
        names = json.loads(weights[8 : 8 + int.from_bytes(weights[:8], "little")]).keys() - {"__metadata__"}
        index = json.dumps({"metadata": {}, "weight_map": {n: "model.safetensors" for n in names}})
        files = {f.name: f.read_bytes() for f in a.iterdir()}
        h.add("acme/tiny-hf-sharded", files | {"model.safetensors.index.json": index.encode(),
                                                "consolidated.safetensors": weights})  # fmt: skip
        h.presets = presets  # type: ignore[attr-defined]
        yield h


@pytest.fixture
def env(hub, tmp_path):
    e = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "LOCALSPEC_"))}
    e |= {
        "HF_ENDPOINT": hub.url,
        "HF_HOME": str(tmp_path / "hf"),
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "LOCALSPEC_MODELS": str(tmp_path / "models"),
        "LOCALSPEC_PRESETS": str(hub.presets),
        "XDG_STATE_HOME": str(tmp_path / "state"),
    }
    return e


def cli(env, *args, pre: str = "pass"):
    code = f"import sys; {pre}; from localspec.cli import main; sys.argv[0] = 'localspec'; main()"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
    )


def blobs(env) -> list[Path]:
    return sorted(Path(env["HF_HOME"]).rglob("blobs/*"))


# ---------------------------------------------------------------------------------------------------
def test_pull_resumes_a_cut_transfer_lists_and_works_offline(hub, env, tmp_path):
    from localspec.config.pair_toml import read_pair

    hub.cut_once.add(TARGET)
    # huggingface_hub writes in 10 MB chunks; with our 100 KB file a cut would lose the whole first
    # chunk, so shrink it to see the resume at the byte where the cut happened
    p = cli(env, "pull", "tiny", pre="import huggingface_hub.constants as c; c.DOWNLOAD_CHUNK_SIZE = 4096")
    assert p.returncode == 0, p.stderr
    # the first GET was cut mid-body; the client asked for the rest, not the whole file again
    first, resumed = hub.gets(TARGET[1])[-2:]
    assert first is None and resumed is not None
    size = len(hub.repos[TARGET[0]][TARGET[1]])
    assert 0 < int(resumed.removeprefix("bytes=").rstrip("-")) < size
    pair = read_pair(tmp_path / "models" / "tiny")
    assert pair.target.read_bytes() == hub.repos[TARGET[0]][TARGET[1]]
    assert pair.draft.read_bytes() == hub.repos[DRAFT[0]][DRAFT[1]]  # picked by quant: Q8_0
    assert pair.info["preset"] == "tiny" and pair.info["draft_file"] == DRAFT[1]
    assert "compatible: identical vocabularies" in p.stdout and "memory " in p.stdout
    assert "changed on the Hub since the preset was written (sha256 " in p.stdout  # preset says 000...
    assert not list(Path(env["HF_HOME"]).rglob("*.incomplete"))

    # list: the pulled pair with the acceptance last logged for its two files (bad lines skipped)
    logged = {"stats": {"acceptance_rate": 0.75}}
    logged |= {role: {"path": str(getattr(pair, role).resolve())} for role in ("target", "draft")}
    log = Path(env["XDG_STATE_HOME"]) / "localspec" / "acceptance.jsonl"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(json.dumps(logged) + "\n{not json\n")
    listing = cli(env, "list")
    assert listing.returncode == 0, listing.stderr
    line = next(
        ln for ln in listing.stdout.splitlines() if ln.strip().startswith("tiny ") and "acceptance" in ln
    )
    assert "75%" in line

    # offline, from the cache alone: no request reaches the Hub
    n = len(hub.requests)
    off = cli(env | {"HF_HUB_OFFLINE": "1", "LOCALSPEC_MODELS": str(tmp_path / "m2")}, "pull", "tiny")
    assert off.returncode == 0, off.stderr
    assert len(hub.requests) == n


def test_offline_with_nothing_cached(env, tmp_path):
    p = cli(env | {"HF_HUB_OFFLINE": "1"}, "pull", "tiny")
    assert p.returncode == 1
    assert "offline (HF_HUB_OFFLINE=1)" in p.stderr and "Traceback" not in p.stderr
    assert not (tmp_path / "models" / "tiny").exists()


def test_pair_preset_needs_yes_without_a_terminal_then_pulls(hub, env, tmp_path):
    p = cli(env, "run", "--pair", "tiny", "--max-tokens", "2", "hi")  # stdin is not a TTY: no prompt
    assert p.returncode == 1
    assert "localspec pull tiny" in p.stderr and "--yes" in p.stderr
    assert not blobs(env)
    args = (
        "run",
        "--pair",
        "tiny",
        "--yes",
        "--max-tokens",
        "2",
        "--temperature",
        "0",
        "--n-ctx",
        "64",
        "hi",
    )
    p = cli(env, *args)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "models" / "tiny" / "pair.toml").exists()
    # the Hugging Face cache emptied under a pulled pair: --pair NAME pulls it again
    for f in Path(env["HF_HOME"]).rglob("*.gguf"):
        f.unlink()
    p = cli(env, *args)
    assert p.returncode == 0, p.stderr
    assert "pull     tiny" in p.stderr


def test_unknown_preset_suggests_names(hub, monkeypatch):
    from localspec.hub.resolve import resolve_pair

    monkeypatch.setenv("LOCALSPEC_PRESETS", str(hub.presets))
    with pytest.raises(LocalspecError, match=r"unknown pair preset 'tinny': did you mean tiny\?"):
        resolve_pair("tinny")
    with pytest.raises(LocalspecError, match=r"did you mean qwen3-32b"):
        monkeypatch.delenv("LOCALSPEC_PRESETS")
        resolve_pair("qwen3-23b")


def test_disk_space_is_checked_before_downloading(hub, env, tmp_path):
    n = len(hub.requests)
    p = cli(env, "pull", "tiny", pre="import localspec.hub.fetch as f; f.free_disk_bytes = lambda p: 1 << 20")
    assert p.returncode == 1
    assert "not enough disk space for tiny" in p.stderr
    # sizes came from the listing and HEAD requests; no file was fetched
    assert not [path for m, path, _ in hub.requests[n:] if m == "GET" and "/resolve/" in path]
    assert not blobs(env)


def test_failed_download_leaves_no_finished_file_and_a_rerun_completes(hub, env, tmp_path):
    hub.fail.add(DRAFT)
    try:
        p = cli(env, "pull", "tiny")
    finally:
        hub.fail.discard(DRAFT)
    assert p.returncode == 1
    assert "download failed" in p.stderr and "rerun" in p.stderr and "Traceback" not in p.stderr
    assert not (tmp_path / "models" / "tiny" / "pair.toml").exists()
    cache = Path(env["HF_HOME"])
    assert not list(cache.rglob(DRAFT[1])) and not list(cache.rglob("*.incomplete"))
    assert [b.read_bytes() for b in blobs(env)] == [hub.repos[TARGET[0]][TARGET[1]]]  # target complete
    n_target = len(hub.gets(TARGET[1]))
    p = cli(env, "pull", "tiny")
    assert p.returncode == 0, p.stderr
    assert len(hub.gets(TARGET[1])) == n_target  # the finished file was not fetched again


def test_safetensors_repo_is_converted_on_pull(hub, env, tmp_path):
    from localspec.config.pair_toml import read_pair

    p = cli(env, "pull", "acme/tiny-hf", DRAFT[0], "--name", "conv")
    assert p.returncode == 0, p.stderr
    pair = read_pair(tmp_path / "models" / "conv")
    assert pair.target == (tmp_path / "models" / "conv" / "target-q4_k_m.gguf").resolve()
    assert pair.draft.read_bytes() == hub.repos[DRAFT[0]][DRAFT[1]]
    assert pair.info["target_file"] == "(converted)"


def test_safetensors_files_come_from_the_index(hub, env, tmp_path):
    """consolidated.safetensors holds the same weights: downloading it too would double the pull (#28)."""
    p = cli(env, "pull", "acme/tiny-hf-sharded", DRAFT[0], "--name", "sharded")
    assert p.returncode == 0, p.stderr
    assert hub.gets("consolidated.safetensors") == [] and hub.gets("model.safetensors")
    assert (tmp_path / "models" / "sharded" / "target-q4_k_m.gguf").exists()


def test_the_disk_check_counts_the_converters_full_size_intermediate(hub, env, tmp_path):
    """A converted target is written at f16/bf16 size first, then quantized: that much more disk
    is needed while it converts than the download and the result (#28)."""
    from localspec.hub.fetch import CONVERTED_RATIO, DISK_MARGIN

    files = hub.repos["acme/tiny-hf"]
    weights = len(files["model.safetensors"])
    download = sum(len(d) for d in files.values()) + len(hub.repos[DRAFT[0]][DRAFT[1]])
    without = download + int(weights * CONVERTED_RATIO["q4_k_m"])
    free = DISK_MARGIN + without + weights // 4  # the f32 checkpoint's f16 intermediate: weights / 2
    n = len(hub.requests)
    pre = f"import localspec.hub.fetch as f; f.free_disk_bytes = lambda p: {free}"
    p = cli(env, "pull", "acme/tiny-hf", DRAFT[0], "--name", "tight", pre=pre)
    assert p.returncode == 1, p.stderr
    assert "not enough disk space for tight" in p.stderr and "intermediate" in p.stderr
    assert not [path for m, path, _ in hub.requests[n:] if m == "GET" and path.endswith(".safetensors")]


def test_preset_whose_files_do_not_pair(env, tmp_path):
    p = cli(env, "pull", "bad")
    assert p.returncode == 1
    assert "cannot be paired" in p.stderr and "vocabulary types differ" in p.stderr
    assert "nothing was downloaded" in p.stderr and not blobs(env)  # judged from Range-read headers
    assert not (tmp_path / "models" / "bad").exists()


# -- the presets themselves ---------------------------------------------------------------------------
FIELDS = {"repo", "file", "size_gb", "sha256", "arch", "mmproj", "mmproj_size_gb"}


def test_presets_are_complete_and_their_n_ctx_is_the_plans():
    from localspec.hub.presets import load_presets, shipped_presets_dir
    from localspec.hub.sizing import preset_n_ctx

    presets = load_presets(shipped_presets_dir())
    assert {"qwen2.5-32b", "qwen2.5-coder-32b", "llama3.1-8b", "qwen3-32b", "gemma3-27b"} <= set(presets)
    for p in presets.values():
        assert (p.target.quant, p.draft.quant) == ("q4_k_m", "q8_0"), p.name
        for m in (p.target, p.draft):
            assert m.file and m.file.endswith(".gguf") and m.quant in m.file.lower(), p.name
            marked = set(m.verified) | set(m.expected)
            assert marked <= FIELDS and not set(m.verified) & set(m.expected), p.name
            assert {"repo", "file", "size_gb", "arch"} <= marked, p.name
            if m.mmproj:  # the projector's name and size are marked like the model's
                assert {"mmproj", "mmproj_size_gb"} <= marked and m.mmproj.endswith(".gguf"), p.name
        assert p.n_ctx == preset_n_ctx(p), f"{p.name}: rerun the n_ctx computation"
        assert p.n_ctx["gpu_12gb"] <= p.n_ctx["gpu_16gb"] <= p.n_ctx["gpu_24gb"] > 0
    # docs/images.md names the presets that bring a projector
    assert {p.name for p in presets.values() if p.target.mmproj} == {
        "gemma3-27b",
        "qwen3.5-4b-mtp",
        "qwen3.6-27b",
    }


def test_sizing_from_arch_facts_matches_the_gguf_header(gemma_path):
    """The estimate a preset's n_ctx comes from, against memory_plan reading the real header."""
    from localspec.gguf.file import read_header
    from localspec.gguf.memory_plan import Runtime, plan_model, read_spec
    from localspec.hub.presets import load_presets, shipped_presets_dir
    from localspec.hub.sizing import spec_from_arch

    facts = load_presets(shipped_presets_dir())["gemma3-27b"].draft.arch  # Gemma-3-270m, as the embedded file
    real = read_spec(gemma_path)
    est = spec_from_arch(facts, gemma_path.stat().st_size, "q4_k_m")
    assert est.kv_dims == real.kv_dims and est.swa_layers == real.swa_layers
    assert (est.n_layer, est.n_embd, est.n_vocab) == (real.n_layer, real.n_embd, real.n_vocab)
    assert read_header(gemma_path).array_lengths["tokenizer.ggml.tokens"] == facts["n_vocab"]
    rt = Runtime(n_ctx=8192)
    got, want = plan_model(est, rt).device_bytes, plan_model(real, rt).device_bytes
    assert abs(got - want) < 0.1 * want, (got, want)


def _vocab(n: int):
    from localspec.gguf.compat import VocabHeader

    toks = [f"t{i}" for i in range(n)]
    return VocabHeader(Path(f"{n}.gguf"), "BPE", "qwen2", toks, [1] * n, 151643, 151645, False, False)


def test_qwen_vocab_rows_152064_vs_151936_pass_the_128_rule():
    """Qwen2.5-32B has 152064 embedding rows, 0.5B 151936: exactly 128 apart, llama.cpp's limit."""
    from localspec.gguf.compat import compare

    ok = compare(_vocab(152064), _vocab(151936))
    assert ok.ok and not ok.identical and "sizes differ: target 152064, draft 151936" in ok.message
    bad = compare(_vocab(152064), _vocab(151935))
    assert not bad.ok and "differ by 129" in bad.message


def test_local_verdict_stores_the_n_ctx_that_fits_the_gpu(gemma_path, monkeypatch):
    """With a GPU, pull stores the largest n_ctx that fits its free memory (doctor's plan)."""
    from localspec import llama
    from localspec.gguf.memory_plan import GiB, Runtime, plan_pair, read_spec
    from localspec.hub.pull import local_verdict

    def gpu(free):
        return [llama.Device("CUDA0", "Fake 12 GB", "gpu", 12 * GiB, free, "CUDA")]

    spec = read_spec(gemma_path)
    free = plan_pair(spec, spec, Runtime(n_ctx=8192)).device_bytes + (1 << 20)  # 8192 fits, 9216 not
    monkeypatch.setattr(llama, "devices", lambda: gpu(free))
    text, n_ctx = local_verdict(gemma_path, gemma_path, None)
    assert n_ctx == 8192 and text.startswith("n_ctx 8192 stored in pair.toml; full offload fits")
    monkeypatch.setattr(llama, "devices", lambda: gpu(1 << 20))
    text, n_ctx = local_verdict(gemma_path, gemma_path, None)
    assert n_ctx is None and "does not fit" in text and "CUDA0" in text


def test_local_verdict_counts_the_projector(gemma_path, mmproj_path, monkeypatch):
    """The n_ctx stored for a pair with a projector leaves room for its weights and vision graph."""
    import dataclasses

    from localspec import llama
    from localspec.gguf.memory_plan import GiB, MiB, Runtime, plan_pair, read_spec
    from localspec.gguf.projector import projector_facts
    from localspec.hub.pull import local_verdict

    spec = read_spec(gemma_path)
    free = plan_pair(spec, spec, Runtime(n_ctx=8192)).device_bytes + (1 << 20)
    monkeypatch.setattr(
        llama, "devices", lambda: [llama.Device("CUDA0", "Fake", "gpu", 12 * GiB, free, "CUDA")]
    )
    big = dataclasses.replace(projector_facts(mmproj_path), weights_bytes=64 * MiB)  # a real one's scale
    assert local_verdict(gemma_path, gemma_path, None)[1] == 8192
    text, n_ctx = local_verdict(gemma_path, gemma_path, None, big)
    assert n_ctx is not None and n_ctx < 8192 and text.startswith(f"n_ctx {n_ctx} stored")
    assert plan_pair(spec, spec, Runtime(n_ctx=n_ctx), big).device_bytes <= free


def test_pull_one_repo_picks_by_quant_or_names_the_choices(hub, env):
    p = cli(env, "pull", "acme/spm-GGUF")  # one repo: just the file, Q4_K_M by default
    assert p.returncode == 1
    assert (
        "acme/spm-GGUF has no q4_k_m GGUF; pick one with acme/spm-GGUF:FILE from: spm-Q8_0.gguf" in p.stderr
    )
    p = cli(env, "pull", "acme/spm-GGUF:spm-Q8_0.gguf")
    assert p.returncode == 0, p.stderr
    assert Path(p.stdout.split()[-1]).read_bytes() == hub.repos["acme/spm-GGUF"]["spm-Q8_0.gguf"]


def test_headers_are_judged_from_the_first_bytes_of_a_file_larger_than_the_probe(hub, env, tmp_path):
    """A real GGUF is gigabytes, its header a few MB: the pair is judged from a Range read of the
    header, not from the whole file (the probe is shrunk below the tiny files' size to see it)."""
    n = len(hub.requests)
    p = cli(env, "pull", "bad", pre="import localspec.hub.fetch as f; f.HEADER_PROBE = 16384")
    assert p.returncode == 1
    assert "vocabulary types differ" in p.stderr and "nothing was downloaded" in p.stderr, p.stderr
    size = len(hub.repos[TARGET[0]][TARGET[1]])
    got = [r for m, path, r in hub.requests[n:] if m == "GET" and path.endswith(TARGET[1])]
    assert got and all(r and int(r.rsplit("-", 1)[1]) < size // 2 for r in got), got
    assert not blobs(env)


# -- a target with a vision projector (#50) -------------------------------------------------------------
def test_pull_brings_the_projector_a_preset_names_and_skips_it_on_request(hub, env, tmp_path):
    from localspec.config.pair_toml import read_pair

    p = cli(env, "pull", "vision")
    assert p.returncode == 0, p.stderr
    pair = read_pair(tmp_path / "models" / "vision")
    assert pair.mmproj is not None and pair.mmproj.read_bytes() == hub.repos[VISION[0]][VISION[1]]
    assert pair.info["mmproj_file"] == VISION[1] and f"mmproj   {VISION[0]}:{VISION[1]}" in p.stdout
    # what was pulled passes check-pair with its projector
    check = cli(env, "check-pair", str(pair.target), str(pair.draft), "--mmproj", str(pair.mmproj))
    assert check.returncode == 0 and "makes 64-wide embeddings, as the target takes" in check.stdout, (
        check.stderr
    )

    # the projector gone from the cache: --pair NAME pulls the pair again, and the run sees through it
    pair.mmproj.unlink()
    (tmp_path / "a.png").write_bytes(png(1))
    args = (
        "run",
        "--pair",
        "vision",
        "--yes",
        "--max-tokens",
        "2",
        "--n-ctx",
        "128",
        "--image",
        str(tmp_path / "a.png"),
    )
    p = cli(env, *args, "hi")
    assert p.returncode == 0 and "pull     vision" in p.stderr and pair.mmproj.exists(), p.stderr

    n = len(hub.requests)
    p = cli(env | {"LOCALSPEC_MODELS": str(tmp_path / "m2")}, "pull", "vision", "--no-mmproj")
    assert p.returncode == 0, p.stderr
    assert read_pair(tmp_path / "m2" / "vision").mmproj is None
    assert not [path for _m, path, _r in hub.requests[n:] if "mmproj" in path]  # not even its size


def test_pull_of_two_repos_takes_the_projector_named_and_notes_one_not_asked_for(hub, env, tmp_path):
    from localspec.config.pair_toml import read_pair

    p = cli(env, "pull", VISION[0], DRAFT[0], "--name", "plain")
    assert p.returncode == 0, p.stderr
    assert f"{VISION[0]} also holds a vision projector" in p.stdout and "--mmproj FILE" in p.stdout
    assert read_pair(tmp_path / "models" / "plain").mmproj is None
    p = cli(env, "pull", VISION[0], DRAFT[0], "--name", "seeing", "--mmproj", VISION[1])
    assert p.returncode == 0, p.stderr
    assert read_pair(tmp_path / "models" / "seeing").mmproj.read_bytes() == hub.repos[VISION[0]][VISION[1]]


@pytest.mark.parametrize(
    "preset, needles, downloaded",
    [
        # judged from the headers: nothing moves
        ("wide", (f"{VISION[0]}:mmproj-smollm2.gguf makes 576-wide embeddings, but the target is 64 wide",
                  "nothing was downloaded"), False),
        # not in the repo (any more): its size is asked for before anything else
        ("gone", (f"{VISION[0]}:mmproj-x.gguf: no such file in the repo",), False),
        # a header that cannot be read is judged once the file is here
        ("cut", (f"{VISION[0]}:mmproj-cut.gguf is truncated", "no pair.toml was written"), True),
    ],
)  # fmt: skip
def test_pull_refuses_a_projector_of_another_model_or_cut_short(
    hub, env, tmp_path, preset, needles, downloaded
):
    p = cli(env, "pull", preset)
    assert p.returncode == 1 and "Traceback" not in p.stderr
    (line,) = [ln for ln in p.stderr.splitlines() if ln.startswith("error:")]
    assert all(n in line for n in needles) and "--no-mmproj" in line, line
    assert bool(blobs(env)) == downloaded
    assert not (tmp_path / "models" / preset / "pair.toml").exists()


@pytest.mark.parametrize(
    "table, value",
    [("draft", '"mmproj-F16.gguf"'), ("target", "3"), ("target", '"mmproj-F16.bin"')],
)
def test_a_preset_names_a_projector_for_its_target_as_a_gguf_file(tmp_path, table, value):
    from localspec.hub.presets import read_preset

    text = PRESET.format(name="p", draft=DRAFT[0], sha="").replace(
        f"[{table}]\n", f"[{table}]\nmmproj = {value}\n"
    )
    (tmp_path / "p.toml").write_text(text)
    with pytest.raises(LocalspecError, match=rf"\[{table}\] mmproj: only \[target\] may name one, as a GGUF"):
        read_preset(tmp_path / "p.toml")
