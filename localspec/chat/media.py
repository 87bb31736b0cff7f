"""Images in a prompt: where they go in the rendered text, and the prompt's tokens with each image's
ids spliced in (llama/vision.py).

As llama-server does, an image part becomes a marker in its message's text, the chat template
renders text only, and the rendered prompt is cut at the markers: the text between them is
tokenized as chat text, each image is what its projector makes of it (its ids, and the model's own
image markers, e.g. Gemma 3's <start_of_image>). The marker is random per prompt, so no text a
person writes can stand for an image.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any, Sequence

from localspec.chat.template import tokenize_rendered
from localspec.errors import LocalspecError
from localspec.images import Image
from localspec.llama.vision import ImageRun, Projector

NO_PROJECTOR = (
    "this model takes no images: give its vision projector with --mmproj FILE (the mmproj-*.gguf "
    "beside the model, or a pair whose pair.toml names one)"
)


@dataclass
class Prompt:
    """Token ids with images spliced in, and the image runs they hold (kept alive with the request)."""

    ids: list[int]
    runs: list[ImageRun] = field(default_factory=list)
    n_images: int = 0

    @property
    def n_image_ids(self) -> int:
        return sum(len(r.ids) for r in self.runs)


def new_marker() -> str:
    return f"<__image_{secrets.token_hex(8)}__>"


def flatten(messages: list[dict], marker: str) -> tuple[list[dict], list[Image]]:
    """Messages whose content is a list of parts ({"type": "text", "text": ...}, {"type": "image",
    "image": Image}) as text messages with `marker` where each image was, and the images in order."""
    out, images = [], []
    for i, m in enumerate(messages):
        content = m.get("content") if isinstance(m, dict) else None
        if not isinstance(content, list):
            out.append(m)
            continue
        text = []
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "image" and isinstance(part.get("image"), Image):
                images.append(part["image"])
                text.append(marker)
            elif kind == "text" and isinstance(part.get("text"), str):
                text.append(part["text"])
            else:
                raise LocalspecError(f"chat message {i}: a content part is text or an image")
        out.append({**m, "content": "".join(text)})
    return out, images


def tokenize(
    model: Any,
    projector: Projector | None,
    text: str,
    images: Sequence[Image],
    marker: str,
    *,
    chat: bool,
    continuation: bool = False,
) -> Prompt:
    """`text` (rendered chat text when `chat`, else plain text) cut at `marker`, one image at each."""
    pieces = text.split(marker) if images else [text]
    if len(pieces) != len(images) + 1:
        raise LocalspecError(
            f"the chat template kept {len(pieces) - 1} of the prompt's {len(images)} images in place; "
            "this model's template cannot show images"
        )
    if images and projector is None:
        raise LocalspecError(NO_PROJECTOR)
    prompt = Prompt(_text(model, pieces[0], chat=chat, first=not continuation), n_images=len(images))
    for image, piece in zip(images, pieces[1:]):
        for part in projector.pieces(image):  # type: ignore[union-attr] - checked above
            if isinstance(part, ImageRun):
                prompt.ids += part.ids
                prompt.runs.append(part)
            else:
                prompt.ids += part
        prompt.ids += _text(model, piece, chat=chat, first=False)
    return prompt


def _text(model: Any, text: str, *, chat: bool, first: bool) -> list[int]:
    if not text and not first:
        return []
    if chat:
        return tokenize_rendered(model, text, continuation=not first)
    return model.tokenize(text, add_special=first, parse_special=False)
