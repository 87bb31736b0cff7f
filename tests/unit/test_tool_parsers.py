"""Tool-call and reasoning parsers per template family, on the families' own syntax: the family is
detected from real chat templates (tests/data/templates: the models' tokenizer_config texts, the
SmolLM2 one as its GGUF in models/ carries it), and every answer parsed in random pieces - as tokens
arrive - assembles to the same message as the whole answer parsed at once."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from localspec.chat import families
from localspec.chat.deltas import Delta, assemble
from localspec.chat.output import answer_parser, parse_answer

TEMPLATES = Path(__file__).parent.parent / "data" / "templates"


def template(name: str) -> str:
    return (TEMPLATES / f"{name}.jinja").read_text()


@pytest.mark.parametrize(
    "name, family",
    [
        ("Qwen-Qwen2.5-7B-Instruct", "hermes"),
        ("Qwen-Qwen3-0.6B", "hermes"),
        ("meta-llama-Llama-3.1-8B-Instruct", "llama3"),
        ("meta-llama-Llama-3.2-3B-Instruct", "llama3"),
        ("mistralai-Mistral-Small-3.1-24B-Instruct-2503", "mistral"),
        ("HuggingFaceTB-SmolLM2-135M-Instruct", "generic"),
        ("google-gemma-3-it", "generic"),
        ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", "generic"),
    ],
)
def test_family_is_detected_from_the_template(name, family):
    assert families.detect(template(name)).name == family


def test_the_smollm2_gguf_carries_the_template_the_fixture_has():
    from localspec.gguf.file import read_header

    gguf = Path(__file__).parent.parent.parent / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not gguf.exists():
        pytest.skip("models/ not built (make models)")
    text = read_header(gguf).metadata["tokenizer.chat_template"]
    assert text == template("HuggingFaceTB-SmolLM2-135M-Instruct")


ARGS = {"city": 'Paris "centre" ✓', "days": 3, "units": None, "tags": ["a", {"b": "}"}]}
ARGS_TEXT = json.dumps(ARGS, ensure_ascii=False)

# (family, the model's answer, content, [(name, arguments as JSON)])
CASES = [
    ("hermes", f'<tool_call>\n{{"name": "get_weather", "arguments": {ARGS_TEXT}}}\n</tool_call>', "",
     [("get_weather", ARGS)]),
    ("hermes", 'Let me check.\n<tool_call>\n{"name": "a", "arguments": {"x": 1}}\n</tool_call>\n'
     '<tool_call>\n{"name": "b", "arguments": {}}\n</tool_call>', "Let me check.\n", [("a", {"x": 1}), ("b", {})]),
    ("hermes", "No tools: 2 < 3 and <tool> is not a tag.", "No tools: 2 < 3 and <tool> is not a tag.", []),
    ("hermes", '<tool_call>\n{"arguments": {"q": "x"}, "name": "search"}\n</tool_call>', "",
     [("search", {"q": "x"})]),
    ("llama3", f'{{"name": "get_weather", "parameters": {ARGS_TEXT}}}', "", [("get_weather", ARGS)]),
    ("llama3", '{"type": "function", "name": "a", "parameters": {"x": 1}}; {"name": "b", "parameters": {"y": 2}}',
     "", [("a", {"x": 1}), ("b", {"y": 2})]),
    ("llama3", '<|python_tag|>brave_search.call(query="weather in Paris", n=3)', "",
     [("brave_search", {"query": "weather in Paris", "n": 3})]),
    ("llama3", '<|python_tag|>{"name": "f", "parameters": {}}', "", [("f", {})]),
    ("llama3", "The answer is {not a call}.", "The answer is {not a call}.", []),
    ("llama3", '{"answer": 42}', '{"answer": 42}', []),
    ("mistral", f'[TOOL_CALLS] [{{"name": "get_weather", "arguments": {ARGS_TEXT}, "id": "abcDEF123"}}]', "",
     [("get_weather", ARGS)]),
    ("mistral", 'Sure.[TOOL_CALLS][{"name": "a", "arguments": {"x": 1}}, {"name": "b", "arguments": "{\\"y\\": 2}"}]',
     "Sure.", [("a", {"x": 1}), ("b", {"y": 2})]),
    ("mistral", '[TOOL_CALLS]get_weather[ARGS]{"city": "Rome"}[TOOL_CALLS]b[CALL_ID]x1[ARGS]{}', "",
     [("get_weather", {"city": "Rome"}), ("b", {})]),
    ("mistral", "Just [text] here.", "Just [text] here.", []),
    ("generic", f'{{"tool_call": {{"name": "get_weather", "arguments": {ARGS_TEXT}}}}}', "",
     [("get_weather", ARGS)]),
    ("generic", '{"tool_calls": [{"name": "a", "arguments": {"x": 1}, "id": "c1"}, {"name": "b", "arguments": {}}]}',
     "", [("a", {"x": 1}), ("b", {})]),
    ("generic", '{"response": "Hello \\"you\\" \\u00e9\\ud83d\\ude00\\n!"}', 'Hello "you" é😀\n!', []),
    ("generic", '{"response": {"answer": 1}}', '{"answer": 1}', []),
    ("generic", "Plain prose, no JSON.", "Plain prose, no JSON.", []),
    ("generic", '{"something": "else"}', '{"something": "else"}', []),
]  # fmt: skip


def _pieces(text: str, rng: random.Random) -> list[str]:
    out, i = [], 0
    while i < len(text):
        n = rng.choice([1, 1, 2, 3, 5, 8])
        out.append(text[i : i + n])
        i += n
    return out


def _streamed(family, text: str, seed: int, **kw) -> list[Delta]:
    p = answer_parser(family, tools=True, **kw)
    deltas = []
    for piece in _pieces(text, random.Random(seed)):
        deltas += p.feed(piece)
    return deltas + p.finish()


@pytest.mark.parametrize("i", range(len(CASES)))
def test_answers_parse_into_content_and_calls(i):
    name, text, content, calls = CASES[i]
    family = families.FAMILIES[name]
    msg, _ = parse_answer(answer_parser(family, tools=True), text)
    assert msg.content == content
    assert [(c.name, json.loads(c.arguments)) for c in msg.tool_calls] == calls
    assert len({c.id for c in msg.tool_calls}) == len(calls)
    for seed in range(5):  # streamed in random pieces: the same message, calls streamed OpenAI's way
        deltas = _streamed(family, text, seed)
        got = assemble(deltas)
        assert got.content == msg.content
        assert [(c.name, c.arguments) for c in got.tool_calls] == [
            (c.name, c.arguments) for c in msg.tool_calls
        ]
        heads = [d for d in deltas if d.call is not None and d.name is not None]
        assert [d.call for d in heads] == list(range(len(calls)))  # index, id and name once per call
        assert all(d.id for d in heads)


def test_arguments_stream_in_pieces_as_they_are_generated():
    text = f'<tool_call>\n{{"name": "get_weather", "arguments": {ARGS_TEXT}}}\n</tool_call>'
    p = answer_parser(families.HERMES, tools=True)
    seen = []
    for ch in text:
        seen.append(p.feed(ch))
    arg_steps = [i for i, ds in enumerate(seen) if any(d.arguments for d in ds)]
    assert len(arg_steps) > 10  # not held to the end
    assert arg_steps[-1] < len(text) - len("}\n</tool_call>")


def test_without_tools_a_call_is_content():
    text = '<tool_call>\n{"name": "a", "arguments": {}}\n</tool_call>'
    msg, _ = parse_answer(answer_parser(families.HERMES, tools=False), text)
    assert msg.content == text and not msg.tool_calls


QWEN3 = template("Qwen-Qwen3-0.6B")
R1 = template("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B")


@pytest.mark.parametrize("seed", range(5))
def test_reasoning_is_split_off_streamed_or_not(seed):
    text = '<think>\nThe user wants weather; call the tool.\n</think>\n\n<tool_call>\n{"name": "w", "arguments": {}}\n</tool_call>'
    family = families.detect(QWEN3)
    msg, _ = parse_answer(answer_parser(family, tools=True, template=QWEN3), text)
    assert msg.reasoning == "\nThe user wants weather; call the tool.\n"
    assert msg.content == "" and [c.name for c in msg.tool_calls] == ["w"]
    deltas = _streamed(family, text, seed, template=QWEN3)
    got = assemble(deltas)
    assert (got.reasoning, got.content) == (msg.reasoning, msg.content)
    assert [(c.name, c.arguments) for c in got.tool_calls] == [("w", "{}")]
    assert sum(1 for d in deltas if d.reasoning) > 1  # reasoning streams as its own deltas


def test_reasoning_format_none_keeps_it_inline():
    text = "<think>hmm</think>\n\nIt is 4."
    msg, _ = parse_answer(
        answer_parser(families.HERMES, tools=False, template=QWEN3, reasoning_format="none"), text
    )
    assert msg.content == text and msg.reasoning == ""
    msg, _ = parse_answer(answer_parser(families.HERMES, tools=False, template=QWEN3), text)
    assert (msg.reasoning, msg.content) == ("hmm", "It is 4.")


def test_a_prompt_that_opens_the_thinking_starts_inside_it():
    from localspec.chat import template as chat

    prompt = chat.render(R1, [{"role": "user", "content": "2+2?"}], bos_token="<bos>")
    assert prompt.endswith("<think>\n")
    p = answer_parser(families.detect(R1), tools=False, template=R1, prompt=prompt)
    msg, _ = parse_answer(p, "Two and two.\n</think>\n\nFour.")
    assert (msg.reasoning, msg.content) == ("Two and two.\n", "Four.")


def test_no_thinking_block_is_content():
    msg, _ = parse_answer(
        answer_parser(families.HERMES, tools=False, template=QWEN3), "Just 4, <think> later."
    )
    assert (msg.reasoning, msg.content) == ("", "Just 4, <think> later.")
