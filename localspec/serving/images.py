"""Images as the dialects send them - a data URL (OpenAI chat and Responses) or bare base64
(Anthropic, Ollama) - as bytes, or a 400 that says what to send instead. The server never fetches a
URL: a remote image is refused, so a request cannot make it reach into the network."""

from __future__ import annotations

import base64
import binascii
import re

from localspec.serving.errors import APIError

_DATA_URL = re.compile(
    r"data:(?P<type>[\w.+-]+/[\w.+-]+)?(?P<params>(;[\w.+-]+=[^;,]*)*)(?P<b64>;base64)?,", re.I
)


def from_data_url(url: str, param: str) -> bytes:
    """`data:image/png;base64,...` as bytes; an http(s) URL (or anything else) is a 400."""
    m = _DATA_URL.match(url)
    if m is None:
        what = "a remote image URL" if re.match(r"https?://", url, re.I) else "this image URL"
        raise APIError(
            400,
            f"{what} is not fetched: the server reads only images sent inline, as a data URL "
            "(data:image/png;base64,...)",
            param=param,
            code="invalid_image_url",
        )
    if not m.group("b64"):
        raise APIError(400, "an image data URL must be base64 (data:image/png;base64,...)", param=param)
    return from_base64(url[m.end() :], param)


def from_base64(data: str, param: str) -> bytes:
    try:
        return base64.b64decode("".join(data.split()), validate=True)  # MIME-style line breaks allowed
    except (binascii.Error, ValueError):
        raise APIError(400, "the image is not valid base64", param=param, code="invalid_image") from None
