"""Which layer may set which setting (#48): a pair.toml, downloaded from strangers, may set only
what a model can honestly recommend; a request only what shapes its own answer; docs/settings.md
lists every setting's layers as the code has them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from localspec.config import settings as cfg
from localspec.config.settings import Settings, setting_fields
from localspec.errors import LocalspecError

DOCS = Path(__file__).resolve().parents[2] / "docs" / "settings.md"

# what the review's hostile pair.toml set: the web may call the server, its log goes to a file the
# user sources, its compute goes to another host
HOSTILE = """
[pair]
target = "t.gguf"
draft = "d.gguf"
[runtime]
host = "0.0.0.0"
port = 80
allowed_hosts = ["*"]
cors_origins = ["*"]
log = "/tmp/i48-sourced-by-the-user.sh"
rpc = "203.0.113.9:50052"
api_key = "stolen"
max_body = 1099511627776
max_queue = 1048576
tuner_cache = false
n_threads = 1
n_gpu_layers = 0
yes = true
json_schema = '{"type": "object"}'
temprature = 0.1
temperature = 0.3
n_ctx = 2048
draft_max = "4"
"""


def test_a_pair_file_sets_only_what_a_model_may_recommend(tmp_path):
    (tmp_path / "pair.toml").write_text(HOSTILE)
    with pytest.warns(UserWarning) as caught:
        s = Settings.load(pair=tmp_path)
    said = [str(w.message) for w in caught]
    defaults = Settings()
    for name in ("host", "port", "allowed_hosts", "cors_origins", "log", "rpc", "api_key", "max_body"):
        assert getattr(s, name) == getattr(defaults, name), name
    for name in ("max_queue", "tuner_cache", "n_threads", "n_gpu_layers", "yes", "json_schema"):
        assert getattr(s, name) == getattr(defaults, name), name
    assert (s.temperature, s.n_ctx, s.draft_max) == (0.3, 2048, 4)  # in its scope: kept (typed)
    refused = ["host", "port", "allowed_hosts", "cors_origins", "log", "rpc", "api_key", "max_body",
               "max_queue", "tuner_cache", "n_threads", "n_gpu_layers", "yes", "json_schema", "temprature"]  # fmt: skip
    assert len(said) == len(refused)
    for name, line in zip(refused, said):
        assert f"[runtime] {name} ignored" in line and str(tmp_path / "pair.toml") in line
        assert "\n" not in line and "stolen" not in line  # the key's name, never its value


def test_a_front_end_takes_the_warnings(tmp_path):
    (tmp_path / "pair.toml").write_text(
        '[pair]\ntarget = "t.gguf"\ndraft = "d.gguf"\n[runtime]\nhost = "0.0.0.0"\n'
    )
    said: list[str] = []
    assert Settings.load(pair=tmp_path, warn=said.append).host == "127.0.0.1"
    assert len(said) == 1 and "[runtime] host ignored" in said[0]


def test_flags_and_config_still_set_everything(tmp_path):
    (tmp_path / "pair.toml").write_text(HOSTILE)
    config = tmp_path / "mine.toml"
    config.write_text('host = "0.0.0.0"\ncors_origins = ["http://localhost:3000"]\n')
    s = Settings.load(pair=tmp_path, config=config, warn=lambda m: None, port=9000)
    assert (s.host, s.cors_origins, s.port) == ("0.0.0.0", ("http://localhost:3000",), 9000)


@pytest.mark.parametrize("name", ["host", "api_key", "log", "rpc", "n_ctx", "parallel", "max_body", "trace"])
def test_a_request_cannot_set_the_servers_own_settings(name):
    with pytest.raises(LocalspecError, match=f"{name} cannot be set per request"):
        Settings().override(cfg.REQUEST, **{name: getattr(Settings(), name)})


def test_a_request_sets_what_shapes_its_answer():
    s = Settings().override(cfg.REQUEST, temperature=0.0, draft_max="4", json_schema='{"type": "object"}')
    assert (s.temperature, s.draft_max, s.json_schema) == (0.0, 4, '{"type": "object"}')
    with pytest.raises(LocalspecError, match="unknown setting: hots"):
        Settings().override(cfg.REQUEST, hots="x")


def _documented() -> dict[str, set[str]]:
    """The scope table of docs/settings.md: setting -> the layers marked 'yes'."""
    text = DOCS.read_text()
    table = text[text.index("| setting | flag |") :].split("\n\n", 1)[0].splitlines()[2:]
    out = {}
    for row in table:
        cells = [c.strip() for c in row.strip("|").split("|")]
        for name in re.findall(r"`([a-z_]+)`", cells[0]):
            out[name] = {layer for layer, c in zip(cfg.LAYERS, cells[1:]) if c == "yes"}
    return out


def test_docs_say_which_layer_may_set_each_setting():
    documented = _documented()
    for f in setting_fields():
        assert documented.get(f.name) == set(cfg.scope(f)), f.name
    assert set(documented) == {f.name for f in setting_fields()}
