"""Images from strangers (a request's base64, a file on the command line) as RGB pixels, or one clear
error. Pillow reads only the header before any pixel is decoded, so a decompression bomb or absurd
dimensions are refused before memory is spent; a truncated or foreign file is refused by name."""

from __future__ import annotations

import hashlib
import io
import math
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING

from localspec.errors import LocalspecError

if TYPE_CHECKING:
    import numpy as np

# what the page, the APIs and `--image` accept; every other format Pillow knows stays closed
FORMATS = ("PNG", "JPEG", "WEBP", "GIF", "BMP")


class BadImage(LocalspecError):
    """An image that cannot be used (a 400 in the server; a one-line error in the CLI)."""


SIDE_FACTOR = 4  # a side is at most this many times the side of the largest square allowed


@dataclass(frozen=True)
class Limits:
    max_bytes: int
    max_pixels: int

    @property
    def max_side(self) -> int:
        """The longest side taken (16,384 for 4096²): a 1 x 16,777,216 strip, within the pixels,
        took 3x the decode time, 8x the projector's and 3.5x the memory of a square of its area;
        a 16384 x 1024 one costs what the square does."""
        return SIDE_FACTOR * math.isqrt(self.max_pixels)


@dataclass(frozen=True, eq=False)
class Image:
    """One decoded image: RGB pixels (height, width, 3) and the sha256 of its encoded bytes, which
    names it in the prompt cache (the same file is the same image, whatever the request)."""

    pixels: np.ndarray
    digest: str

    @property
    def width(self) -> int:
        return int(self.pixels.shape[1])

    @property
    def height(self) -> int:
        return int(self.pixels.shape[0])


def decode_image(data: bytes, limits: Limits, what: str = "the image") -> Image:
    """`data` (an encoded PNG, JPEG, WebP, GIF or BMP) as RGB pixels, within `limits`."""
    import numpy as np  # noqa: PLC0415 - only where images are used (settings imports this module)
    from PIL import Image as PIL  # noqa: PLC0415
    from PIL import UnidentifiedImageError  # noqa: PLC0415

    if not data:
        raise BadImage(f"{what} is empty")
    if len(data) > limits.max_bytes:
        raise BadImage(
            f"{what} is {len(data):,} bytes, over the limit of {limits.max_bytes:,} (--image-max-bytes)"
        )
    try:
        with warnings.catch_warnings():  # Pillow's own bomb warning: our limit below decides
            warnings.simplefilter("ignore", PIL.DecompressionBombWarning)
            img = PIL.open(io.BytesIO(data), formats=FORMATS)
    except UnidentifiedImageError:
        raise BadImage(f"{what} is not an image localspec reads ({', '.join(FORMATS)})") from None
    except PIL.DecompressionBombError:
        raise BadImage(f"{what} declares absurd dimensions (a decompression bomb?)") from None
    except (OSError, ValueError, SyntaxError) as e:
        raise BadImage(f"{what} cannot be read: {e}") from None
    with img:
        w, h = img.size
        if w < 1 or h < 1 or w * h > limits.max_pixels:
            raise BadImage(
                f"{what} is {w}x{h} pixels, over the limit of {limits.max_pixels:,} pixels "
                "(--image-max-pixels); send a smaller image"
            )
        if max(w, h) > limits.max_side:
            raise BadImage(
                f"{what} is {w}x{h} pixels: a side of more than {limits.max_side:,} pixels "
                f"({SIDE_FACTOR}x the side of --image-max-pixels' square) is not taken; crop or scale it"
            )
        try:
            rgb = np.asarray(img.convert("RGB"), dtype=np.uint8)  # the first frame of an animation
        except (OSError, ValueError, SyntaxError, EOFError) as e:
            raise BadImage(f"{what} is damaged or truncated: {e}") from None
    return Image(np.ascontiguousarray(rgb), hashlib.sha256(data).hexdigest())
