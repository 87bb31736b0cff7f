"""The kinds of drafter, one module each (base.py says what a kind declares). The loader, the memory
plan, the catalog, doctor, list, the pool and the tuner ask the registry, and name no kind: a new
kind is its module (and its backend's evaluator) plus its line under the `localspec.drafters` entry
points (pyproject.toml), where the settings read the --draft-source choices too; a plug-in package
registers a kind the same way from its own pyproject."""

from __future__ import annotations

from pathlib import Path

from localspec.config.settings import Settings, drafter_entry_points
from localspec.decode.sources.base import DraftSource
from localspec.decode.sources.model import ModelSource
from localspec.draft_kinds.base import DrafterKind
from localspec.errors import LocalspecError
from localspec.gguf.file import GGUFHeader, read_header
from localspec.gguf.memory_kind import facts_from_header


def _registered() -> tuple[DrafterKind, ...]:
    """One instance of every registered kind, in name order (a header carrying two kinds' blocks
    drafts with the first)."""
    kinds = []
    for ep in drafter_entry_points():
        try:
            kind = ep.load()()
        except Exception as e:  # a plug-in's import: say which, not a traceback from deep inside it
            raise LocalspecError(
                f"the drafter kind {ep.name!r} ({ep.value}) failed to load: {e}; fix or uninstall its package"
            ) from None
        if not isinstance(kind, DrafterKind) or kind.name != ep.name:
            raise LocalspecError(
                f"the drafter kind {ep.name!r} ({ep.value}) is not a DrafterKind named {ep.name!r}"
            )
        kinds.append(kind)
    return tuple(kinds)


KINDS: tuple[DrafterKind, ...] = _registered()
BY_NAME = {k.name: k for k in KINDS}


def kind_of(s: Settings) -> DrafterKind | None:
    """The kind that drafts under these settings (None: none does - no draft, lookup only, no spec)."""
    return BY_NAME[s.drafter] if s.drafter is not None else None


def source_of(s: Settings) -> type[DraftSource]:
    """What drafts with the draft context in a round (the decoding source of the kind that drafts)."""
    kind = kind_of(s)
    return kind.source if kind is not None else ModelSource


def in_target(path: str | Path) -> DrafterKind | None:
    """The first kind a lone target's GGUF carries the blocks of (served alone, it drafts with it)."""
    h = read_header(path)
    return next((k for k in KINDS if k.in_header and k.layers_in(h)), None)


def header_layers(h: GGUFHeader) -> dict[str, int]:
    """Per kind a target's header may carry blocks for, how many (doctor's `{name}_layers`)."""
    return {k.name: k.layers_in(h) for k in KINDS if k.in_header}


def describe(path: str | Path) -> str:
    """One line for doctor, list and check-pair: the file's memory kind (what speculation costs on
    it) and the blocks it carries to draft with."""
    h = read_header(path)
    notes = [k.note(n) for k in KINDS if k.in_header and (n := k.layers_in(h))]
    return "; ".join([facts_from_header(h).describe(), *notes])


def label(s: Settings) -> str | None:
    """The model card's `draft`: the draft GGUF's name, what else drafts, or None (lookup drafts)."""
    kind = BY_NAME[s.draft_source]  # named, even while these settings do not draft (lookup only)
    return None if kind.has_file and s.draft is None else kind.label(s)


def cache_key(s: Settings) -> str | None:
    """The tuner memory's `draft` for these settings (None: lookup drafts only)."""
    kind = kind_of(s)
    return kind.cache_key(s) if kind is not None else None
