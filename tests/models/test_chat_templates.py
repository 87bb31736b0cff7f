"""Real chat templates (tests/data/templates: Qwen2.5, Qwen3, Llama 3.1/3.2, Gemma 3, SmolLM2,
Command R7B; the texts of their tokenizer_config.json `chat_template`) render as Hugging Face's
apply_chat_template does, and a template that writes the BOS itself never gets a second one."""

from __future__ import annotations

import json
import os
import resource
import time
from datetime import datetime
from pathlib import Path

import pytest

from localspec.chat import bounded, isolated
from localspec.chat import template as chat
from localspec.errors import LocalspecError

TEMPLATES = Path(__file__).parent.parent / "data" / "templates"
CONVERSATION = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi <b> & é"},
    {"role": "assistant", "content": "Hello!"},
    {"role": "user", "content": "2+2?"},
]
CHATML = (
    "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi <b> & é<|im_end|>\n"
    "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n"
)
LLAMA3_TURNS = (
    "Be brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi <b> & é<|eot_id|>"
    "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|><|start_header_id|>user<|end_header_id|>"
    "\n\n2+2?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
)
HEADER = (
    "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
)
EXPECTED = {
    "Qwen-Qwen2.5-7B-Instruct": CHATML,
    "Qwen-Qwen3-0.6B": CHATML,
    "HuggingFaceTB-SmolLM2-135M-Instruct": CHATML,
    "meta-llama-Llama-3.1-8B-Instruct": HEADER + "Today Date: 26 Jul 2024\n\n" + LLAMA3_TURNS,
    # 3.2 asks strftime_now for today's date
    "meta-llama-Llama-3.2-3B-Instruct": HEADER + "Today Date: {today}\n\n" + LLAMA3_TURNS,
    "google-gemma-3-it": (
        "<bos><start_of_turn>user\nBe brief.\n\nHi <b> & é<end_of_turn>\n<start_of_turn>model\nHello!"
        "<end_of_turn>\n<start_of_turn>user\n2+2?<end_of_turn>\n<start_of_turn>model\n"
    ),
}
BOS = {
    "meta-llama-Llama-3.1-8B-Instruct": "<|begin_of_text|>",
    "meta-llama-Llama-3.2-3B-Instruct": "<|begin_of_text|>",
}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather <now> & later",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]


def template(name: str) -> str:
    return (TEMPLATES / f"{name}.jinja").read_text()


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_template_renders_like_hugging_face(name):
    bos = BOS.get(name, "<bos>")
    out = chat.render(template(name), CONVERSATION, bos_token=bos, eos_token="</s>")
    # compare the date Llama 3.2 writes with the date now, on either side of midnight
    assert out in {EXPECTED[name].format(today=datetime.now().strftime("%d %b %Y")), EXPECTED[name]}, out


@pytest.mark.parametrize("name", ["Qwen-Qwen2.5-7B-Instruct", "Qwen-Qwen3-0.6B"])
def test_tools_use_hugging_faces_tojson(name):
    # jinja2's own tojson would write \u003cnow\u003e and sort the keys
    out = chat.render(template(name), CONVERSATION[1:2], tools=TOOLS)
    assert json.dumps(TOOLS[0], ensure_ascii=False) in out


def test_tojson_indent_as_llama_31_asks():
    out = chat.render(
        template("meta-llama-Llama-3.1-8B-Instruct"),
        CONVERSATION[1:2],
        bos_token="<|begin_of_text|>",
        tools=TOOLS,
    )
    assert json.dumps(TOOLS[0], indent=4, ensure_ascii=False) in out


def test_loopcontrols_template_parses():
    # Command R7B uses {% break %}, which needs jinja2's loopcontrols extension (as HF enables)
    out = chat.render(template("CohereForAI-c4ai-command-r7b-12-2024-tool_use"), CONVERSATION[1:2])
    assert out.endswith(
        "<|USER_TOKEN|>Hi <b> & é<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|><|START_THINKING|><|END_THINKING|>"
    )


def test_generation_block_renders_its_body():
    tmpl = "{% for m in messages %}{% generation %}[{{ m.content }}]{% endgeneration %}{% endfor %}"
    assert chat.render(tmpl, CONVERSATION[1:3]) == "[Hi <b> & é][Hello!]"


def test_raise_exception_is_one_clear_error():
    bad_order = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    with pytest.raises(LocalspecError, match="Conversation roles must alternate"):
        chat.render(template("google-gemma-3-it"), bad_order, bos_token="<bos>")


@pytest.mark.parametrize(
    "messages, needle",
    [
        ([], "non-empty list"),
        ([{"content": "x"}], "'role'"),
        ([{"role": "user", "content": "a\udcffb"}], "not valid UTF-8"),
        ([{"role": "user", "content": 5}], "content must be text"),
    ],
)
def test_bad_messages(messages, needle):
    with pytest.raises(LocalspecError, match=needle):
        chat.render(template("Qwen-Qwen2.5-7B-Instruct"), messages)


def test_template_that_does_not_parse():
    with pytest.raises(LocalspecError, match="does not parse"):
        chat.render("{% for m in messages %}", CONVERSATION)


def test_template_runtime_error_is_one_line():
    with pytest.raises(LocalspecError, match="chat template failed"):
        chat.render("{{ messages[0].content / 0 }}", CONVERSATION)


@pytest.fixture(scope="module")
def gemma_vocab(gemma_path):
    from localspec.llama import Model

    with Model(gemma_path, vocab_only=True) as m:
        yield m


@pytest.mark.parametrize("name", ["google-gemma-3-it", "meta-llama-Llama-3.1-8B-Instruct"])
def test_template_bos_is_not_doubled(gemma_vocab, name):
    # Gemma's tokenizer adds BOS and these templates write bos_token too: exactly one must remain
    assert gemma_vocab.vocab.add_bos
    ids = chat.prompt_tokens(gemma_vocab, CONVERSATION, template=template(name))
    assert ids[0] == gemma_vocab.vocab.bos and ids.count(gemma_vocab.vocab.bos) == 1


def test_template_without_bos_gets_the_tokenizers(gemma_vocab):
    ids = chat.prompt_tokens(gemma_vocab, CONVERSATION, template=template("Qwen-Qwen2.5-7B-Instruct"))
    assert ids[0] == gemma_vocab.vocab.bos and ids.count(gemma_vocab.vocab.bos) == 1


# -- a template is a program from the model file: bounded in time and size (#28) --------------------
@pytest.mark.parametrize(
    "template,why",
    [
        # loops with no call in their body: only a bound on time stops them
        ("{% set r = range(100000) %}{% for a in r %}{% for b in r %}{% endfor %}{% endfor %}", "2 s"),
        (
            "{% macro f() %}{% for i in range(100000) %}{{ f() if i > 99998 }}{% endfor %}{% endmacro %}{{ f() }}",
            "2 s",
        ),
        ("{{ 'x' * 10**9 }}", "characters"),
        ("{{ 2 ** 1000000000 }}", "power"),
        (
            "{% set ns = namespace(s='x') %}{% for i in range(60) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
            "characters",
        ),
        (
            "{% set ns = namespace(s='x') %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
            "characters",
        ),
        (
            "{% for i in range(100000) %}{% for j in range(100000) %}{{ 'abc' * 1000 }}{% endfor %}{% endfor %}",
            "output",
        ),
    ],
)
def test_a_template_that_loops_or_grows_is_stopped(template, why):
    t0 = time.monotonic()
    with pytest.raises(LocalspecError, match=why):
        chat.render(template, CONVERSATION)
    assert time.monotonic() - t0 < bounded.RENDER_S + 3


@pytest.mark.parametrize(
    "template,why",
    [
        # one filter call builds a gigabyte in C, where no check inside the render can reach (#48)
        ("{{ ('x'|center(1000000000))|length }}", "MiB"),
        ("{{ '%1000000000d' % 1 }}", "MiB"),
        # two strings below the limit each, above it together (the review's rebuilt SmolLM2)
        (
            "{% set a = 'x'|center(300000000) %}{% set b = 'y'|center(300000000) %}{{ a|length + b|length }}",
            "MiB",
        ),
        # a filter written in Python outside the template's frames: the clock in the render misses it
        ("{{ ('x y ' * 2000000)|wordwrap(3)|length }}", "2 s"),
    ],
)
def test_no_filter_gets_around_the_hard_limits(template, why):
    chat.render("{{ 1 }}", CONVERSATION)  # a child running (the last test's was killed): the render is timed
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10
    t0 = time.monotonic()
    with pytest.raises(LocalspecError, match=why):
        chat.render(template, CONVERSATION)
    assert time.monotonic() - t0 < bounded.RENDER_S + isolated.KILL_GRACE_S + 1
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10) - rss
    assert grown < 64 << 20, f"this process grew {grown >> 20} MiB"  # the child paid, not us
    assert chat.render("{{ messages[0].content }}", CONVERSATION) == CONVERSATION[0]["content"]


def test_the_bounds_leave_real_templates_alone():
    """A long conversation through a real template renders as it does unbounded."""
    long = [{"role": ("user", "assistant")[i % 2], "content": f"turn {i} " * 20} for i in range(500)]
    source = (TEMPLATES / "Qwen-Qwen2.5-7B-Instruct.jinja").read_text()
    bounded_text = chat.render(source, long)
    assert bounded_text == chat._compile(source).render(
        messages=long, add_generation_prompt=True, bos_token="", eos_token=""
    )
    assert bounded_text.count("<|im_start|>") == 502  # the default system turn, the 500, the prompt


def test_a_slow_start_of_the_renderer_is_not_a_slow_render(tmp_path, monkeypatch):
    """A loaded machine's renderer child can take seconds to start (Python and its imports): that
    is no template running too long. Before the fix the first render after a server's start (the
    tool-template probes) failed, and the server described tools in its own words for good."""
    slow = bounded.RENDER_S + isolated.KILL_GRACE_S + 1  # past what a render may take
    (tmp_path / "sitecustomize.py").write_text(f"import time\ntime.sleep({slow})\n")  # run at its start
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    isolated._stop()
    monkeypatch.setattr(isolated, "_child", None)
    t0 = time.monotonic()
    try:
        assert chat.render("{{ messages[0].content }}", CONVERSATION) == CONVERSATION[0]["content"]
        assert time.monotonic() - t0 > slow  # it did start slowly
    finally:
        isolated._stop()
