"""The bench's json kind: extraction and classification prompts, each with its own schema, run
constrained - plain, grammar-aware speculation, and drafts blind to the schema (llama.cpp's way)."""

from __future__ import annotations

import json

import jsonschema
from click.testing import CliRunner

from localspec.bench.prompts import load_prompts, select
from localspec.cli import cli


def test_json_prompts_carry_valid_schemas():
    prompts = select(load_prompts(), None, ["json"])
    assert len(prompts) >= 6 and all(p.chat and p.schema for p in prompts)
    features = json.dumps([json.loads(p.schema) for p in prompts])
    for word in ('"enum"', '"pattern"', '"minimum"', '"items"', '"format"', '"required"'):
        assert word in features  # enums, patterns, integer bounds, arrays, formats, optional fields
    for p in prompts:
        jsonschema.Draft202012Validator.check_schema(json.loads(p.schema))


def test_bench_json_kind(smollm2_path, tmp_path):
    out = tmp_path / "b.json"
    args = [
        "bench", "--target", str(smollm2_path), "--draft", str(smollm2_path),
        "--kinds", "json", "--per-kind", "2", "--grammar-drafts", "on,off", "--draft-max", "3",
        "--prompt-tokens", "160", "--gen-tokens", "40", "--runs", "1", "--warmup", "0",
        "--temperature", "0", "--n-ctx", "512", "--n-threads", "1", "--json", str(out), "-q",
    ]  # fmt: skip
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    (table,) = json.loads(out.read_text())["tables"]
    rows = {r["config"]: r for r in table["localspec"]}
    assert list(rows) == ["plain", "K=3", "K=3 blind"]
    assert all(r["invalid"] == 0 for r in rows.values())  # every finished answer follows its schema
    assert rows["K=3"]["grammar_token_share"] > 0.1 and rows["K=3 blind"]["grammar_token_share"] == 0
    assert rows["K=3"]["constrain_ms_per_round"] > 0
    texts = {}  # greedy: the three configurations write the same answers
    for s in table["samples"]:
        assert s["kind"] == "json"
        texts.setdefault(s["prompt_id"], set()).add((s["n_generated"], s["finish_reason"]))
    assert all(len(v) == 1 for v in texts.values()), texts
