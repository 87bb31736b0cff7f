"""RoPE context extension (llama-server's --rope-scaling, --rope-scale, --rope-freq-base,
--yarn-orig-ctx): flags and TOML reach llama.cpp's context parameters for the target, its draft and
an MTP head; unset, llama.cpp's defaults (the GGUF's values) stay. A context past the trained one,
not stretched to fit, is a warning at load that names the fix."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import llama_cpp as C
import pytest
from click.testing import CliRunner

from localspec.cli import cli
from localspec.cli.common import resolve_settings
from localspec.config.settings import Settings
from localspec.engine.loader import past_training
from localspec.errors import LocalspecError
from localspec.llama.context import set_rope

YARN = dict(rope_scaling="yarn", rope_scale=2.0, rope_freq_base=100000.0, yarn_orig_ctx=8192)


def test_the_settings_reach_the_context_params():
    args = Settings(**YARN).context_args()
    assert {k: args[k] for k in YARN} == YARN
    params = C.llama_context_default_params()
    set_rope(params, **YARN)
    assert params.rope_scaling_type == C.LLAMA_ROPE_SCALING_TYPE_YARN
    assert params.rope_freq_scale == 0.5  # llama-server's --rope-scale N: a frequency scale of 1/N
    assert (params.rope_freq_base, params.yarn_orig_ctx) == (100000.0, 8192)


def test_unset_leaves_the_ggufs_own():
    params = C.llama_context_default_params()
    set_rope(params, **{k: v for k, v in Settings().context_args().items() if k in YARN})
    assert params.rope_scaling_type == C.LLAMA_ROPE_SCALING_TYPE_UNSPECIFIED
    assert (params.rope_freq_scale, params.rope_freq_base, params.yarn_orig_ctx) == (0.0, 0.0, 0)


def test_flags_and_toml(tmp_path):
    flags = resolve_settings({"rope_scaling": "linear", "rope_scale": 4.0, "yarn_orig_ctx": 2048})
    assert (flags.rope_scaling, flags.rope_scale, flags.yarn_orig_ctx) == ("linear", 4.0, 2048)
    cfg = tmp_path / "c.toml"
    cfg.write_text('[model]\nrope_scaling = "yarn"\nrope_scale = 2\n')
    assert resolve_settings({"config": cfg}).rope_scale == 2.0
    out = CliRunner().invoke(cli, ["serve", "--help"], terminal_width=200).output
    assert "--rope-scaling [none|linear|yarn]" in out and "--yarn-orig-ctx" in out


@pytest.mark.parametrize(
    "changes, needle",
    [
        ({"rope_scaling": "dynamic"}, "rope_scaling must be one of none, linear, yarn"),
        ({"rope_scale": 0.5}, "rope_scale must be >= 1"),
        ({"rope_freq_base": 0}, "rope_freq_base must be > 0"),
        ({"yarn_orig_ctx": 0}, "yarn_orig_ctx must be >= 1"),
    ],
)
def test_bad_values_name_the_setting(changes, needle):
    with pytest.raises(LocalspecError, match=needle):
        Settings(**changes)


def _target(n_ctx_train: int, freq_scale: float = 1.0) -> SimpleNamespace:
    return SimpleNamespace(n_ctx_train=n_ctx_train, rope_freq_scale_train=freq_scale, path=Path("m.gguf"))


def test_a_context_past_the_trained_one_warns_with_the_fix():
    line = past_training(Settings(), _target(8192), 16384)
    assert line is not None and line.startswith(
        "warning: --n-ctx 16384 is past m.gguf's trained context (8192"
    )
    assert "--rope-scaling yarn --rope-scale 2" in line
    assert "--rope-scale 3" in (past_training(Settings(), _target(8192), 20000) or "")
    assert past_training(Settings(), _target(8192), 8192) is None
    assert past_training(Settings(rope_scaling="yarn", rope_scale=2), _target(8192), 16384) is None
    assert past_training(
        Settings(rope_scale=2, rope_scaling="none"), _target(8192), 16384
    )  # none: no stretch
    assert past_training(Settings(), _target(8192, freq_scale=0.25), 32768) is None  # the GGUF's own scaling
    assert past_training(Settings(), _target(0), 16384) is None  # a GGUF that does not say
