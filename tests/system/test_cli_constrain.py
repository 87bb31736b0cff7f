"""`localspec run --json-schema FILE` / `--grammar FILE` as a user runs them, and their bad input:
one clear line naming the problem, never a traceback."""

from __future__ import annotations

import json
import re

import jsonschema

from tests.helpers import localspec

SCHEMA = {
    "type": "object",
    "properties": {
        "answer": {"enum": ["yes", "no"]},
        "confidence": {"type": "integer", "minimum": 0, "maximum": 100},
    },
    "required": ["answer", "confidence"],
    "additionalProperties": False,
}


def _error_line(proc) -> str:  # noqa: ANN001
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    return errors[0]


def test_run_with_a_json_schema_file(smollm2_path, tmp_path):
    f = tmp_path / "s.json"
    f.write_text(json.dumps(SCHEMA))
    base = ["run", "Is the sky blue?", "--target", str(smollm2_path), "--chat", "--max-tokens", "40"]
    p = localspec(*base, "--json-schema", str(f), "--temperature", "0", "--json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["finish_reason"] == "stop"
    jsonschema.validate(json.loads(out["text"]), SCHEMA)
    streamed = localspec(*base, "--json-schema", str(f), "--temperature", "0", "--no-stats")
    assert streamed.stdout.strip() == out["text"]


def test_run_with_a_gbnf_grammar_file(smollm2_path, tmp_path):
    f = tmp_path / "g.gbnf"
    f.write_text('root ::= "Colour: " ("red" | "green" | "blue") "."\n')
    p = localspec(
        "run", "Name a colour.", "--target", str(smollm2_path), "--grammar", str(f), "--max-tokens", "12",
        "--temperature", "0.8", "--seed", "3", "--no-stats",
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert re.fullmatch(r"Colour: (red|green|blue)\.", p.stdout.strip()), p.stdout


def test_bad_constraints_are_one_line(smollm2_path, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"type": "object", "properties": {"a": {"type": "strin"}}}')
    base = ["run", "hi", "--target", str(smollm2_path), "--max-tokens", "4"]
    assert "Invalid type: strin" in _error_line(localspec(*base, "--json-schema", str(bad)))
    assert "cannot read --json-schema" in _error_line(
        localspec(*base, "--json-schema", str(tmp_path / "no.json"))
    )
    g = tmp_path / "g.gbnf"
    g.write_text("root ::= x")
    assert "not both" in _error_line(localspec(*base, "--json-schema", str(bad), "--grammar", str(g)))
