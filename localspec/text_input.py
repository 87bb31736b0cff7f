"""Text from people (prompts, stop strings, chat messages) must be valid Unicode before it goes near
a model: Python hands invalid UTF-8 from argv or a file to us as lone surrogates (surrogateescape),
which llama.cpp's tokenizer cannot encode; refuse them up front with the position of the bad byte."""

from __future__ import annotations

from localspec.errors import LocalspecError


def require_text(text: str, what: str = "the prompt") -> str:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        bad = text[e.start]
        shown = f"byte 0x{ord(bad) - 0xDC00:02x}" if 0xDC80 <= ord(bad) <= 0xDCFF else f"U+{ord(bad):04X}"
        raise LocalspecError(
            f"{what} is not valid UTF-8 text ({shown} at character {e.start}); save it as UTF-8"
        ) from None
    return text


def decode_text(data: bytes, what: str = "the prompt") -> str:
    """Bytes (stdin, a file) as UTF-8 text, or one clear error."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise LocalspecError(
            f"{what} is not valid UTF-8 text (byte 0x{data[e.start]:02x} at byte {e.start}); save it as UTF-8"
        ) from None
