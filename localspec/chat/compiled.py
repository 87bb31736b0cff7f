"""A chat template compiled with the conventions of Hugging Face's `apply_chat_template`
(transformers' chat_template_utils), so real templates parse and render as they do there:
`trim_blocks`/`lstrip_blocks`, the `loopcontrols` extension (`{% break %}`), `{% generation %}`
blocks, HF's `tojson` (no HTML escaping, keys in order, `indent`/`ensure_ascii` as given) and the
`raise_exception` and `strftime_now` globals; rendered within bounded.py's bounds. template.py
renders through isolated.py's child, which calls `render_here`."""

from __future__ import annotations

import json
from datetime import datetime
from functools import lru_cache
from typing import Any

from localspec.chat import bounded
from localspec.errors import LocalspecError


def _tojson(
    x: Any, ensure_ascii: bool = False, indent: int | None = None, separators=None, sort_keys=False
) -> str:  # noqa: ANN001
    # jinja2's own tojson escapes <>&' for HTML and sorts keys; templates were written against HF's
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


@lru_cache(maxsize=8)
def compile_template(template: str):  # noqa: ANN202
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


def render_here(template: str, variables: dict[str, Any]) -> str:
    """`render` in this process, within bounded.py's bounds only (isolated.py's child calls it)."""
    tmpl = compile_template(template)
    try:
        return bounded.render(tmpl, variables)
    except (LocalspecError, MemoryError):  # its bounds (isolated.py words a MemoryError)
        raise
    except Exception as e:  # noqa: BLE001 - a template is a program: any failure is the template's
        raise LocalspecError(f"the chat template failed: {type(e).__name__}: {e}") from None
