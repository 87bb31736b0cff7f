"""Chat templates: the Jinja template stored in the GGUF, rendered in jinja2's sandbox with the
conventions of Hugging Face's `apply_chat_template` (compiled.py), within a time and a size bound
(bounded.py), in a child process under hard limits (isolated.py)."""

from __future__ import annotations

from typing import Any

from localspec.chat import isolated, verbatim
from localspec.chat.compiled import compile_template as _compile  # noqa: F401 - tests compare with it
from localspec.errors import LocalspecError
from localspec.text_input import require_text


def check_messages(messages: Any) -> list[dict]:
    """Messages as the templates expect them: dicts with a role and text content."""
    if not isinstance(messages, list) or not messages:
        raise LocalspecError("chat messages must be a non-empty list")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise LocalspecError(f"chat message {i} must be an object with a 'role' string")
        content = m.get("content")
        if isinstance(content, str):
            require_text(content, f"chat message {i}")
        elif content is not None and not isinstance(content, list):
            raise LocalspecError(f"chat message {i}: content must be text")
    return messages


def render(
    template: str | None,
    messages: list[dict],
    *,
    bos_token: str = "",
    eos_token: str = "",
    add_generation_prompt: bool = True,
    **extra: Any,
) -> str:
    """The prompt text for `messages`; `extra` are further template variables (tools, date_string)."""
    if not template:
        raise LocalspecError("this model has no chat template (tokenizer.chat_template); run without --chat")
    check_messages(messages)
    variables = dict(
        messages=messages,
        add_generation_prompt=add_generation_prompt,
        bos_token=bos_token,
        eos_token=eos_token,
        **extra,
    )
    return isolated.render(template, variables)


def render_for(model: Any, messages: list[dict], *, template: str | None = None, **extra: Any) -> str:
    """The prompt text for `messages` through the model's own template and special tokens; `extra`
    are further template variables (tools, enable_thinking, ...). Control tokens' text in messages
    and variables comes back marked as text (verbatim.py): `tokenize_rendered` spells it as text,
    `verbatim.plain` gives the text a person reads."""
    v = model.vocab
    bos = model.token_text(v.bos) if v.bos >= 0 else ""
    eos = model.token_text(v.eos) if v.eos >= 0 else ""
    messages, extra = verbatim.protect(model, messages), verbatim.protect(model, extra)
    return render(template or model.chat_template(), messages, bos_token=bos, eos_token=eos, **extra)


def tokenize_rendered(model: Any, text: str, *, continuation: bool = False) -> list[int]:
    """Tokens of rendered chat text (special tokens parsed, not in what verbatim.py marked as
    text: the messages' own). Templates that write the BOS text
    themselves (Llama 3, Gemma) must not get a second BOS from the tokenizer, and a continuation of
    a conversation already tokenized gets none."""
    v = model.vocab
    bos = model.token_text(v.bos) if v.bos >= 0 else ""
    add_bos = not continuation and v.add_bos and not (bos and text.startswith(bos))
    return verbatim.tokenize(model, text, add_special=add_bos)


def prompt_tokens(model: Any, messages: list[dict], *, template: str | None = None) -> list[int]:
    """Render `messages` with the model's template and tokenize them."""
    return tokenize_rendered(model, render_for(model, messages, template=template))
