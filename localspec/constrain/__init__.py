"""Constrained decoding: llguidance behind one small interface.

vocab = vocabulary_for(model)                          # once per model, shared by requests
grammar = compile_constraint(Constraint(kind="json_schema", text=schema), vocab)
m = grammar.matcher()                                  # one per sequence
row = apply_mask(logits, m.mask()); m.consume([tok])   # ... m.rollback(n), m.forced(), m.is_done()
"""

from .compile import KINDS, MAX_TEXT_BYTES, Constraint, Grammar, compile_constraint
from .errors import ConstraintError, ConstraintStuck
from .mask import apply_mask, apply_mask_, fit
from .matcher import Matcher
from .vocab import Vocabulary, build_vocabulary, vocabulary_for

__all__ = [
    "KINDS",
    "MAX_TEXT_BYTES",
    "Constraint",
    "ConstraintError",
    "ConstraintStuck",
    "Grammar",
    "Matcher",
    "Vocabulary",
    "apply_mask",
    "apply_mask_",
    "build_vocabulary",
    "compile_constraint",
    "fit",
    "vocabulary_for",
]
