"""A toy vocabulary of JSON pieces for the fake backend's constrained rounds (with overlapping tokens,
so a forced run can be spelled more than one way), which llguidance turns into masks like any
GGUF's, and the small schema the tests, the property test and research/round_invariants.py use."""

from __future__ import annotations

import json

from localspec.constrain import Constraint, build_vocabulary, compile_constraint

PIECES = ["<eos>", "{", "}", '"', ":", ",", "a", "b", "1", "2", '{"', '":', "ab", '"}', "x", "y"]
EOG = 0
SCHEMA = {
    "type": "object",
    "properties": {"a": {"enum": ["ab", "b", "ba"]}, "b": {"type": "integer", "minimum": 1, "maximum": 212}},
    "required": ["a", "b"],
    "additionalProperties": False,
}


class ToyVocab:
    """A VocabSource over `pieces` (PIECES by default); token 0 is a control token (EOG)."""

    def __init__(self, pieces: list[str] = PIECES) -> None:
        self.pieces = pieces
        self.n_vocab = len(pieces)

    def token_bytes(self, token: int, *, special: bool = False) -> bytes:
        return b"" if token == EOG and not special else self.pieces[token].encode()

    def token_attr(self, token: int) -> int:
        return 1 << 3 if token == EOG else 1 << 2

    def is_eog(self, token: int) -> bool:
        return token == EOG

    def tokenize(self, text: str, *, add_special: bool = True, parse_special: bool = False) -> list[int]:
        out, i = [], 0  # greedy longest match: the toy model's "BPE"
        while i < len(text):
            t = max(
                (t for t in range(1, self.n_vocab) if text.startswith(self.pieces[t], i)),
                key=lambda t: len(self.pieces[t]),
            )
            out.append(t)
            i += len(self.pieces[t])
        return out

    def text(self, tokens) -> str:  # noqa: ANN001
        return "".join(self.pieces[t] for t in tokens if t != EOG)


TOY = ToyVocab()
VOCAB = build_vocabulary(TOY)
GRAMMAR = compile_constraint(Constraint(kind="json_schema", text=json.dumps(SCHEMA)), VOCAB)
