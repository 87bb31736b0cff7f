"""A chat request's plan: its messages, tools and template variables rendered through the model's own
template, the parser its answer goes through (content, reasoning, tool calls of the template's
family), the control tokens that parser must see as text, and the constraint a forced call needs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from localspec.chat import families, media, tool_grammar, tool_prompt, verbatim
from localspec.chat.output import answer_parser
from localspec.config.settings import Settings
from localspec.constrain.vocab import special_text
from localspec.engine import Engine
from localspec.engine.facade import TextModel
from localspec.images import BadImage, Image, decode_image
from localspec.serving.errors import APIError
from localspec.serving.request import Message, Request

RESERVED_VARS = ("messages", "tools", "add_generation_prompt", "bos_token", "eos_token")
CONSTRAINTS = ("json_schema", "grammar")


@dataclass
class ChatPlan:
    prompt_text: str
    prompt_ids: list[int]
    family: families.Family
    tools_on: bool  # the answer may call tools (tools given, tool_choice not none)
    make_parser: Callable[[], Any]
    keep_special: tuple[int, ...] = ()
    overrides: dict[str, Any] = field(default_factory=dict)  # the constraint a call needs, if any
    images: list[Any] = field(default_factory=list)  # the image runs the prompt's image ids come from

    @property
    def prompt(self) -> media.Prompt:
        return media.Prompt(self.prompt_ids, self.images)


def tool_choice(req: Request) -> str | None:
    """None (auto), "none", "required", or the name of the function that must be called."""
    if req.forced_tool is not None:
        if req.forced_tool not in [t.name for t in req.tools]:
            raise APIError(
                400,
                f"tool_choice names {req.forced_tool!r}, which is not among the tools",
                param="tool_choice",
            )
        return req.forced_tool
    if req.tool_choice == "required" and not req.tools:
        raise APIError(400, "tool_choice 'required' needs tools", param="tool_choice")
    return None if req.tool_choice == "auto" else req.tool_choice


def template_message(m: Message, marker: str = "") -> dict[str, Any]:
    """A message as chat templates read it (Hugging Face's conventions); `marker` where each of its
    images goes (chat.media)."""
    content = m.content
    for img in sorted(m.images, key=lambda i: i.at, reverse=True):  # from the end: offsets stay true
        content = content[: img.at] + marker + content[img.at :]
    msg: dict[str, Any] = {"role": m.role, "content": content}
    if m.reasoning:
        msg["reasoning_content"] = m.reasoning
    if m.tool_calls:
        msg["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in m.tool_calls
        ]
    if m.role == "tool":
        msg["tool_call_id"] = m.tool_call_id or ""
        if m.name:
            msg["name"] = m.name
    return msg


def template_tool(t: Any) -> dict[str, Any]:
    # what llama.cpp renders of a tool: `strict` is the API's promise about the arguments, which the
    # call's grammar keeps; the model is not told it
    fn = {"name": t.name, "description": t.description, "parameters": t.parameters}
    return {"type": "function", "function": {k: v for k, v in fn.items() if v is not None}}


def template_vars(req: Request) -> dict[str, Any]:
    extra = dict(req.template_vars)
    bad = [k for k in extra if k in RESERVED_VARS]
    if bad:
        raise APIError(400, f"chat_template_kwargs may not set {bad[0]!r}", param="chat_template_kwargs")
    if req.reasoning is not None:
        extra.setdefault("enable_thinking", req.reasoning)
    return extra


def images_of(req: Request, s: Settings, vision: bool) -> list[Image]:
    """Every image of the conversation, in order, decoded within the server's limits (or a 400;
    `vision`: the model has a projector to read them with)."""
    found = [(i, img) for i, m in enumerate(req.messages) for img in sorted(m.images, key=lambda x: x.at)]
    if found and not vision:
        raise APIError(400, media.NO_PROJECTOR, param=f"messages.{found[0][0]}.content", code="invalid_image")
    if len(found) > s.max_images:
        raise APIError(400, f"{len(found)} images in one request; at most {s.max_images}", param="messages")
    out = []
    for n, (i, img) in enumerate(found):
        try:
            out.append(decode_image(img.data, s.image_limits, f"image {n + 1}"))
        except BadImage as e:
            raise APIError(400, str(e), param=f"messages.{i}.content", code="invalid_image") from None
    return out


def special_markers(target: TextModel, family: families.Family) -> dict[str, int]:
    """The family's markers that are one special token in the target's vocabulary, by their id: the
    output keeps their text and grammars name them by id (Qwen's `<tool_call>`, Mistral's `[ARGS]`)."""
    out = {}
    for marker in family.specials:
        toks = target.tokenize(marker, add_special=False, parse_special=True)
        if len(toks) == 1 and special_text(target, toks[0]):
            out[marker] = toks[0]
    return out


def plan(engine: Engine, req: Request, s: Settings) -> ChatPlan:
    """Render and tokenize a chat request (runs off the event loop: templates, tokenizing and
    decoding images cost)."""
    model = engine.text
    template = model.chat_template()
    family = families.detect(template)
    choice = tool_choice(req)
    tools = [template_tool(t) for t in req.tools]
    tools_on = bool(tools) and choice != "none"
    extra = template_vars(req)
    images, marker = images_of(req, s, engine.vision), media.new_marker()
    msgs = [template_message(m, marker) for m in req.messages]
    if template and (tools_on or any("tool_calls" in m or m["role"] == "tool" for m in msgs)):
        msgs, tool_vars = tool_prompt.prepare(
            template, msgs, tools if tools_on else None, family,
            choice=choice if choice != "none" else None, parallel=req.parallel_tool_calls,
        )  # fmt: skip
        extra.update(tool_vars)
    marked = engine.render_chat(msgs, **extra)  # the messages' control-token text marked as text
    prompt = (
        engine.tokenize_images(marked, images, marker)
        if images
        else media.Prompt(engine.tokenize_chat(marked))
    )
    text = verbatim.plain(model, marked)
    specials = special_markers(model, family) if tools_on else {}
    own = any(k in req.overrides for k in CONSTRAINTS)
    overrides = (
        tool_grammar.constraint(family, tools, choice, parallel=req.parallel_tool_calls, specials=specials)
        if tools_on and not own  # a request's own constraint wins (docs/apps.md)
        else {}
    )
    return ChatPlan(
        text, prompt.ids, family, tools_on,
        lambda: answer_parser(family, tools=tools_on, template=template, prompt=text,
                              reasoning_format=s.reasoning_format, tool_names=[t.name for t in req.tools]),
        tuple(specials.values()), overrides, prompt.runs,
    )  # fmt: skip
