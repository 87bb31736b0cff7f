"""Images through `localspec serve` (a real process; SmolLM2 drafting for itself, with the synthetic
projector): OpenAI chat `image_url` parts as data URLs (and each other dialect's image shape), the bad-image corpus as clear 400s, and the
server serving on after each."""

from __future__ import annotations

import base64

import httpx
import openai
import pytest

from ..bad_inputs import make_bad_images
from ..helpers import Server, png

ASK = "What is in this picture?"


@pytest.fixture(scope="module")
def server(smollm2_path, mmproj_path):
    srv = Server(smollm2_path, "--mmproj", str(mmproj_path), "--max-tokens", "12", "--temperature", "0")
    srv.model = smollm2_path.stem  # the name it lists
    yield srv
    srv.stop()


def data_url(data: bytes, kind: str = "image/png") -> str:
    return f"data:{kind};base64,{base64.b64encode(data).decode()}"


def ask(server, data: bytes, text: str = ASK):
    content = [{"type": "image_url", "image_url": {"url": data_url(data)}}, {"type": "text", "text": text}]
    return server.client().chat.completions.create(
        model=server.model, messages=[{"role": "user", "content": content}], max_tokens=12, temperature=0
    )


def test_the_reply_depends_on_the_image(server):
    a, a_again, b = (ask(server, png(s)) for s in (1, 1, 2))
    assert a.choices[0].message.content != b.choices[0].message.content
    assert a_again.choices[0].message.content == a.choices[0].message.content
    n_rows = 16  # (64 / 16)^2 patches: the image's rows are prompt tokens
    assert a.usage.prompt_tokens >= n_rows + 5
    # the second ask of image 1 found it in the cache (keyed on its content): nothing was evaluated again
    # but the last token; image 2 is evaluated anew
    assert a_again.model_extra["timings"]["cache_n"] == a.usage.prompt_tokens - 1
    assert b.model_extra["timings"]["cache_n"] < a.usage.prompt_tokens - n_rows


def test_bad_images_are_clear_400s_and_the_server_serves_on(server, tmp_path):
    for name, bad in make_bad_images(tmp_path, png(1)).items():
        with pytest.raises(openai.BadRequestError) as e:
            ask(server, bad.path.read_bytes())
        err = e.value.body
        assert any(n in err["message"] for n in bad.needles), (name, err)
        assert err["param"] == "messages.0.content" and err["code"] == "invalid_image", (name, err)
    assert ask(server, png(1)).choices[0].message.content
    assert server.proc.poll() is None


def test_limits_and_urls(server):
    url = server.url + "/v1/chat/completions"

    def post(content: list) -> dict:
        r = httpx.post(url, json={"messages": [{"role": "user", "content": content}]}, timeout=120)
        assert r.status_code == 400, r.text
        return r.json()["error"]

    part = {"type": "image_url", "image_url": {"url": data_url(png(1))}}
    e = post([part] * 9)  # the default --max-images is 8
    assert "9 images in one request; at most 8" in e["message"]
    e = post([{"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}])
    assert "not fetched" in e["message"] and e["param"] == "messages.0.content.0"


def test_ollama_images_reach_the_same_tokens_as_openai_chat(server):
    want = ask(server, png(1))
    body = {
        "model": server.model, "stream": False, "options": {"temperature": 0, "num_predict": 12},
        "messages": [{"role": "user", "content": ASK, "images": [base64.b64encode(png(1)).decode()]}],
    }  # fmt: skip
    got = httpx.post(server.url + "/api/chat", json=body, timeout=120).json()
    assert got["prompt_eval_count"] == want.usage.prompt_tokens
    assert got["message"]["content"] == want.choices[0].message.content


def test_anthropic_images_reach_the_same_tokens_as_openai_chat(server):
    want = ask(server, png(1))
    source = {"type": "base64", "media_type": "image/png", "data": base64.b64encode(png(1)).decode()}
    body = {
        "model": server.model, "max_tokens": 12, "temperature": 0,
        "messages": [{"role": "user", "content": [{"type": "image", "source": source}, {"type": "text", "text": ASK}]}],
    }  # fmt: skip
    got = httpx.post(server.url + "/v1/messages", json=body, timeout=120).json()
    assert (
        got["usage"]["input_tokens"] + got["usage"].get("cache_read_input_tokens", 0)
        == want.usage.prompt_tokens
    )
    assert (
        "".join(b["text"] for b in got["content"] if b["type"] == "text") == want.choices[0].message.content
    )


def test_responses_images_reach_the_same_tokens_as_openai_chat(server):
    want = ask(server, png(1))
    content = [{"type": "input_image", "image_url": data_url(png(1))}, {"type": "input_text", "text": ASK}]
    got = server.client().responses.create(
        model=server.model, input=[{"role": "user", "content": content}], max_output_tokens=12, temperature=0
    )
    assert got.usage.input_tokens == want.usage.prompt_tokens
    assert got.output_text == want.choices[0].message.content
