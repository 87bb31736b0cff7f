"""Chat templates: the Jinja template stored in the GGUF, rendered in jinja2's sandbox with the
conventions of Hugging Face's `apply_chat_template` (transformers' chat_template_utils), so real
templates parse and render as they do there: `trim_blocks`/`lstrip_blocks`, the `loopcontrols`
extension (`{% break %}`), `{% generation %}` blocks, HF's `tojson` (no HTML escaping, keys in
order, `indent`/`ensure_ascii` as given) and the `raise_exception` and `strftime_now` globals; within
a time and a size bound (bounded.py)."""

from __future__ import annotations

import json
from datetime import datetime
from functools import lru_cache
from typing import Any

from localspec.chat import bounded
from localspec.errors import LocalspecError
from localspec.text_input import require_text


def _tojson(
    x: Any, ensure_ascii: bool = False, indent: int | None = None, separators=None, sort_keys=False
) -> str:  # noqa: ANN001
    # jinja2's own tojson escapes <>&' for HTML and sorts keys; templates were written against HF's
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


@lru_cache(maxsize=8)
def _compile(template: str):  # noqa: ANN202
    from jinja2 import TemplateError, nodes
    from jinja2.ext import Extension, loopcontrols

    from localspec.chat.bounded import BoundedEnvironment

    class Generation(Extension):
        """`{% generation %}...{% endgeneration %}` marks assistant text for training masks in HF;
        for inference it renders its body."""

        tags = {"generation"}

        def parse(self, parser):  # noqa: ANN001, ANN201
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.Scope(body, lineno=lineno)

    def raise_exception(message: str) -> None:
        raise TemplateError(message)

    env = BoundedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols, Generation])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    try:
        return env.from_string(template)
    except TemplateError as e:
        raise LocalspecError(f"the model's chat template does not parse: {e}") from None


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
    tmpl = _compile(template)
    variables = dict(
        messages=messages,
        add_generation_prompt=add_generation_prompt,
        bos_token=bos_token,
        eos_token=eos_token,
        **extra,
    )
    try:
        return bounded.render(tmpl, variables)
    except LocalspecError:  # its time or size bound
        raise
    except Exception as e:  # noqa: BLE001 - a template is a program: any failure is the template's
        raise LocalspecError(f"the chat template failed: {type(e).__name__}: {e}") from None


def render_for(model: Any, messages: list[dict], *, template: str | None = None, **extra: Any) -> str:
    """The prompt text for `messages` through the model's own template and special tokens; `extra`
    are further template variables (tools, enable_thinking, ...)."""
    v = model.vocab
    bos = model.token_text(v.bos) if v.bos >= 0 else ""
    eos = model.token_text(v.eos) if v.eos >= 0 else ""
    return render(template or model.chat_template(), messages, bos_token=bos, eos_token=eos, **extra)


def tokenize_rendered(model: Any, text: str, *, continuation: bool = False) -> list[int]:
    """Tokens of rendered chat text (special tokens parsed). Templates that write the BOS text
    themselves (Llama 3, Gemma) must not get a second BOS from the tokenizer, and a continuation of
    a conversation already tokenized gets none."""
    v = model.vocab
    bos = model.token_text(v.bos) if v.bos >= 0 else ""
    add_bos = not continuation and v.add_bos and not (bos and text.startswith(bos))
    return model.tokenize(text, add_special=add_bos, parse_special=True)


def prompt_tokens(model: Any, messages: list[dict], *, template: str | None = None) -> list[int]:
    """Render `messages` with the model's template and tokenize them."""
    return tokenize_rendered(model, render_for(model, messages, template=template))
