"""The bad-input corpus: broken model files, bad settings and bad prompts, and the command lines of
every entry point that takes them. Adding an entry point is one line in ENTRY_POINTS (a command line
for a model path); adding a bad file is one line in `make_bad_files`."""

from __future__ import annotations

import json
import os
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from localspec.config.settings import setting_fields

from .gguf_bytes import F32, Gguf, kv_u32, tensor_info


@dataclass(frozen=True)
class BadFile:
    path: Path
    needles: tuple[str, ...]  # the error line must contain one of these


def make_bad_files(d: Path, real: Path) -> dict[str, BadFile]:
    """Broken model files under `d`; `real` is a real GGUF to cut up."""
    d.mkdir(parents=True, exist_ok=True)
    head = real.read_bytes()[:200_000]
    files = {
        "missing": (None, ("no such file", "no such folder", "does not exist")),
        "empty": (b"", ("not a GGUF file", "truncated", "a file; give", "neither a GGUF file nor")),
        "random-bytes": (os.urandom(4096), ("not a GGUF file", "a file; give", "neither a GGUF file nor")),
        "wrong-magic": (
            b"GGML" + head[4:4096],
            ("not a GGUF file", "a file; give", "neither a GGUF file nor"),
        ),
        "truncated-header": (head[:5000], ("truncated", "a file; give", "neither a GGUF file nor")),
        "truncated-tensor-data": (
            Gguf(data=bytes(95)).bytes(),
            ("truncated", "a file; give", "neither a GGUF file nor"),
        ),
        "offset-past-eof": (
            Gguf(tensors=[tensor_info("a.weight", (8,), F32, 1 << 40)]).bytes(),
            ("truncated", "a file; give", "neither a GGUF file nor"),
        ),
        "zero-alignment": (
            _zero_alignment(),
            ("not a valid GGUF file", "a file; give", "neither a GGUF file nor"),
        ),
    }
    out = {}
    for name, (data, needles) in files.items():
        p = d / f"{name}.gguf"
        if data is not None:
            p.write_bytes(data)
        out[name] = BadFile(p, needles)
    (d / "a-directory.gguf").mkdir(exist_ok=True)
    out["directory"] = BadFile(d / "a-directory.gguf", ("is a directory", "no config.json", "config.json"))
    # local files that are not files (#48): opening a FIFO waits for a writer forever; a symlink loop
    # is not a missing file
    fifo = d / "a-fifo.gguf"
    if not fifo.exists():
        os.mkfifo(fifo)
    out["fifo"] = BadFile(fifo, ("a FIFO", "a file; give"))
    loop = d / "a-loop.gguf"
    if not loop.is_symlink():
        loop.symlink_to(loop.name)
    out["symlink-loop"] = BadFile(loop, ("symlink loop", "a file; give"))
    return out


def _zero_alignment() -> bytes:
    g = Gguf()
    g.kvs[1] = kv_u32("general.alignment", 0)
    return g.bytes()


# entry point -> command line for one model file (`m`), another good model (`good`) and an output folder.
# Each case gets "hello\n" on stdin, so `chat` reading a pipe is one more line here, e.g.
#   "chat": lambda m, good, out: ["chat", "--target", m],
#   "serve": lambda m, good, out: ["serve", "--target", m, "--port", "0"],  # must exit, not serve
EntryPoint = Callable[[str, str, str], list[str]]
ENTRY_POINTS: dict[str, EntryPoint] = {
    "run": lambda m, good, out: ["run", "hi", "--target", m, "--max-tokens", "4"],
    "run-draft": lambda m, good, out: ["run", "hi", "--target", good, "--draft", m, "--max-tokens", "4"],
    "run-mmproj": lambda m, good, out: ["run", "hi", "--target", good, "--mmproj", m, "--max-tokens", "4"],
    "bench": lambda m, good, out: [
        "bench",
        "--target",
        m,
        "--runs",
        "1",
        "--gen-tokens",
        "4",
        "--per-kind",
        "1",
        "-q",
    ],
    "doctor": lambda m, good, out: ["doctor", "--target", m],
    "check-pair": lambda m, good, out: ["check-pair", good, m],
    "check-pair-mmproj": lambda m, good, out: ["check-pair", good, good, "--mmproj", m],
    "quantize": lambda m, good, out: ["quantize", m, f"{out}/q.gguf", "--type", "q8_0"],
    "pair": lambda m, good, out: ["pair", good, m, "--out-dir", f"{out}/pair"],
    "pair-mmproj": lambda m, good, out: ["pair", good, good, "--out-dir", f"{out}/pair", "--mmproj", m],
    "convert": lambda m, good, out: ["convert", m, "--out", f"{out}/c.gguf"],
    "chat": lambda m, good, out: ["chat", "--target", m, "--max-tokens", "4"],  # piped: "hello" on stdin
    "serve": lambda m, good, out: ["serve", "--target", m, "--port", "0"],
}
# commands that take the Settings flags, and the bits of their command lines that are not settings
SETTINGS_COMMANDS: dict[str, Callable[[str], list[str]]] = {
    "run": lambda good: ["run", "hi", "--target", good],
    "bench": lambda good: ["bench", "--target", good, "--runs", "1", "-q"],
    "doctor": lambda good: ["doctor", "--target", good, "--no-load"],
    "chat": lambda good: ["chat", "--target", good],
    "serve": lambda good: ["serve", "--target", good, "--port", "0"],
}


def numeric_setting_cases(command: str) -> list[tuple[str, list[str], tuple[str, ...]]]:
    """(id, flags, needles): huge, negative and NaN values for every numeric setting `command` takes."""
    import click

    from localspec.cli import cli

    cmd = cli.get_command(click.Context(cli), command)
    offered = {o.name for o in cmd.params}
    cases = []
    for f in setting_fields():
        kind = str(f.type)
        if ("int" not in kind and "float" not in kind) or f.name not in offered:
            continue
        flag = "--" + f.name.replace("_", "-")
        for label, value in (
            ("huge", "1e30" if "float" in kind else str(10**30)),
            ("negative", "-5"),
            ("nan", "nan"),
        ):
            cases.append((f"{f.name}={label}", [flag, value], (f.name, flag)))
    return cases


# commands with numeric options of their own (not Settings fields): the rest of a valid command line
OPTION_COMMANDS: dict[str, Callable[[str, str], list[str]]] = {
    "bench": lambda good, out: ["bench", "--target", good, "-q"],
    "quantize": lambda good, out: ["quantize", good, f"{out}/q.gguf"],
    "pair": lambda good, out: ["pair", "--stand-in", "--out-dir", f"{out}/standin"],
}


def numeric_option_cases(command: str) -> list[tuple[str, list[str], tuple[str, ...]]]:
    """(id, flags, needles): huge, negative and NaN values for `command`'s own numeric options."""
    import click

    from localspec.cli import cli

    cmd = cli.get_command(click.Context(cli), command)
    settings = {f.name for f in setting_fields()}
    cases = []
    for p in cmd.params:
        if p.name in settings or not isinstance(
            p.type, (click.types.IntParamType, click.types.FloatParamType)
        ):
            continue
        flag = max(p.opts, key=len)
        is_float = isinstance(p.type, click.types.FloatParamType)
        for label, value in (
            ("huge", "1e30" if is_float else str(10**30)),
            ("negative", "-5"),
            ("nan", "nan"),
        ):
            cases.append((f"{p.name}={label}", [flag, value], (flag, p.name)))
    return cases


# -- bad requests to Ollama's API and the embeddings endpoints (#46) ----------------------------------
# (id, path, JSON text sent as it is, status, needles): each is one error in its dialect's shape -
# {"error": "..."} under /api/, OpenAI's {"error": {"message", ...}} under /v1/ - never a 5xx
HI = '"messages": [{"role": "user", "content": "hi"}]'
DIALECT_REQUESTS: list[tuple[str, str, str, int, tuple[str, ...]]] = [
    ("ollama-chat/not-json", "/api/chat", '{"model": "default", ', 400, ("JSON",)),
    ("ollama-chat/no-model", "/api/chat", "{" + HI + "}", 400, ("model",)),
    # no unknown-model case: a single-model server serves any name (docs/serving.md, "Model names")
    ("ollama-chat/messages-a-string", "/api/chat", '{"model": "default", "messages": "hi"}', 400, ("messages",)),
    ("ollama-chat/image", "/api/chat",
     '{"model": "default", "messages": [{"role": "user", "content": "hi", "images": ["AA=="]}]}', 400, ("images",)),
    ("ollama-chat/negative-temperature", "/api/chat",
     '{"model": "default", ' + HI + ', "options": {"temperature": -1}}', 400, ("temperature",)),
    ("ollama-chat/huge-num-predict", "/api/chat",
     '{"model": "default", ' + HI + ', "options": {"num_predict": 1e300}}', 400, ("num_predict",)),
    ("ollama-chat/num-ctx-over-the-server", "/api/chat",
     '{"model": "default", ' + HI + ', "options": {"num_ctx": 1000000}}', 400, ("num_ctx",)),
    ("ollama-chat/unknown-option", "/api/chat",
     '{"model": "default", ' + HI + ', "options": {"mirostat": 2}}', 400, ("options.mirostat",)),
    ("ollama-chat/format-xml", "/api/chat", '{"model": "default", ' + HI + ', "format": "xml"}', 400, ("format",)),
    ("ollama-chat/format-bad-schema", "/api/chat",
     '{"model": "default", ' + HI + ', "format": {"type": "objet"}}', 400, ("format", "schema")),
    ("ollama-chat/think-a-word", "/api/chat", '{"model": "default", ' + HI + ', "think": "lots"}', 400, ("think",)),
    ("ollama-chat/tool-without-name", "/api/chat",
     '{"model": "default", ' + HI + ', "tools": [{"type": "function", "function": {}}]}', 400, ("name",)),
    ("ollama-chat/tool-call-arguments-not-json", "/api/chat",
     '{"model": "default", "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "", '
     '"tool_calls": [{"function": {"name": "f", "arguments": "{oops"}}]}]}', 400, ("arguments",)),
    ("ollama-generate/prompt-an-object", "/api/generate", '{"model": "default", "prompt": {"a": 1}}', 400, ("prompt",)),
    ("ollama-generate/suffix", "/api/generate", '{"model": "default", "prompt": "def f(", "suffix": ")"}', 400, ("suffix",)),
    ("ollama-generate/context", "/api/generate", '{"model": "default", "prompt": "hi", "context": [1, 2]}', 400, ("context",)),
    ("ollama-generate/raw-with-system", "/api/generate",
     '{"model": "default", "prompt": "hi", "raw": true, "system": "be brief"}', 400, ("system",)),
    ("ollama-embed/empty-item", "/api/embed", '{"model": "default", "input": ["a", ""]}', 400, ("input.1",)),
    ("ollama-embed/numbers", "/api/embed", '{"model": "default", "input": [1, 2]}', 400, ("input",)),
    ("ollama-embed/dimensions", "/api/embed", '{"model": "default", "input": "a", "dimensions": 7}', 400, ("dimensions",)),
    ("ollama-embed/too-long-untruncated", "/api/embed",
     '{"model": "default", "input": "' + "word " * 2000 + '", "truncate": false}', 400, ("tokens",)),
    ("ollama-embed/too-many", "/api/embed", '{"model": "default", "input": [' + '"a",' * 2048 + '"a"]}', 400, ("2048",)),
    ("ollama-embeddings/prompt-a-list", "/api/embeddings", '{"model": "default", "prompt": ["a"]}', 400, ("prompt",)),
    ("ollama-show/no-model", "/api/show", "{}", 400, ("model",)),
    ("ollama/unknown-path", "/api/nothing-here", "{}", 404, ("not found", "Not Found")),
    ("embeddings/not-json", "/v1/embeddings", '{"input": ', 400, ("JSON",)),
    ("embeddings/no-input", "/v1/embeddings", "{}", 400, ("input",)),
    ("embeddings/empty-list", "/v1/embeddings", '{"input": []}', 400, ("input",)),
    ("embeddings/empty-string", "/v1/embeddings", '{"input": ""}', 400, ("input",)),
    ("embeddings/mixed-list", "/v1/embeddings", '{"input": ["a", 1]}', 400, ("input",)),
    ("embeddings/not-a-token", "/v1/embeddings", '{"input": [1, 1000000000]}', 400, ("vocabulary",)),
    ("embeddings/negative-token", "/v1/embeddings", '{"input": [[5, -1]]}', 400, ("vocabulary", "input")),
    ("embeddings/encoding-hex", "/v1/embeddings", '{"input": "a", "encoding_format": "hex"}', 400, ("encoding_format",)),
    ("embeddings/dimensions", "/v1/embeddings", '{"input": "a", "dimensions": 7}', 400, ("dimensions",)),
    ("embeddings/too-long", "/v1/embeddings", '{"input": "' + "word " * 2000 + '"}', 400, ("tokens",)),
    ("embeddings/too-many", "/v1/embeddings", '{"input": [' + '"a",' * 2048 + '"a"]}', 400, ("2048",)),
    ("embeddings/unknown-field", "/v1/embeddings", '{"input": "a", "pooling": "cls"}', 400, ("pooling",)),
]  # fmt: skip


# -- the routes that came after (issue 60): llama-server's /infill, fill-in-the-middle through
# /v1/completions' and /api/generate's `suffix`, raw prompts, Anthropic's count_tokens, streams (refused
# before their first frame, so a 400 and not an event) and the model routes. Each is one error in its
# dialect's shape; the stand-in pair has no FIM tokens, so a well-formed fill is that one 400
_BIG = "x" * 600_000  # two of these: past the characters any request may have tokenized
_DEEP = '{"type": "object", "properties": {"x": ' * 150 + '{"type": "string"}' + "}}" * 150
_FIM = "no fill-in-the-middle tokens"
DIALECT_REQUESTS += [
    ("infill/not-json", "/infill", '{"input_prefix": ', 400, ("JSON",)),
    ("infill/no-prefix", "/infill", '{"input_suffix": "b"}', 400, ("input_prefix",)),
    ("infill/prefix-a-number", "/infill", '{"input_prefix": 5, "input_suffix": "b"}', 400, ("input_prefix",)),
    ("infill/extra-a-string", "/infill", '{"input_prefix": "a", "input_suffix": "b", "input_extra": "c"}', 400,
     ("input_extra",)),
    ("infill/chunk-without-text", "/infill",
     '{"input_prefix": "a", "input_suffix": "b", "input_extra": [{"filename": "f"}]}', 400, ("text",)),
    ("infill/too-many-chunks", "/infill",
     '{"input_prefix": "a", "input_suffix": "b", "input_extra": [' + '{"text": "c"},' * 100_000 + '{"text": "c"}]}',
     400, ("100000", "32768 JSON objects")),  # the body's object cap answers first
    ("infill/unknown-sampler", "/infill", '{"input_prefix": "a", "input_suffix": "b", "samplers": ["mirostat"]}',
     400, ("samplers",)),
    ("infill/unknown-field", "/infill", '{"input_prefix": "a", "input_suffix": "b", "grammar_lazy": 1}', 400,
     ("grammar_lazy",)),
    ("infill/lone-surrogate", "/infill", '{"input_prefix": "a\\ud800", "input_suffix": "b"}', 400,
     ("lone surrogate",)),
    ("infill/no-fim-tokens", "/infill", '{"input_prefix": "a", "input_suffix": "b"}', 400, (_FIM,)),
    ("infill/stream-no-fim-tokens", "/infill", '{"input_prefix": "a", "input_suffix": "b", "stream": true}', 400,
     (_FIM,)),
    ("infill/huge-extra", "/infill",
     '{"input_prefix": "a", "input_suffix": "b", "input_extra": [{"text": "' + _BIG + '"}, {"text": "' + _BIG
     + '"}]}', 400, (_FIM,)),
    ("completions/suffix-a-number", "/v1/completions", '{"prompt": "a", "suffix": 5}', 400, ("suffix",)),
    ("completions/suffix-token-prompt", "/v1/completions", '{"prompt": [1, 2], "suffix": "b"}', 400, ("prompt",)),
    ("completions/suffix-no-fim-tokens", "/v1/completions", '{"prompt": "a", "suffix": "b", "stream": true}', 400,
     (_FIM,)),
    ("ollama-generate/suffix-a-list", "/api/generate", '{"model": "default", "prompt": "a", "suffix": ["b"]}', 400,
     ("suffix",)),
    ("ollama-generate/raw-with-images", "/api/generate",
     '{"model": "default", "prompt": "hi", "raw": true, "images": ["AA=="]}', 400, ("images",)),
    ("ollama-generate/raw-a-word", "/api/generate", '{"model": "default", "prompt": "hi", "raw": "maybe"}', 400,
     ("raw",)),
    ("ollama-generate/raw-too-long", "/api/generate",
     '{"model": "default", "prompt": "' + _BIG * 2 + 'x", "raw": true}', 400, ("at most",)),
    ("count-tokens/not-json", "/v1/messages/count_tokens", '{"messages": ', 400, ("JSON",)),
    ("count-tokens/no-messages", "/v1/messages/count_tokens", '{"model": "m"}', 400, ("messages",)),
    ("count-tokens/ends-with-assistant", "/v1/messages/count_tokens",
     '{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}', 400, ("assistant",)),
    ("count-tokens/deep-tool-schema", "/v1/messages/count_tokens",
     '{"messages": [{"role": "user", "content": "a"}], "tools": [{"name": "f", "input_schema": ' + _DEEP + "}]}",
     400, ("levels deep",)),
    ("count-tokens/too-much-text", "/v1/messages/count_tokens",
     '{"messages": [{"role": "user", "content": "' + _BIG * 2 + '"}]}', 400, ("characters",)),
    ("messages/stream-bad-max-tokens", "/v1/messages",
     '{"max_tokens": -1, "stream": true, "messages": [{"role": "user", "content": "a"}]}', 400, ("max_tokens",)),
    ("responses/stream-bad-input", "/v1/responses", '{"input": 5, "stream": true}', 400, ("input",)),
    ("ollama-chat/stream-bad-option", "/api/chat",
     '{"model": "default", ' + HI + ', "stream": true, "options": {"top_k": -1}}', 400, ("top_k",)),
    ("ollama-embed/truncate-a-word", "/api/embed", '{"model": "default", "input": "a", "truncate": "maybe"}', 400,
     ("truncate",)),
    ("ollama-embed/too-much-text", "/api/embed", '{"model": "default", "input": "' + _BIG * 2 + '", "truncate": false}', 400,
     ("at most",)),
    ("embeddings/too-much-text", "/v1/embeddings", '{"input": "' + _BIG * 2 + '"}', 400, ("at most",)),
    ("models/load-no-name", "/models/load", "{}", 400, ("model",)),
    ("models/unload-a-number", "/models/unload", '{"model": 5}', 400, ("model",)),
]  # fmt: skip


# -- OpenAI's Responses API (#46): each body is one 400 in OpenAI's error shape, naming what to fix;
# they join DIALECT_REQUESTS (tests/system/test_ollama.py sends them all to a real serve) ----------------
_FN = {"type": "function", "name": "get", "parameters": {"type": "object"}}
_USER = {"role": "user", "content": "hi"}
RESPONSES_BAD_REQUESTS: list[tuple[str, object, tuple[str, ...]]] = [  # (id, body, needles)
    ("no-input", {"model": "m"}, ("input",)),
    ("input-number", {"input": 5}, ("a string or a list of input items",)),
    ("input-empty", {"input": []}, ("'input' is empty",)),
    ("item-not-object", {"input": [5]}, ("item 0",)),
    ("item-kind", {"input": [{"type": "image_generation_call", "id": "x"}]}, ("not supported",)),
    ("role", {"input": [{"role": "robot", "content": "hi"}]}, ("role",)),
    ("image-url", {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
     ("data URL",)),
    ("image-file-id", {"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "file_1"}]}]},
     ("file ids",)),
    ("part-kind", {"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "file_1"}]}]},
     ("input_text or input_image",)),
    ("content-number", {"input": [{"role": "user", "content": 5}]}, ("content",)),
    ("call-without-id", {"input": [_USER, {"type": "function_call", "name": "get", "arguments": "{}"}]},
     ("call_id",)),
    ("output-without-id", {"input": [_USER, {"type": "function_call_output", "output": "x"}]}, ("call_id",)),
    ("item-reference", {"input": [{"type": "item_reference", "id": "msg_1"}]}, ("item references",)),
    ("previous-response", {"input": "hi", "previous_response_id": "resp_1"}, ("previous_response_id", "whole conversation")),
    ("background", {"input": "hi", "background": True}, ("background",)),
    ("truncation", {"input": "hi", "truncation": "auto"}, ("truncation",)),
    ("format-kind", {"input": "hi", "text": {"format": {"type": "yaml"}}}, ("text.format.type",)),
    ("format-no-schema", {"input": "hi", "text": {"format": {"type": "json_schema", "name": "x"}}}, ("schema",)),
    ("format-bad-schema", {"input": "hi", "text": {"format": {"type": "json_schema", "name": "x",
                                                              "schema": {"type": "nonsense"}}}}, ("schema",)),
    ("choice-built-in", {"input": "hi", "tools": [_FN], "tool_choice": {"type": "web_search"}}, ("built-in",)),
    ("choice-not-a-tool", {"input": "hi", "tools": [_FN], "tool_choice": {"type": "function", "name": "nope"}},
     ("not among the tools",)),
    ("choice-word", {"input": "hi", "tool_choice": "sometimes"}, ("tool_choice",)),
    ("required-nothing", {"input": "hi", "tool_choice": "required"}, ("needs tools",)),
    ("tool-without-name", {"input": "hi", "tools": [{"type": "function", "parameters": {}}]}, ("name",)),
    ("tool-not-object", {"input": "hi", "tools": [5]}, ("tools.0",)),
    ("max-negative", {"input": "hi", "max_output_tokens": -1}, ("max_tokens",)),
    ("max-huge", {"input": "hi", "max_output_tokens": 10**30}, ("max_tokens",)),
    ("max-word", {"input": "hi", "max_output_tokens": "many"}, ("max_output_tokens",)),
    ("temperature", {"input": "hi", "temperature": -1}, ("temperature",)),
    ("unknown-field", {"input": "hi", "frobnicate": 1}, ("frobnicate",)),
    ("reasoning-word", {"input": "hi", "reasoning": "high"}, ("reasoning",)),
    ("body-array", [], ("valid dictionary",)),
    ("body-broken", '{"input": ', ("not valid JSON",)),
]  # fmt: skip
DIALECT_REQUESTS += [
    (f"responses/{name}", "/v1/responses", body if isinstance(body, str) else json.dumps(body), 400, needles)
    for name, body, needles in RESPONSES_BAD_REQUESTS
]


# bad bodies for Anthropic's POST /v1/messages: (id, JSON body, words the error message must hold).
# Each gets a 400 in Anthropic's shape (tests/unit/test_anthropic_messages.py on the fake engine,
# tests/system/test_anthropic_sdk.py on a real server).
_HI = [{"role": "user", "content": "Hi"}]
ANTHROPIC_BAD_BODIES: list[tuple[str, dict, str]] = [
    ("no-max-tokens", {"messages": _HI}, "max_tokens"),
    ("zero-max-tokens", {"max_tokens": 0, "messages": _HI}, "max_tokens"),
    ("no-messages", {"max_tokens": 5, "messages": []}, "messages"),
    ("unknown-field", {"max_tokens": 5, "messages": _HI, "frequency": 1}, "'frequency'"),
    ("image-url", {"max_tokens": 5, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}]}]}, "'url' are not read"),
    ("image-bad-base64", {"max_tokens": 5, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "no!"}}]}]}, "base64"),
    ("tool-role", {"max_tokens": 5, "messages": [{"role": "tool", "content": "x"}]}, "role"),
    ("prefill", {"max_tokens": 5, "messages": [*_HI, {"role": "assistant", "content": "Sure"}]}, "prefill"),
    ("tool-choice-no-name", {"max_tokens": 5, "messages": _HI, "tool_choice": {"type": "tool"}}, "name"),
    ("server-tool", {"max_tokens": 5, "messages": _HI,
                     "tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "cannot run"),
    ("negative-temperature", {"max_tokens": 5, "messages": _HI, "temperature": -1}, "temperature"),
    ("thinking-type", {"max_tokens": 5, "messages": _HI, "thinking": {"type": "sometimes"}}, "thinking"),
    ("content-number", {"max_tokens": 5, "messages": [{"role": "user", "content": 5}]}, "content"),
    ("tool-result-image", {"max_tokens": 5, "messages": [{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "image"}]}]}]}, "'image'"),
    ("stop-sequences-string", {"max_tokens": 5, "messages": _HI, "stop_sequences": "END"}, "stop_sequences"),
]  # fmt: skip


# -- requests a client sends a server (#48): each is one 400 in the API's shape ------------------------
@dataclass(frozen=True)
class BadRequest:
    id: str
    path: str
    body: str  # JSON text, sent as it is: `\ud800` in it is an escaped lone surrogate (valid JSON)
    needles: tuple[str, ...]  # the error's message must hold one of these


LONE = "lone surrogate"
BAD_REQUESTS = [
    BadRequest("completion/prompt", "/v1/completions", '{"prompt": "ab\\ud800cd", "max_tokens": 2}', (LONE,)),
    BadRequest("chat/role", "/v1/chat/completions",
               '{"messages": [{"role": "us\\udc00er", "content": "hi"}], "max_tokens": 2}', (LONE,)),
    BadRequest("chat/content", "/v1/chat/completions",
               '{"messages": [{"role": "user", "content": [{"type": "text", "text": "\\udfff"}]}]}', (LONE,)),
    BadRequest("chat/tool-name", "/v1/chat/completions",
               '{"messages": [{"role": "user", "content": "hi"}], '
               '"tools": [{"type": "function", "function": {"name": "f\\ud800"}}]}', (LONE,)),
    BadRequest("completion/grammar", "/v1/completions",
               '{"prompt": "hi", "max_tokens": 2, "grammar": "root ::= \\"\\ud800\\""}', (LONE,)),
    BadRequest("completion/stop", "/v1/completions", '{"prompt": "hi", "stop": ["\\udfff"]}', (LONE,)),
    BadRequest("completion/schema-key", "/v1/completions",
               '{"prompt": "hi", "response_format": {"type": "json_schema", "json_schema": {"schema": '
               '{"type": "object", "properties": {"\\ud800": {"type": "string"}}}}}}', (LONE,)),
    BadRequest("completion/bias-key", "/v1/completions", '{"prompt": "hi", "logit_bias": {"\\ud800": 1}}', (LONE,)),
    BadRequest("completion/field-name", "/v1/completions", '{"prompt": "hi", "mod\\ud800el": 1}', (LONE,)),
    BadRequest("tokenize/content", "/tokenize", '{"content": "ab\\ud800cd"}', (LONE,)),
    BadRequest("tokenize/too-long", "/tokenize", '{"content": "' + "a" * ((1 << 20) + 1) + '"}', ("at most",)),
    BadRequest("tokenize/too-many-pieces", "/tokenize",
               '{"content": "' + "a " * 70_000 + '", "with_pieces": true}', ("at most",)),
    BadRequest("detokenize/too-many", "/detokenize", '{"tokens": [' + "1," * (1 << 20) + "1]}", ("at most",)),
    BadRequest("detokenize/not-a-token", "/detokenize", '{"tokens": [1, 1000000000]}', ("not in the vocabulary",)),
    # issue 60 (OpenAI's shape here; Ollama's and Anthropic's are in tests/unit/test_deep_schemas.py and
    # test_big_bodies.py): a schema nested past the limit, a keep_alive that is no duration, too many items
    BadRequest("chat/deep-schema", "/v1/chat/completions",
               '{"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_schema", '
               '"json_schema": {"name": "x", "schema": ' + '{"type": "object", "properties": {"x": ' * 150
               + '{"type": "string"}' + "}}" * 150 + "}}}", ("levels deep",)),
    BadRequest("responses/deep-schema", "/v1/responses",
               '{"input": "hi", "text": {"format": {"type": "json_schema", "name": "x", "schema": '
               + '{"type": "array", "items": ' * 150 + "{}" + "}" * 150 + "}}}", ("levels deep",)),
    BadRequest("completion/keep-alive-nan", "/v1/completions", '{"prompt": "hi", "keep_alive": NaN}',
               ("is seconds or a duration",)),
    BadRequest("chat/too-many-messages", "/v1/chat/completions",
               '{"messages": [' + '{"role": "user", "content": "x"},' * 100_000
               + '{"role": "user", "content": "x"}]}', ("at most 100000 items", "32768 JSON objects")),
]  # fmt: skip


# -- images: what a request or `--image` may carry ------------------------------------------------
def _png_header(width: int, height: int, body: bytes = b"", colour: int = 2) -> bytes:
    """A PNG's signature and IHDR (8-bit, RGB or `colour`) declaring any size, then `body` chunks and
    IEND."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, colour, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + body + chunk(b"IEND", b"")


def _bomb() -> bytes:
    """A real decompression bomb: 8192x8192 grey pixels (67 MB decoded, 200 MB as RGB) in 65 kB."""
    side = 8192
    z = zlib.compressobj(9)
    data = z.compress(b"\x00" * ((1 + side) * side)) + z.flush()  # each row: filter byte + pixels
    idat = struct.pack(">I", len(data)) + b"IDAT" + data + struct.pack(">I", zlib.crc32(b"IDAT" + data))
    return _png_header(side, side, idat, colour=0)


def make_bad_images(d: Path, good: bytes) -> dict[str, BadFile]:
    """Bad images under `d` (each fails with the default limits); `good` is a valid PNG to cut up."""
    d.mkdir(parents=True, exist_ok=True)
    cases = {
        "empty": (b"", ("is empty",)),
        "not-an-image": (b"Hello, I am a text file, not a picture.\n" * 20, ("not an image localspec reads",)),
        "gguf-as-image": (Gguf().bytes(), ("not an image localspec reads",)),
        "tiff": (b"II*\x00" + bytes(200), ("not an image localspec reads",)),  # a format left closed
        "truncated": (good[: len(good) // 2], ("damaged or truncated", "cannot be read")),
        "header-only": (_png_header(64, 64), ("damaged or truncated", "cannot be read")),
        "decompression-bomb": (_bomb(), ("decompression bomb", "over the limit")),
        "absurd-dimensions": (_png_header(2**31 - 1, 2**31 - 1), ("decompression bomb", "over the limit", "cannot be read")),
        "too-many-pixels": (_png_header(5000, 5000), ("over the limit",)),
        "strip": (_png_header(1, 1 << 24), ("a side of more than",)),  # within the pixels: refused by its side
        "zero-width": (_png_header(0, 64), ("not an image localspec reads", "cannot be read")),
    }  # fmt: skip
    out = {}
    for name, (data, needles) in cases.items():
        p = d / f"{name}.png"
        p.write_bytes(data)
        out[name] = BadFile(p, needles)
    return out
