"""The target's own multi-token-prediction head (llama/mtp.py) as the drafter: `--draft-source mtp`
(or `--draft mtp`) on a target whose header has MTP (nextn) layers. No file of its own: the target
is loaded with those layers, and the head's context is fed by the target's decodes (so it never
catches up). It drafts as a draft model does (ModelSource), under its own name in the stats, and
the tuner learns it as a draft model's evidence."""

from __future__ import annotations

from localspec.config.settings import Settings
from localspec.draft_kinds.base import DrafterKind, Opened, Opening
from localspec.errors import LocalspecError
from localspec.evaluator import Evaluator
from localspec.gguf.file import GGUFHeader, read_header
from localspec.llama.mtp import MtpDrafter


class MtpHead(DrafterKind):
    name = "mtp"
    own_cache = False
    in_header = True

    def layers_in(self, header: GGUFHeader) -> int:
        return int(header.get("{arch}.nextn_predict_layers", 0) or 0)

    def note(self, layers: int) -> str:
        return f"{layers} MTP layer(s): --draft mtp drafts with them"

    def check(self, s: Settings) -> None:
        if self.layers_in(read_header(s.target)) == 0:
            raise LocalspecError(
                f"--draft mtp: {s.target.name} has no MTP layers (no nextn_predict_layers in its header); "
                "give a draft GGUF instead, or --lookup only"
            )
        if s.mmproj is not None:
            raise LocalspecError(
                "--mmproj with --draft mtp is not supported yet: give a draft GGUF, or --lookup only"
            )

    def target_params(self, s: Settings) -> dict[str, bool]:
        return {"load_mtp": True}

    def open(self, o: Opening) -> Opened:
        return Opened(o.stack.enter_context(MtpDrafter(o.target_ctx)))

    def after_warmup(self, ctx: Evaluator) -> None:
        ctx.reset()  # the target's warm-up fed it
