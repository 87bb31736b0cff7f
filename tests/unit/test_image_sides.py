"""Pixels are bounded per side as well as in all (issue 60, #8): a 1 x 16,777,216 strip, within
--image-max-pixels, took 3x the decode time, 8x the projector's and 3.5x the memory of the square
of its area. A side past 4x the square's is refused from the header, before any pixel is decoded;
a wide image short of it is taken."""

from __future__ import annotations

import io

import pytest
from PIL import Image as PIL

from localspec.images import BadImage, Limits, decode_image

SMALL = Limits(5_000_000, 64 * 64)  # sides up to 256


def _png(w: int, h: int) -> bytes:
    buf = io.BytesIO()
    PIL.new("RGB", (w, h), (10, 20, 30)).save(buf, "PNG")
    return buf.getvalue()


@pytest.mark.parametrize(("w", "h"), [(1, 4096), (4096, 1), (257, 8)])
def test_a_side_past_four_times_the_squares_is_refused_naming_it(w, h):
    assert w * h <= SMALL.max_pixels
    with pytest.raises(BadImage, match="a side of more than 256 pixels"):
        decode_image(_png(w, h), SMALL)


def test_a_wide_image_within_the_side_is_taken():
    assert decode_image(_png(256, 16), SMALL).width == 256
    assert Limits(1, 4096 * 4096).max_side == 16384
