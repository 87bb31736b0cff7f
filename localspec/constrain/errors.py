"""What can go wrong with a constraint, as LocalspecErrors a person can act on (the server: a 400)."""

from __future__ import annotations

from ..errors import LocalspecError


class ConstraintError(LocalspecError):
    """A schema, grammar or regex that is invalid, unsupported or too big; the message names why."""


class ConstraintStuck(LocalspecError):
    """The grammar cannot continue from what was generated (a token it refused, or a resource limit)."""
