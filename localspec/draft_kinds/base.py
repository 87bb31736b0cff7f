"""What a kind of drafter is (llama.cpp's one init per `--spec-type`, vLLM's proposer per file): a
unit the loader, the memory plan, the catalog, doctor, list and the tuner ask - its name in the
settings, how a target's GGUF header shows it, what it adds to the memory plan, how it opens
(`open(opening) -> Opened`, the round's draft Evaluator), its card label and tuner-cache key, and
the `DraftSource` that drafts with it. A kind overrides what differs from a drafter that needs
nothing of its own; the registry (__init__.py) lists the kinds."""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple

from localspec.config.settings import Settings
from localspec.decode.sources.base import DraftSource
from localspec.decode.sources.model import ModelSource
from localspec.evaluator import Evaluator
from localspec.gguf.file import GGUFHeader
from localspec.gguf.memory_plan import ModelSpec


@dataclass(frozen=True)
class Opening:
    """What a drafter opens against: the loaded target (its model, context and projector), how the
    pair is placed (placement.Decision), the owner of every handle, and where load lines go."""

    settings: Settings
    target: Any  # llama.Model
    target_ctx: Any  # llama.Context
    projector: Any  # llama.Projector | None
    decision: Any
    stack: ExitStack
    log: Callable[[str], None]


class Opened(NamedTuple):
    ctx: Evaluator  # the round's draft context
    model: Any = None  # a model of its own (llama.Model), when it has weights apart from the target's
    projector: Any = None  # its own vision projector, when it has one


class DrafterKind:
    name: str  # its --draft-source value (the settings' choices are the registered names)
    source: type[DraftSource] = ModelSource  # what drafts with its context in a round
    own_cache: bool = True  # it keeps a cache of its own: catches up on the prompt (the tuner times it)
    has_file: bool = False  # it loads the --draft GGUF
    in_header: bool = False  # a target's own header may carry its blocks (`layers_in`)

    def layers_in(self, header: GGUFHeader) -> int:
        """Recognition: the blocks a target's GGUF carries for this kind to draft with (0: none)."""
        return 0

    def note(self, layers: int) -> str:
        """What doctor, list and check-pair say of a header carrying `layers` of its blocks."""
        return ""

    def check(self, s: Settings) -> None:
        """Refuse, in one line, what it cannot draft with (before any weights are loaded)."""

    def draft_spec(self, s: Settings) -> ModelSpec | None:
        """What it adds to the memory plan: a model of its own, planned as the draft."""
        return None

    def target_params(self, s: Settings) -> dict[str, Any]:
        """llama_model_params fields the target's load needs for it."""
        return {}

    def open(self, o: Opening) -> Opened:
        raise NotImplementedError

    def after_warmup(self, ctx: Evaluator) -> None:
        """The contexts were warmed up (a context fed by the target's decodes saw the target's)."""

    def label(self, s: Settings) -> str:
        """The model card's `draft`: its file's name, or what drafts."""
        return self.name

    def cache_key(self, s: Settings) -> str | None:
        """The tuner memory's `draft` (its costs are remembered under it)."""
        return self.name
