"""The constraint room on real vocabularies: SmolLM2 (49,152 tokens) and Gemma 3 (262,144).

The central check is a random walk: sample uniformly among the tokens the mask allows (a model that
knows nothing) until the matcher says the answer is done; whatever it wrote must parse and validate.
"""

from __future__ import annotations

import json
import re
import threading
import time

import jsonschema
import numpy as np
import pytest

from localspec.constrain import (
    MAX_TEXT_BYTES,
    Constraint,
    ConstraintError,
    ConstraintStuck,
    apply_mask,
    apply_mask_,
    build_vocabulary,
    compile_constraint,
    vocabulary_for,
)
from localspec.errors import LocalspecError
from localspec.llama import Model

SCHEMAS = {
    "nested": {
        "type": "object",
        "properties": {
            "person": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "maxLength": 8},
                    "age": {"type": "integer", "minimum": 0, "maximum": 120},
                },
                "required": ["name", "age"],
                "additionalProperties": False,
            },
            "ok": {"type": "boolean"},
        },
        "required": ["person", "ok"],
        "additionalProperties": False,
    },
    "array_of_objects": {
        "type": "object",
        "properties": {
            "items": {
                "type": "array",
                "minItems": 1,
                "maxItems": 3,
                "items": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "integer", "minimum": 1, "maximum": 999},
                        "tag": {"enum": ["a", "b"]},
                    },
                    "required": ["id", "tag"],
                    "additionalProperties": False,
                },
            }
        },
        "required": ["items"],
        "additionalProperties": False,
    },
    "enum": {
        "type": "object",
        "properties": {"label": {"enum": ["positive", "negative", "neutral"]}, "level": {"const": 3}},
        "required": ["label", "level"],
        "additionalProperties": False,
    },
    "integer_bounds": {
        "type": "object",
        "properties": {
            "n": {"type": "integer", "minimum": -40, "maximum": 2025},
            "m": {"type": "integer", "exclusiveMinimum": 7, "maximum": 9},
        },
        "required": ["n", "m"],
        "additionalProperties": False,
    },
    "pattern": {
        "type": "object",
        "properties": {
            "code": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{3}$"},
            "date": {"type": "string", "format": "date"},
        },
        "required": ["code", "date"],
        "additionalProperties": False,
    },
    "optional": {
        "type": "object",
        "properties": {
            "title": {"type": "string", "maxLength": 6},
            "year": {"type": "integer", "minimum": 1900, "maximum": 2100},
            "tags": {"type": "array", "items": {"enum": ["x", "y"]}, "maxItems": 2},
        },
        "required": ["title"],
        "additionalProperties": False,
    },
}
STRICT_PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 10},
        "age": {"type": "integer", "minimum": 0, "maximum": 99},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}
MAX_WALK = 400  # tokens; every schema above is bounded, so a walk ends well before


@pytest.fixture(scope="module", params=["smollm2", "gemma"])
def model(request, smollm2_path, gemma_path):
    path = smollm2_path if request.param == "smollm2" else gemma_path
    with Model(path, vocab_only=True) as m:
        yield m


@pytest.fixture(scope="module")
def vocab(model):
    return vocabulary_for(model)


def _grammar(vocab, schema, **kw):
    return compile_constraint(Constraint(kind="json_schema", text=json.dumps(schema), **kw), vocab)


def _walk(model, vocab, grammar, rng, *, check=None):
    """Uniform random walk under the mask until end of generation; returns (tokens, text)."""
    m = grammar.matcher()
    eog = set(vocab.eog)
    tokens: list[int] = []
    for _ in range(MAX_WALK):
        mask = m.mask()
        if check:
            check(m, mask)
        allowed = np.flatnonzero(mask)
        tok = int(rng.choice(allowed))
        m.consume([tok])
        tokens.append(tok)
        if tok in eog:
            assert m.is_done()
            return tokens, model.detokenize(tokens[:-1])
    raise AssertionError(f"no end after {MAX_WALK} tokens: {model.detokenize(tokens)!r}")


# -- the vocabulary ------------------------------------------------------------------------------
def test_vocabulary_marks_special_tokens_and_eog(model, vocab):
    assert vocab.n_vocab == model.n_vocab
    assert set(vocab.eog) == set(model.vocab.eog) and model.vocab.eos in vocab.eog
    assert vocab.special >= set(vocab.eog)
    tok = vocab.tokenizer
    for t in list(vocab.special)[:50]:
        assert tok.is_special_token(t)
    plain = next(t for t in range(1000, 2000) if t not in vocab.special)
    assert tok.decode_bytes([plain]) == model.token_bytes(plain)
    # the cache hands every request the same object
    assert vocabulary_for(model) is vocab


def test_vocabulary_pads_to_a_wider_logits_row(model, vocab):
    wide = build_vocabulary(model, n_vocab=model.n_vocab + 77)
    m = _grammar(wide, SCHEMAS["enum"]).matcher()
    mask = m.mask()
    assert mask.shape == (model.n_vocab + 77,) and not mask[model.n_vocab :].any()
    row = np.zeros(model.n_vocab + 77, dtype=np.float32)
    masked = apply_mask(row, mask)
    assert np.isneginf(masked[model.n_vocab :]).all()
    assert np.flatnonzero(np.isfinite(masked)).tolist() == np.flatnonzero(mask).tolist()


# -- random walks --------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(SCHEMAS))
def test_random_walk_always_validates(model, vocab, name):
    schema = SCHEMAS[name]
    g = _grammar(vocab, schema)
    special_not_eog = np.array(sorted(vocab.special - set(vocab.eog)), dtype=np.int64)

    def check(m, mask):
        assert not mask[special_not_eog].any(), "a special token allowed inside JSON"
        assert mask[list(vocab.eog)].any() == m.accepting

    for seed in range(6):
        _, text = _walk(model, vocab, g, np.random.default_rng(seed), check=check)
        jsonschema.validate(json.loads(text), schema)


def test_json_mode_takes_any_object_and_only_objects(model, vocab):
    g = compile_constraint(Constraint(kind="json_object"), vocab)
    good = '{"a":[1,2.5,{"b":null}],"c":"d","e":true}'
    m = g.matcher()
    ids = model.tokenize(good, add_special=False)
    m.consume(ids)
    assert m.is_done() and m.accepting
    assert m.valid_prefix(model.tokenize("[1,2]", add_special=False)) == 0
    m2 = g.matcher()
    with pytest.raises(ConstraintStuck, match="not allowed"):
        m2.consume(model.tokenize('"just a string"', add_special=False))
    assert m2.n_consumed == 0  # a refused consume leaves the state as it was


def test_grammar_and_regex_walks(model, vocab):
    gbnf = 'root ::= "yes" | "no" | "maybe " [0-9]'
    lark = 'start: "colour: " COLOUR\nCOLOUR: "red" | "green" | "blue"'
    cases = [
        ("grammar", gbnf, r"(yes|no|maybe [0-9])"),
        ("lark", lark, r"colour: (red|green|blue)"),
        ("regex", r"[a-c]{2}-\d{2}", r"[a-c]{2}-\d{2}"),
    ]
    for kind, text, expect in cases:
        g = compile_constraint(Constraint(kind=kind, text=text), vocab)
        for seed in range(4):
            _, out = _walk(model, vocab, g, np.random.default_rng(seed))
            assert re.fullmatch(expect, out), (kind, out)


# -- rollback and forks --------------------------------------------------------------------------
def test_rollback_then_reconsume_gives_identical_masks(model, vocab):
    g = _grammar(vocab, SCHEMAS["array_of_objects"])
    tokens, _ = _walk(model, vocab, g, np.random.default_rng(11))
    m = g.matcher()
    masks = []
    for t in tokens[:-1]:
        masks.append(m.mask().copy())
        m.consume([t])
    rng = np.random.default_rng(5)
    for _ in range(8):  # roll back a random amount, re-consume, compare every mask on the way
        n = int(rng.integers(1, len(masks) + 1))
        m.rollback(n)
        start = len(masks) - n
        for i in range(start, len(masks)):
            assert np.array_equal(m.mask(), masks[i]), f"mask {i} differs after rollback of {n}"
            m.consume([tokens[i]])
    assert m.n_consumed == len(tokens) - 1


def test_rollback_across_end_of_generation(model, vocab):
    """EOG after a complete grammar is not in llguidance's history; rolling it back must still be exact."""
    g = _grammar(vocab, SCHEMAS["enum"])
    tokens, _ = _walk(model, vocab, g, np.random.default_rng(3))
    m = g.matcher()
    m.consume(tokens[:-1])
    before = m.mask().copy()
    assert m.is_done() and not m.ended
    m.consume(tokens[-1:])
    assert m.ended and m.valid_prefix(tokens[-1:]) == 0
    m.rollback(3)
    m.consume(tokens[-3:-1])
    assert np.array_equal(m.mask(), before) and not m.ended
    m.consume(tokens[-1:])
    assert m.n_consumed == len(tokens)


def test_fork_is_independent(model, vocab):
    g = _grammar(vocab, STRICT_PERSON)
    m = g.matcher()
    m.consume(m.forced())
    before = m.mask().copy()
    f = m.fork()
    f.consume([int(np.flatnonzero(f.mask())[0])])
    assert np.array_equal(m.mask(), before)
    assert f.n_consumed == m.n_consumed + 1


def test_rollback_past_the_start_is_refused(vocab):
    m = _grammar(vocab, STRICT_PERSON).matcher()
    with pytest.raises(ValueError, match="rollback of 1"):
        m.rollback(1)


# -- forced tokens -------------------------------------------------------------------------------
def test_forced_tokens_spell_what_the_schema_fixes(model, vocab):
    m = _grammar(vocab, STRICT_PERSON).matcher()
    first = m.forced()
    text = model.detokenize(first)
    assert first and '{"name":"'.startswith(text), text
    m.consume(first)
    # write the rest of the name's string; the schema then fixes `,"age":` (up to its last token,
    # which may merge with what follows)
    m.consume(model.tokenize('{"name":"Ann"'[len(text) :], add_special=False))
    forced = model.detokenize(m.forced())
    assert forced and ',"age":'.startswith(forced), forced


def test_one_allowed_token_is_forced(model, vocab):
    """Wherever the mask leaves one choice, forced() proposes it (a free draft)."""
    g = _grammar(vocab, SCHEMAS["enum"])
    seen = 0

    def check(m, mask):
        nonlocal seen
        allowed = np.flatnonzero(mask)
        forced = m.forced()
        if len(allowed) == 1:
            seen += 1
            assert forced[:1] == [int(allowed[0])]
        for t in forced[:1]:
            assert mask[t]

    for seed in range(3):
        _walk(model, vocab, g, np.random.default_rng(seed), check=check)
    assert seen  # the walk did pass through single-choice states (at least the final EOG)


# -- masks on logits -----------------------------------------------------------------------------
def test_apply_mask_rows_and_in_place(vocab):
    m = _grammar(vocab, STRICT_PERSON).matcher()
    mask = m.mask()
    rng = np.random.default_rng(0)
    rows = rng.normal(size=(3, vocab.n_vocab)).astype(np.float32)
    out = apply_mask(rows, mask)
    assert out.shape == rows.shape and np.isneginf(out[:, ~mask]).all()
    assert np.array_equal(out[:, mask], rows[:, mask])
    assert int(np.argmax(out[0])) in np.flatnonzero(mask)
    apply_mask_(rows, mask)
    assert np.array_equal(rows, out)


# -- bad input -----------------------------------------------------------------------------------
BAD = [
    ("json_schema", '{"type": "object", "properties": {"a": {"type": "strin"}}}', "Invalid type: strin"),
    ("json_schema", '{"type": "string", "format": "no-such-format"}', "Unknown format: no-such-format"),
    ("json_schema", '{"type": "string", "pattern": "(?=a)b"}', "look-around"),
    ("json_schema", '{"$ref": "#/defs/missing"}', "does not exist"),
    ("json_schema", '{"type": "object",', "not JSON"),
    ("json_schema", "[1, 2]", "not list"),
    ("lark", "start: foo", 'unknown name: "foo"'),
    ("grammar", 'root ::= "a" b', "Rule 'b' not found"),
    ("regex", "[a-", "unclosed character class"),
]


@pytest.mark.parametrize("kind,text,needle", BAD)
def test_bad_input_is_one_line_naming_the_problem(vocab, kind, text, needle):
    with pytest.raises(ConstraintError) as e:
        compile_constraint(Constraint(kind=kind, text=text), vocab)
    msg = str(e.value)
    assert needle in msg and "\n" not in msg, msg


def test_non_strict_schema_ignores_what_it_cannot_enforce(vocab):
    text = json.dumps({"type": "string", "format": "no-such-format"})
    g = compile_constraint(Constraint(kind="json_schema", text=text, strict=False), vocab)
    assert any("no-such-format" in w for w in g.warnings)


def test_size_limit_names_the_limit(vocab):
    big = json.dumps({"type": "object", "properties": {f"k{i}": {"type": "integer"} for i in range(30000)}})
    assert len(big) > MAX_TEXT_BYTES
    with pytest.raises(ConstraintError, match=f"the limit is {MAX_TEXT_BYTES} bytes"):
        compile_constraint(Constraint(kind="json_schema", text=big), vocab)


def test_compile_time_is_bounded(vocab):
    keys = json.dumps({"type": "object", "properties": {f"k{i}": {"type": "integer"} for i in range(2000)}})
    with pytest.raises(ConstraintError, match=r"JSON schema took over 0.01 s to compile; simplify it"):
        compile_constraint(Constraint(kind="json_schema", text=keys), vocab, timeout_s=0.01)


def test_compiles_past_their_time_are_capped(vocab):
    """A compile given up on runs to its end in the background; sent again and again, such schemas
    piled up threads on every core without bound (#48). At most two run at once; the rest are told
    to retry (the server's 503)."""
    threads = lambda: [t for t in threading.enumerate() if t.name == "localspec-constraint-compile"]  # noqa: E731
    outcomes = []
    for n in range(10):  # a fresh schema each time: no cache hit
        slow = {"type": "object", "properties": {f"k{n}_{i}": {"type": "integer"} for i in range(2000)}}
        with pytest.raises(LocalspecError) as e:
            compile_constraint(Constraint(kind="json_schema", text=json.dumps(slow)), vocab, timeout_s=0.05)
        outcomes.append(str(e.value))
        assert len(threads()) <= 2, outcomes
    assert any("retry shortly" in o for o in outcomes) and "took over" in outcomes[0]
    deadline = time.monotonic() + 60
    while threads() and time.monotonic() < deadline:
        time.sleep(0.1)
    small = {"type": "object", "properties": {"a": {"type": "integer"}}}
    assert compile_constraint(Constraint(kind="json_schema", text=json.dumps(small)), vocab).warnings == ()


def test_unknown_kind():
    with pytest.raises(ConstraintError, match="unknown constraint kind 'xml'"):
        Constraint(kind="xml")  # type: ignore[arg-type]
