"""The draft sources, in the order a round walks them: the grammar's forced tokens lead, the
lookup's proposal follows, and a decoding drafter - the draft model or the target's MTP head,
whichever the draft context declares (`Evaluator.source`) - extends them. Adding a source is one
module implementing `DraftSource` (base.py) and one line here (docs/architecture.md shows how)."""

from __future__ import annotations

from typing import NamedTuple

from localspec.decode.sources.base import DraftSource
from localspec.decode.sources.grammar import GrammarSource
from localspec.decode.sources.lookup import LookupSource
from localspec.decode.sources.model import ModelSource
from localspec.decode.sources.mtp import MtpSource
from localspec.evaluator import Evaluator

REGISTERED = (GrammarSource, LookupSource, ModelSource, MtpSource)
# each source's evidence by its name (what the record phase looks up per draft)
EVIDENCE: dict[str, str | None] = {cls.spec.name: cls.spec.evidence for cls in REGISTERED}


class Sources(NamedTuple):
    """A round's sources in order, and those with each optional hook (the round calls no empty one:
    it runs per sequence per round)."""

    all: tuple[DraftSource, ...]
    offering: tuple[DraftSource, ...]
    accepting: tuple[DraftSource, ...]
    resetting: tuple[DraftSource, ...]


def sources_for(draft: Evaluator | None) -> Sources:
    """The sources a round walks over the draft context (None: the free sources only); an engine
    builds them once."""
    made = tuple(s for cls in REGISTERED if (s := cls.for_round(draft)) is not None)
    return Sources(
        made, *(tuple(s for s in made if _overrides(s, hook)) for hook in ("offer", "accept", "reset"))
    )


def _overrides(src: DraftSource, hook: str) -> bool:
    return getattr(type(src), hook) is not getattr(DraftSource, hook)
