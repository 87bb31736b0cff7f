"""Chat templates: the Jinja template stored in the GGUF, rendered with jinja2 in a sandbox, the
way Hugging Face's `apply_chat_template` does (same variables and helpers)."""

from __future__ import annotations

from datetime import datetime
from functools import lru_cache

from .errors import LocalspecError


@lru_cache(maxsize=8)
def _compile(template: str):  # noqa: ANN202
    from jinja2 import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    try:
        return env.from_string(template)
    except TemplateError as e:
        raise LocalspecError(f"the model's chat template does not parse: {e}") from None


def render(template: str | None, messages: list[dict], *, bos_token: str = "", eos_token: str = "") -> str:
    if not template:
        raise LocalspecError("this model has no chat template (tokenizer.chat_template); run without --chat")
    from jinja2 import TemplateError

    try:
        return _compile(template).render(
            messages=messages, add_generation_prompt=True, bos_token=bos_token, eos_token=eos_token
        )
    except TemplateError as e:
        raise LocalspecError(f"the chat template failed: {e}") from None
