"""The draft model: a small GGUF with the target's vocabulary (--draft), loaded beside the target
with its own context, cache and (with --draft-mmproj) vision projector."""

from __future__ import annotations

from pathlib import Path

from localspec import llama
from localspec.config.settings import Settings
from localspec.draft_kinds.base import DrafterKind, Opened, Opening
from localspec.files import fingerprint
from localspec.gguf.memory_plan import ModelSpec, read_spec


class DraftModel(DrafterKind):
    name = "model"
    has_file = True

    def draft_spec(self, s: Settings) -> ModelSpec | None:
        return read_spec(s.draft)

    def open(self, o: Opening) -> Opened:
        s, dec, st = o.settings, o.decision, o.stack
        model = st.enter_context(
            llama.Model(s.draft, n_gpu_layers=dec.draft_gpu_layers, devices=dec.model_devices("draft"))
        )
        projector = None
        if s.draft_mmproj is not None:  # fed by the target's projector: the same ids, its own rows
            projector = st.enter_context(
                llama.Projector(
                    s.draft_mmproj, model, n_threads=s.n_threads, use_gpu=dec.mode in ("gpu", "partial"),
                    follows=o.projector,
                )
            )  # fmt: skip
            o.log(f"draft vision projector: {s.draft_mmproj.name} ({projector.facts.projector_type})")
        ctx = st.enter_context(llama.Context(model, **s.context_args(), projector=projector))
        return Opened(ctx, model, projector)

    def label(self, s: Settings) -> str:
        return Path(s.draft).name

    def cache_key(self, s: Settings) -> str | None:
        return fingerprint(Path(s.draft))
