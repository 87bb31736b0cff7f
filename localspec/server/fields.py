"""Unknown request fields, per dialect. A field a real client sends that does not change the answer
is accepted and ignored: its request model lists it in `IGNORED`. Any other field no model reads is
a 400 that names it, in the dialect's own shape: a client never gets an answer it did not ask for
without being told. Request models that should be checked derive from `Checked`; nested ones too."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from localspec.serving.errors import APIError

MAX_ITEMS = 100_000  # messages, input items or tools in one request, at most (Anthropic's own limit)


class Checked(BaseModel):
    model_config = ConfigDict(extra="allow")  # kept, to be named by unsupported()
    IGNORED: ClassVar[frozenset[str]] = frozenset()


def unsupported(value: Any, path: str = "") -> str | None:
    """The dotted path of the first field sent, here or in a nested model, that is neither read
    nor in its Checked model's IGNORED."""
    if isinstance(value, BaseModel):
        if isinstance(value, Checked):
            extra = next((k for k in value.model_extra or {} if k not in value.IGNORED), None)
            if extra is not None:
                return path + extra
        for name in type(value).model_fields:
            found = unsupported(getattr(value, name), f"{path}{name}.")
            if found:
                return found
    elif isinstance(value, (list, tuple)) and value and isinstance(value[0], (BaseModel, list, tuple)):
        for i, item in enumerate(value):
            found = unsupported(item, f"{path}{i}.")
            if found:
                return found
    return None


def refuse_unsupported(body: BaseModel) -> None:
    field = unsupported(body)
    if field is not None:
        raise APIError(
            400,
            f"{field!r} is not supported by this server (docs/apps.md lists the fields that are)",
            param=field,
        )
