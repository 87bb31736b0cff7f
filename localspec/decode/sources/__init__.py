"""The draft sources, in the order a round walks them: the grammar's forced tokens lead, the
lookup's proposal follows, and the decoding drafter over the draft context extends them - the kind
of drafter loaded (localspec/draft_kinds) names its source (`ModelSource` unless it brings its own),
and its context names its drafts (`Evaluator.source`). Adding a free source is one module
implementing `DraftSource` (base.py) and one line here (docs/architecture.md shows how)."""

from __future__ import annotations

from typing import Any, Mapping, NamedTuple

from localspec.decode.sources.base import DraftSource
from localspec.decode.sources.grammar import GrammarSource
from localspec.decode.sources.history import HistorySource
from localspec.decode.sources.lookup import LookupSource
from localspec.decode.sources.model import ModelSource
from localspec.draft_len.evidence import LOOKUP, MODEL
from localspec.evaluator import Evaluator

FREE_SOURCES = (GrammarSource, LookupSource, HistorySource)  # the sources that cost no decode, in order


class Sources(NamedTuple):
    """A round's sources in order, and those with each optional hook (the round calls no empty one:
    it runs per sequence per round)."""

    all: tuple[DraftSource, ...]
    offering: tuple[DraftSource, ...]
    accepting: tuple[DraftSource, ...]
    resetting: tuple[DraftSource, ...]
    finishing: tuple[DraftSource, ...]
    evidence: dict[str, str | None]  # each source's evidence by its name (the record phase's lookup)
    certain: tuple[str, ...]  # the names of the sources whose drafts feed no evidence (kept for certain)
    by_match: tuple[str, ...]  # ... of those priced by match length (draft_len/evidence.py LOOKUP)
    free: tuple[str, ...]  # ... and of every free source, in order (the rest: the drafter's)
    drafter: DraftSource | None  # the one that decodes with the draft context, if there is one


def remembered(settings: Any) -> dict[type, Any]:
    """What the free sources keep across requests under these settings, by source (an engine's,
    one per model: never shared between the router's models)."""
    return {cls: kept for cls in FREE_SOURCES if (kept := cls.remembers(settings)) is not None}


def sources_for(
    draft: Evaluator | None,
    drafting: type[DraftSource] = ModelSource,
    kept: Mapping[type, Any] | None = None,
) -> Sources:
    """The sources a round walks over the draft context (None: the free sources only), `drafting`
    the one that decodes with it (its kind's, localspec/draft_kinds), `kept` what the free sources
    keep across requests (`remembered`); an engine builds them once."""
    kept = kept or {}
    made = tuple(
        s for cls in (*FREE_SOURCES, drafting) if (s := cls.for_round(draft, kept.get(cls))) is not None
    )
    evidence = {s.spec.name: s.spec.evidence for s in made}
    return Sources(
        made,
        *(tuple(s for s in made if _overrides(s, hook)) for hook in ("offer", "accept", "reset", "finish")),
        evidence,
        tuple(name for name, kind in evidence.items() if kind is None),
        tuple(name for name, kind in evidence.items() if kind == LOOKUP),
        tuple(name for name, kind in evidence.items() if kind != MODEL),
        next((s for s in made if isinstance(s, drafting)), None),
    )


def _overrides(src: DraftSource, hook: str) -> bool:
    return getattr(type(src), hook) is not getattr(DraftSource, hook)
