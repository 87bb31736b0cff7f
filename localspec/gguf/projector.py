"""A vision projector (`mmproj` GGUF) from its header alone: what it is, which width of language
model it feeds, and what it costs in memory - checked before mtmd reads the file (a downloaded file
is untrusted input) and counted by the memory plan and `doctor`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from localspec.errors import LocalspecError
from localspec.gguf.file import read_header, validate_gguf

F32 = 4


@dataclass(frozen=True)
class ProjectorFacts:
    path: Path
    projector_type: str
    n_embd_text: int | None  # the language model width it was made for (converters write it)
    n_embd: int  # the vision tower's width
    n_layer: int
    n_ff: int
    n_head: int
    image_size: int
    patch_size: int
    weights_bytes: int

    @property
    def n_patches(self) -> int:
        side = self.image_size // max(1, self.patch_size)
        return side * side

    @property
    def compute_bytes(self) -> int:
        """The vision graph's peak at its own image size, f32: the attention scores of every head
        over all patches, or the FFN's activations, whichever is larger, plus the rows it writes.
        An estimate (clip.cpp logs the real figure at load); models that tile an image encode one
        tile at a time."""
        n, d = self.n_patches, self.n_embd
        attn = self.n_head * n * n * F32 + 4 * n * d * F32
        ffn = n * (2 * self.n_ff + 2 * d) * F32
        out = n * (self.n_embd_text or d) * F32
        return max(attn, ffn) + out

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "projector_type": self.projector_type,
            "n_embd_text": self.n_embd_text,
            "image_size": self.image_size,
            "weights_bytes": self.weights_bytes,
            "compute_bytes": self.compute_bytes,
        }


def projector_facts(path: str | Path) -> ProjectorFacts:
    """The header's facts, or one clear error for a file that is not a vision projector."""
    h = validate_gguf(path)
    if h.arch != "clip":
        raise LocalspecError(
            f"{path} is not a projector (general.architecture is {h.arch!r}, not 'clip'); --mmproj "
            "takes the mmproj-*.gguf file that comes with a vision model"
        )
    if not h.get("clip.has_vision_encoder", False):
        raise LocalspecError(f"{path} has no vision encoder (an audio-only projector?)")
    kind = h.get("clip.projector_type") or h.get("clip.vision.projector_type")
    if not isinstance(kind, str) or not kind:
        raise LocalspecError(f"{path} does not say which projector it is (clip.projector_type)")

    def num(key: str, default: int | None = 0) -> Any:
        v = h.get(f"clip.vision.{key}", default)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < 1 << 24):
            raise LocalspecError(f"{path}: clip.vision.{key} is {v!r}, not a size")
        return v

    return ProjectorFacts(
        path=Path(path),
        projector_type=kind,
        n_embd_text=num("projection_dim", None) or None,
        n_embd=num("embedding_length"),
        n_layer=num("block_count"),
        n_ff=num("feed_forward_length"),
        n_head=num("attention.head_count"),
        image_size=num("image_size"),
        patch_size=num("patch_size", 1),
        weights_bytes=sum(t.n_bytes for t in h.tensors),
    )


DRAFT_NEEDS_TARGET = "--draft-mmproj needs --mmproj: the target must see the images the draft sees"


def given_projectors(mmproj, draft_mmproj, target, draft) -> list[tuple[Path, Any, str]]:  # noqa: ANN001
    """(projector, the model it feeds, its role) for the projectors given (None: not given)."""
    both = ((mmproj, target, "target"), (draft_mmproj, draft, "draft"))
    return [(Path(p), m, role) for p, m, role in both if p is not None]


def check_fits_text(facts: ProjectorFacts, n_embd_text: int, model: str = "target") -> None:
    """The projector writes rows of the language model's width, or it was made for another model."""
    if facts.n_embd_text is not None and facts.n_embd_text != n_embd_text:
        raise LocalspecError(
            f"{facts.path} makes {facts.n_embd_text}-wide embeddings, but the {model} is {n_embd_text} "
            f"wide: it is the projector of another model (use the mmproj file from the {model}'s repo)"
        )


def projector_for(mmproj: str | Path, target: str | Path, model: str = "target") -> ProjectorFacts:
    """The projector's facts, checked against the model it is to feed (headers only): what
    `check-pair --mmproj`, `pair --mmproj` and `pull` refuse before anything loads."""
    facts = projector_facts(mmproj)
    h = read_header(target)
    n_embd = h.get(f"{h.arch}.embedding_length")
    if isinstance(n_embd, int) and not isinstance(n_embd, bool):
        check_fits_text(facts, n_embd, model)
    return facts
