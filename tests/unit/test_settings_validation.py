"""Settings is the one gate for every source (flags, TOML, pair presets, request fields, replace()):
types and ranges are checked from the field declarations, so NaN, infinities, negative counts, strings
for booleans and fractional integers are refused with the setting's name."""

from __future__ import annotations

import math
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from localspec.cli.common import resolve_settings, settings_options
from localspec.config.settings import Settings, check_value, setting_fields
from localspec.errors import LocalspecError


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("name", ["temperature", "top_p", "min_p", "draft_p_min"])
def test_floats_must_be_finite(name, value):
    with pytest.raises(LocalspecError, match=f"{name} must be a finite number"):
        Settings(**{name: value})


@pytest.mark.parametrize(
    "name, value, needle",
    [
        ("n_batch", -1, "n_batch must be >= 1"),
        ("n_ubatch", 0, "n_ubatch must be >= 1"),
        ("n_threads", -4, "n_threads must be >= 1"),
        ("n_threads", 100_000, "n_threads must be <= 512"),
        ("n_gpu_layers", -2, "n_gpu_layers must be >= -1"),
        ("n_gpu_layers", 2**40, "n_gpu_layers must be <="),
        ("n_ctx", 10**12, "n_ctx must be <="),
        ("max_tokens", 0, "max_tokens must be >= 1"),
        ("seed", -1, "seed must be >= 0"),
        ("top_k", -1, "top_k must be >= 0"),
        ("draft_min", 65, "draft_min must be <= 64"),
        ("temperature", 1e300, "temperature must be <= 100"),
        ("top_p", 0, "top_p must be > 0"),
        ("min_p", 1, "min_p must be < 1"),
    ],
)
def test_ranges(name, value, needle):
    with pytest.raises(LocalspecError, match=needle):
        Settings(**{name: value})


@pytest.mark.parametrize(
    "name, value, needle",
    [
        ("spec", "true", "spec must be true or false"),
        ("allow_partial_offload", 1, "must be true or false"),
        ("max_tokens", 256.5, "max_tokens must be a whole number"),
        ("max_tokens", "256", "max_tokens must be a whole number"),
        ("n_ctx", True, "n_ctx must be a whole number"),
        ("temperature", "0.5", "temperature must be a number"),
        ("kv_type", "q5", "kv_type must be one of"),
        ("flash_attn", True, "flash_attn must be a string"),
        ("target", 3, "target must be a file path"),
        ("stop", [1, 2], "stop must be a string or a list of strings"),
        ("stop", "", "stop strings must have 1 to"),
        ("stop", "x" * 5000, "stop strings must have 1 to"),
        ("stop", ["s"] * 17, "at most 16"),
        ("stop", "a\udcffb", "not valid UTF-8"),
        ("draft_max", 4.5, "--draft-max must be a number or .auto."),
        ("draft_max", 0, "--draft-max must be between 1 and 64"),
        ("draft_max", "lots", "--draft-max must be a number or 'auto'"),
    ],
)
def test_types(name, value, needle):
    with pytest.raises(LocalspecError, match=needle):
        Settings(**{name: value})


def test_whole_number_floats_are_accepted_for_integers():
    s = Settings(max_tokens=256.0, n_ctx=2048.0, draft_max=4)
    assert s.max_tokens == 256 and type(s.max_tokens) is int and s.n_ctx == 2048 and s.draft_k == 4


def test_draft_max_is_a_number_or_auto_from_every_source(tmp_path):
    assert Settings(draft_max="3").draft_max == 3 and Settings(draft_max="Auto").draft_max == "auto"
    assert Settings.load(config=write(tmp_path, "draft_max = 5")).draft_k == 5  # TOML's integer
    assert Settings().replace(draft_max="2").draft_max == 2  # a request's field, as the server passes it


def test_mtp_drafting_is_a_source_setting_and_the_old_spelling_still_works(tmp_path):
    new = Settings(target=Path("t.gguf"), draft_source="mtp")
    old = Settings(target=Path("t.gguf"), draft="mtp")
    toml = Settings.load(config=write(tmp_path, 'target = "t.gguf"\ndraft = "mtp"'))
    for s in (new, old, toml):
        assert s.draft is None and s.draft_source == "mtp" and s.drafter == "mtp" and not s.speculative
    file = Settings(target=Path("t.gguf"), draft="./mtp")  # a draft GGUF that happens to be named mtp
    assert file.draft == Path("mtp") and file.draft_source == "model" and file.speculative


def test_the_cli_passes_draft_mtp_as_the_word():
    # click's Path type would make `--draft mtp` a Path, indistinguishable from a file ./mtp
    @click.command()
    @settings_options("model")
    def show(**kw):
        s = resolve_settings(kw)
        click.echo(f"{s.draft} {s.draft_source}")

    for args, want in ((["--draft", "mtp"], "None mtp"), (["--draft", "./mtp"], "mtp model")):
        assert CliRunner().invoke(show, ["--target", "t.gguf", *args]).output.strip() == want


def test_replace_is_checked_too():
    # request overrides (engine.submit(**overrides)) go through replace()
    with pytest.raises(LocalspecError, match="temperature must be a finite number"):
        Settings().replace(temperature=math.nan)


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "c.toml"
    p.write_text(text)
    return p


@pytest.mark.parametrize(
    "toml, needle",
    [
        ("temperature = nan", "temperature must be a finite number"),
        ("[sampling]\ntop_p = inf", "top_p must be a finite number"),
        ("max_tokens = 256.5", "max_tokens must be a whole number"),
        ('spec = "yes"', "spec must be true or false"),
        ("n_batch = -8", "n_batch must be >= 1"),
        ("stop = 3", "stop must be a string"),
        ("[model]\nn_ctx = [1, 2]", "n_ctx must be a whole number"),
        ("bogus = 1", "unknown setting(s): bogus"),
        ("pair = false", "pair must be a file path"),  # found by the fuzz below
        ("temperature = ", "not valid TOML"),
    ],
)
def test_toml_values(tmp_path, toml, needle):
    with pytest.raises(LocalspecError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        Settings.load(config=write(tmp_path, toml))


def test_toml_whole_float_for_integer(tmp_path):
    assert Settings.load(config=write(tmp_path, "max_tokens = 256.0")).max_tokens == 256


def test_config_that_is_not_text_or_a_file(tmp_path):
    with pytest.raises(LocalspecError, match="not valid TOML"):
        Settings.load(config=_binary(tmp_path))
    with pytest.raises(LocalspecError, match="cannot read config file"):
        Settings.load(config=tmp_path)


def _binary(tmp_path: Path) -> Path:
    p = tmp_path / "b.toml"
    p.write_bytes(b"temperature = 0.5\n\xff\xfe")
    return p


def test_every_numeric_field_has_a_range():
    # a new numeric setting must declare its bounds, or the bad-input corpus cannot cover it
    for f in setting_fields():
        if "int" in str(f.type) or "float" in str(f.type):
            assert any(k in f.metadata for k in ("ge", "gt")) and any(
                k in f.metadata for k in ("le", "lt")
            ), f.name


def test_pair_runtime_is_checked(tmp_path):
    (tmp_path / "pair.toml").write_text(
        '[pair]\ntarget = "t.gguf"\ndraft = "d.gguf"\n[runtime]\ntemperature = nan\n'
    )
    with pytest.raises(LocalspecError, match="temperature must be a finite number"):
        Settings.load(pair=tmp_path)


def test_pair_toml_with_wrong_types(tmp_path):
    (tmp_path / "pair.toml").write_text("[pair]\ntarget = 1\ndraft = 2\n")
    with pytest.raises(LocalspecError, match="needs \\[pair\\] target"):
        Settings.load(pair=tmp_path)


# -- fuzz: any value of any type, from a dict or a TOML file, gives Settings or one LocalspecError ----
FIELDS = [f.name for f in setting_fields()]
ANY_VALUE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(alphabet=st.characters(codec=None), max_size=20),
    st.lists(st.one_of(st.text(max_size=5), st.integers()), max_size=20),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
)
TOML_VALUE = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.lists(st.text(max_size=5), max_size=20),
)
FUZZ = hsettings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _well_formed(s: Settings) -> None:
    hints = Settings._hints()
    for f in setting_fields():
        v = getattr(s, f.name)
        assert check_value(f, hints[f.name], v) == v  # what came out passes its own check unchanged
        if isinstance(v, float):
            assert math.isfinite(v)


@FUZZ
@given(values=st.dictionaries(st.sampled_from(FIELDS), ANY_VALUE, max_size=4))
def test_fuzz_values_of_every_type(values):
    try:
        s = Settings(**values)
    except LocalspecError as e:
        assert "\n" not in str(e)
        return
    _well_formed(s)


@FUZZ
@given(
    values=st.dictionaries(
        st.one_of(st.sampled_from(FIELDS), st.text(min_size=1, max_size=8)), TOML_VALUE, max_size=4
    ),
    section=st.sampled_from([None, "model", "sampling", "spec"]),
)
def test_fuzz_toml_files(tmp_path, values, section):
    import tomli_w

    doc = {section: values} if section else values
    path = tmp_path / "fuzz.toml"
    path.write_text(tomli_w.dumps(doc, multiline_strings=False))
    try:
        s = Settings.load(config=path)
    except LocalspecError:
        return
    _well_formed(s)


@FUZZ
@given(text=st.text(max_size=200))
def test_fuzz_raw_toml_text(tmp_path, text):
    path = tmp_path / "raw.toml"
    path.write_bytes(text.encode("utf-8", "surrogatepass"))
    try:
        _well_formed(Settings.load(config=path))
    except LocalspecError:
        pass


# -- every sampling value Settings accepts keeps the arithmetic finite (issue #45) -----------------
def _within(f) -> st.SearchStrategy:  # noqa: ANN001 - a Settings field: any value its bounds allow
    m = f.metadata
    if str(f.type) == "bool":  # a switch (infill): either
        return st.booleans()
    if "int" in str(f.type):
        return st.integers(m.get("ge", m.get("gt", 0) + 1), m.get("le", m.get("lt", 2**31) - 1))
    lo, hi = m.get("ge", m.get("gt")), m.get("le", m.get("lt"))
    return st.floats(lo, hi, exclude_min="gt" in m, exclude_max="lt" in m)


SAMPLING = {
    f.name: _within(f) for f in setting_fields("sampling") if f.name not in ("seed", "stop", "logit_bias")
}


@hsettings(max_examples=300, deadline=None)
@given(
    values=st.fixed_dictionaries({}, optional=SAMPLING),
    bias=st.dictionaries(st.integers(0, 63), st.floats(-300, 300), max_size=4),
    logits=st.lists(st.floats(-1000, 1000, width=32), min_size=64, max_size=64),
    history=st.lists(st.integers(0, 63), max_size=80),
)
def test_any_accepted_sampling_values_give_a_finite_distribution(values, bias, logits, history):
    """Whatever the bounds let through (the CLI, TOML and every request alike: they all pass through
    Settings), penalties and the samplers on a row of finite logits give finite probabilities: a
    repeat_penalty of 1e-39 once divided a logit to inf, and the distribution to NaN."""
    import numpy as np

    from localspec.decode.sampling import process_rows, row_logprobs
    from localspec.engine.request import penalties_of, sampling_of

    s = Settings(**values, logit_bias=bias)
    row = penalties_of(s).apply(np.array(logits, np.float32), history)
    assert np.isfinite(row).all()
    sp = sampling_of(s)
    for d in (process_rows(row[None], sp)[0], process_rows([row[None]], sp)[0]):
        assert np.isfinite(d.probs).all() and abs(d.probs.sum() - 1) < 1e-6
    lp, top = row_logprobs(row, int(np.argmax(row)), 5)
    assert np.isfinite(lp) and all(np.isfinite(x) for _, x in top)


@pytest.mark.parametrize("value", ["1e-39", "0.001"])
def test_a_repeat_penalty_that_would_overflow_is_refused_alike_everywhere(tmp_path, value):
    needle = "repeat_penalty must be >= 0.01"
    with pytest.raises(LocalspecError, match=needle):
        Settings.load(config=write(tmp_path, f"repeat_penalty = {value}"))
    with pytest.raises(LocalspecError, match=needle):
        Settings().replace(repeat_penalty=float(value))  # a request's overrides
    with pytest.raises(LocalspecError, match=needle):
        Settings.load(repeat_penalty=float(value))  # the CLI's flags
