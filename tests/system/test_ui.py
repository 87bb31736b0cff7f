"""The chat page (`GET /`) in a real browser: Debian's headless Chromium driven by Playwright, against
a real `localspec serve` on the embedded default pair (a fixed K, so every reply drafts).

LOCALSPEC_SCREENSHOTS=1 also writes docs/ui-light.png and docs/ui-dark.png.
"""

from __future__ import annotations

import base64
import json
import os
import re
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.helpers import Server, png

CHROMIUM = Path("/usr/bin/chromium")
ROOT = Path(__file__).resolve().parents[2]
KEY = "page-test-key"
CANCELLED = "localspec:requests_cancelled_total"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="the page tests need Debian's chromium: apt-get install -y chromium"
)


# one thread each: on cores shared with other work llama.cpp's spinning threads slow down manyfold
THREADS = ("--n-threads", "1")


@pytest.fixture(scope="module")
def server(standin_pair):
    args = ("--draft-max", "4", "--parallel", "2", "--max-tokens", "12", "--temperature", "0")
    srv = Server(standin_pair, *THREADS, *args)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def keyed(smollm2_path):
    """A key from the environment, one slot and no queue (the 503 test fills it)."""
    srv = Server(
        smollm2_path, *THREADS, "--parallel", "1", "--max-queue", "0", env={"LOCALSPEC_API_KEY": KEY}
    )
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def seeing(smollm2_path, mmproj_path):
    """SmolLM2 with the synthetic vision projector: replies depend on the image."""
    args = ("--mmproj", str(mmproj_path), "--max-tokens", "12", "--temperature", "0")
    srv = Server(smollm2_path, *THREADS, *args)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright  # noqa: PLC0415 - only once chromium is known to exist

    with sync_playwright() as p:
        # launch() gives every run a fresh temporary profile (user-data-dir)
        b = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=ARGS)
        yield b
        b.close()


class Page:
    """One browser context (its own localStorage) on one server, with what the console said."""

    def __init__(self, browser, url: str, **context) -> None:
        self.context = browser.new_context(viewport={"width": 1280, "height": 860}, **context)
        self.page = self.context.new_page()
        self.console: list[str] = []
        self.errors: list[str] = []  # uncaught exceptions in the page: never acceptable
        self.page.on("console", lambda m: m.type in ("error", "warning") and self.console.append(m.text))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.set_default_timeout(120_000)  # two busy cores make even a short reply slow
        self.url = url

    def open(self, ready: bool = True) -> "Page":
        self.page.goto(self.url + "/")
        if ready:
            self.page.wait_for_selector("#server-status[data-state=up]")
        return self

    def send(self, text: str) -> None:
        self.page.fill("#input", text)
        self.page.keyboard.press("Enter")

    def wait_idle(self) -> None:
        try:
            self.page.wait_for_selector("#send:not([hidden])")
        except Exception:
            print("the conversation when the wait ran out:\n" + self.page.inner_text("#messages"))
            raise

    def settings(self, **fields: str) -> None:
        self.page.click("#open-settings")
        for name, value in fields.items():
            el = self.page.locator(f"#settings-form [name={name}]")
            if el.evaluate("e => e.tagName") == "SELECT":
                el.select_option(value)
            else:
                el.fill(value)
        self.page.click("#settings-form button[value=save]")

    def stored(self) -> dict:
        """The current conversation as the page stored it."""
        return self.page.evaluate(
            "() => JSON.parse(localStorage.getItem('localspec.conversation.' +"
            " JSON.parse(localStorage.getItem('localspec.current'))))"
        )

    def close(self) -> None:
        self.context.close()
        assert not self.errors, f"uncaught errors in the page: {self.errors}"


@pytest.fixture
def page(browser, server):
    p = Page(browser, server.url)
    yield p
    p.close()


def chat(srv: Server, messages: list[dict], **extra) -> str:
    r = httpx.post(srv.url + "/v1/chat/completions", json={"messages": messages, **extra}, timeout=120)
    return r.json()["choices"][0]["message"]["content"]


# the reply streaming now has some text
STREAMING_TEXT = (
    "() => { const m = document.querySelector('.message.assistant.live .markdown');"
    " return m && !m.querySelector('.typing') && m.textContent.trim().length > 0; }"
)


# -- serving --------------------------------------------------------------------------------------
def test_page_files_and_headers(keyed):
    """The page needs no key (it asks for one); /v1 still does. Only files inside ui/ are served."""
    r = httpx.get(keyed.url + "/", headers={"Accept": "text/html"})  # a browser asks for the page
    assert r.status_code == 200 and r.headers["content-type"] == "text/html; charset=utf-8"
    csp = r.headers["content-security-policy"]
    assert "script-src 'self';" in csp and "connect-src 'self'" in csp and "unsafe-inline" not in csp
    assert r.headers["x-content-type-options"] == "nosniff"
    for src in re.findall(r'(?:src|href)="(/ui/[^"]+)"', r.text):
        assert httpx.get(keyed.url + src).status_code == 200, src
    for path, kind in [
        ("app.js", "text/javascript"),
        ("app.css", "text/css"),
        ("vendor/purify.es.mjs", "text/javascript"),
    ]:
        assert httpx.get(f"{keyed.url}/ui/{path}").headers["content-type"].startswith(kind)
    for bad in ["/ui/../page.py", "/ui/%2e%2e/page.py", "/ui/vendor", "/ui/nope.js", "/ui/.hidden.js"]:
        assert httpx.get(keyed.url + bad).status_code == 404, bad
    assert httpx.get(keyed.url + "/v1/models").status_code == 401


# -- the page ---------------------------------------------------------------------------------------
def test_loads_without_console_errors(page, server):
    page.open()
    assert page.page.inner_text("#model-name") == "standin"
    assert page.page.is_visible("#empty")
    assert page.console == []
    assert f"open {server.url}/ in a browser" in server.output()  # what `make serve` prints


def test_reply_streams_with_drafts_marked_and_stats(page, server):
    page.open()
    page.settings(draft_mode="fixed", draft_k="4")  # as the server's own: the text cannot change
    question = "Name three colours of the rainbow."
    page.send(question)
    page.page.wait_for_selector(".message.assistant.live .draft")  # seen while still streaming
    page.wait_idle()
    reply = page.page.locator(".message.assistant").last
    stats = reply.locator(".stats").inner_text()
    for part in ("tokens", "tok/s", "accepted", "tokens/pass", "K 4"):
        assert part in stats, stats
    assert reply.locator(".markdown .draft").count() > 0
    # the page asked what it shows: the same messages at temperature 0 give the same text
    msg = page.stored()["messages"][-1]
    assert msg["asked"] == {"draft_max": 4} and max(msg["timings"]["k_history"]) == 4
    assert msg["content"] == chat(server, [{"role": "user", "content": question}])
    assert "".join(t for t, _ in msg["runs"]) == msg["content"]
    drafted = "".join(t for t, d in msg["runs"] if d)
    assert drafted and msg["timings"]["draft_n_accepted"] > 0
    assert page.page.locator("#chart rect.bar").count() >= 1
    assert "1 reply" in page.page.inner_text("#totals")
    assert page.console == []


def test_stop_cancels_on_the_server(page, server):
    page.open()
    page.settings(max_tokens="400")
    before = server.metrics().get(CANCELLED, 0)
    page.send("Write a long story about a lighthouse keeper.")
    page.page.wait_for_function(STREAMING_TEXT)
    page.page.click("#stop")
    page.wait_idle()
    deadline = time.monotonic() + 15
    while server.metrics().get(CANCELLED, 0) <= before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert server.metrics()[CANCELLED] == before + 1
    reply = page.page.locator(".message.assistant").last
    assert "stopped" in reply.locator(".stats").inner_text()
    assert page.stored()["messages"][-1]["stopped"] is True
    assert page.console == []


def test_html_in_a_user_message_is_text(page):
    page.open()
    typed = '<img src=x onerror="window.pwned=1"><b>bold?</b>'
    page.send(typed)
    page.page.wait_for_function(STREAMING_TEXT)  # the model's text so far is in the page too
    # the stop is not what is tested: the answer may have ended (and its button gone) just before
    page.page.evaluate("() => document.querySelector('#stop').click()")
    page.wait_idle()
    user = page.page.locator(".message.user .user-text").last
    assert user.inner_text() == typed
    assert page.page.locator("#messages img, .message.user b").count() == 0
    assert page.page.evaluate("() => window.pwned") is None


def test_markdown_is_sanitised_and_keeps_its_structure(page):
    """Model text through the page's renderer: raw HTML is stripped, and the draft marks woven into
    the source never break a list, a heading or a code fence."""
    page.open()
    html = page.page.evaluate(
        """async () => {
          const { renderMarkdown } = await import('/ui/markdown.js');
          const render = (runs) => { const d = document.createElement('div'); d.append(renderMarkdown(runs)); return d; };
          const bad = render([['Hi <img src=x onerror="window.pwned=1"> <script>window.pwned=2</script> **b**', 1]]);
          const doc = render([['# Ti', 0], ['tle\\n\\n', 1], ['- a', 1], ['\\n- b\\n\\n', 0], ['```py', 1],
                              ['thon\\nx = 1\\n', 0], ['```\\n\\nend', 1]]);
          return { bad: bad.innerHTML, h1: doc.querySelector('h1')?.textContent, li: doc.querySelectorAll('li').length,
                   code: doc.querySelector('pre code')?.textContent, lang: doc.querySelector('pre')?.dataset.lang,
                   drafted: [...doc.querySelectorAll('.draft')].map((s) => s.textContent) };
        }"""
    )
    assert "<img" not in html["bad"] and "<script" not in html["bad"] and "<strong>" in html["bad"]
    assert html["h1"] == "Title" and html["li"] == 2
    assert html["code"] == "x = 1\n" and html["lang"] == "python"
    assert "tle" in html["drafted"] and "a" in html["drafted"] and "end" in html["drafted"]
    assert page.page.evaluate("() => window.pwned") is None


def test_the_sanitiser_runs_last(page):
    """The draft marks (U+E000/U+E001) used to be stripped from attributes after DOMPurify had
    checked them, so `java\ue000script:` in model output became a live `javascript:` link (#48)."""
    page.open()
    got = page.page.evaluate(
        """async () => {
          const { renderMarkdown } = await import('/ui/markdown.js');
          const render = (runs) => { const d = document.createElement('div'); d.append(renderMarkdown(runs)); return d; };
          const cases = [
            [['<a href="java\ue000script:window.pwned=1">raw</a>', 1]],
            [['<a href="java\ue001script:window.pwned=1">off</a>', 0]],
            [['[md](java\ue000script:window.pwned=2)', 1]],
            [['<a href="jav', 0], ['ascript:window.pwned=3">split</a>', 1]],
            [['<img src=x one\ue000rror="window.pwned=4">', 1]],
            [['[ok](https://example.com/a\ue000b) and **bold**', 1]],
          ];
          const out = cases.map(render);
          out.forEach((d) => { document.body.append(d); d.querySelectorAll('a').forEach((a) => a.click()); });
          return out.map((d) => ({ html: d.innerHTML,
                                   hrefs: [...d.querySelectorAll('[href]')].map((a) => a.getAttribute('href')) }));
        }"""
    )
    for case in got:
        assert not any(
            h.replace("\x00", "").strip().lower().startswith("javascript:") for h in case["hrefs"]
        ), case
        assert "onerror" not in case["html"] and "<img" not in case["html"], case
    assert got[-1]["hrefs"] == ["https://example.com/ab"] and "<strong>" in got[-1]["html"]  # left working
    assert page.page.evaluate("() => window.pwned") is None


def test_conversation_survives_a_reload(page):
    page.open()
    page.send("Say hello.")
    page.wait_idle()
    before = page.page.inner_text("#messages")
    n_drafts = page.page.locator("#messages .draft").count()
    page.page.reload()
    page.page.wait_for_selector("#server-status[data-state=up]")
    assert page.page.inner_text("#messages") == before
    assert page.page.locator("#messages .draft").count() == n_drafts > 0
    assert page.page.locator("#conversations .conv-open").all_inner_texts() == ["Say hello."]
    # the theme chosen is kept too, and the conversation exports as Markdown and as JSON
    page.page.click("#theme-toggle")
    theme = page.page.get_attribute("html", "data-theme")
    page.page.reload()
    assert page.page.get_attribute("html", "data-theme") == theme
    conv = page.stored()
    files = {}
    for button in ("#export-md", "#export-json"):
        page.page.click("#export-menu summary")
        with page.page.expect_download() as dl:
            page.page.click(button)
        files[button] = Path(dl.value.path()).read_text()
    assert "## User\n\nSay hello." in files["#export-md"]
    assert f"## Assistant\n\n{conv['messages'][1]['content']}" in files["#export-md"]
    assert json.loads(files["#export-json"]) == conv


def test_reasoning_and_tool_calls(page):
    """Deltas the server does not send yet (the tools issue): reasoning is shown collapsed, a tool
    call as a card. The stream here is a recorded one, served by the browser in place of the server."""
    chunk = '{{"choices":[{{"index":0,"delta":{delta},"finish_reason":{finish}}}]}}'
    deltas = [
        ('{"role":"assistant"}', "null"),
        ('{"reasoning_content":"The user wants "}', "null"),
        ('{"reasoning_content":"the weather."}', "null"),
        ('{"content":"Let me check."}', "null"),
        (
            '{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get_weather","arguments":""}}]}',
            "null",
        ),
        ('{"tool_calls":[{"index":0,"function":{"arguments":"{\\"city\\": "}}]}', "null"),
        ('{"tool_calls":[{"index":0,"function":{"arguments":"\\"Paris\\"}"}}]}', "null"),
        ("{}", '"tool_calls"'),
    ]
    body = "".join(f"data: {chunk.format(delta=d, finish=f)}\n\n" for d, f in deltas) + "data: [DONE]\n\n"
    page.open()
    page.page.route(
        "**/v1/chat/completions",
        lambda route: route.fulfill(status=200, headers={"content-type": "text/event-stream"}, body=body),
    )
    page.send("Weather in Paris?")
    page.wait_idle()
    reply = page.page.locator(".message.assistant").last
    assert reply.locator("details.reasoning").get_attribute("open") is None  # collapsed
    assert reply.locator(".reasoning-text").text_content() == "The user wants the weather."
    assert reply.locator(".markdown").inner_text() == "Let me check."
    assert reply.locator(".tool-call-name").inner_text() == "get_weather"
    assert json.loads(reply.locator(".tool-call-args").inner_text()) == {"city": "Paris"}


def test_edit_and_regenerate(page):
    page.open()
    page.send("Name a fruit.")
    page.page.wait_for_function(STREAMING_TEXT)
    page.page.click("#stop")  # an answer to the old text, cut short: the edit replaces it
    page.wait_idle()
    page.page.locator(".message.user").hover()
    page.page.click(".message.user [data-action=edit]")
    page.page.fill(".editor textarea", "Name a vegetable.")
    page.page.click(".editor button[type=submit]")
    page.wait_idle()
    conv = page.stored()
    assert [m["role"] for m in conv["messages"]] == ["user", "assistant"]
    assert conv["messages"][0]["content"] == "Name a vegetable."
    first = conv["messages"][1]["content"]
    page.page.click(".message.assistant [data-action=regenerate]")
    page.wait_idle()
    conv = page.stored()
    assert len(conv["messages"]) == 2 and conv["messages"][1]["content"] == first  # temperature 0


def test_errors_are_messages(page):
    page.open()
    page.settings(max_tokens="999999999")
    page.send("Hello?")
    page.wait_idle()
    err = page.page.locator(".message.error").last.inner_text()
    assert "Error 400" in err and "max_tokens" in err
    # the server goes away: the reply says so, and so does the banner
    page.page.route("**/v1/chat/completions", lambda route: route.abort())
    page.page.route("**/health", lambda route: route.abort())
    page.settings(max_tokens="")
    page.page.click(".message.error [data-action=regenerate]")
    page.wait_idle()
    assert "Cannot reach the localspec server" in page.page.locator(".message.error").last.inner_text()
    page.page.wait_for_selector("#banner:not([hidden])")
    assert page.page.get_attribute("#server-status", "data-state") == "down"
    assert [m["role"] for m in page.stored()["messages"]] == ["user", "error"]


def test_key_prompt(browser, keyed):
    p = Page(browser, keyed.url)
    try:
        p.open(ready=False)
        p.page.wait_for_selector("#key-dialog[open]")
        p.page.fill("#key-input", "wrong")
        p.page.click("#key-ok")
        p.page.wait_for_selector("#key-dialog[open]")
        assert "refused" in p.page.inner_text("#key-reason")
        p.page.fill("#key-input", KEY)
        p.page.click("#key-ok")
        p.page.wait_for_selector("#server-status[data-state=up]")
        p.settings(max_tokens="8")
        p.send("Hi")
        p.wait_idle()
        assert p.page.locator(".message.assistant .stats").count() == 1
        assert p.page.evaluate("() => sessionStorage.getItem('localspec.apiKey')") == KEY
        # a full server (one slot, no queue): a 503 with Retry-After, shown in the conversation
        hold = threading.Thread(target=_hold_slot, args=(keyed,))
        hold.start()
        try:
            deadline = time.monotonic() + 30
            while keyed.health(KEY)["running"] < 1 and time.monotonic() < deadline:
                time.sleep(0.1)
            p.send("Are you busy?")
            p.wait_idle()
        finally:
            hold.join()
        err = p.page.locator(".message.error").last.inner_text()
        assert "Error 503" in err and "retry after 1 s" in err
    finally:
        p.close()


def _hold_slot(srv: Server) -> None:
    body = {
        "messages": [{"role": "user", "content": "Count to a thousand."}],
        "max_tokens": 300,
        "stream": True,
    }
    headers = {"Authorization": f"Bearer {KEY}"}
    with httpx.stream("POST", srv.url + "/v1/chat/completions", json=body, headers=headers, timeout=120) as r:
        for i, _ in enumerate(r.iter_lines()):
            if i > 400:
                break
            time.sleep(0.005)  # hold on long enough for the page to be refused


# -- router mode: the model picker ------------------------------------------------------------------
@pytest.fixture(scope="module")
def routed(tmp_path_factory, smollm2_path):
    """A router over two names for SmolLM2 (small, and with a chat template), one loaded at a time."""
    root = tmp_path_factory.mktemp("models")
    for name in ("smol-a", "smol-b"):
        (root / name).mkdir()
        (root / name / smollm2_path.name).symlink_to(smollm2_path)
    srv = Server(root, *THREADS, "--models-max", "1", "--max-tokens", "8", "--temperature", "0")
    yield srv
    srv.stop()


def test_the_picker_shows_each_models_state_and_loads_the_one_chosen(browser, routed):
    def shows(*options: str) -> None:
        p.page.wait_for_function(
            "want => [...document.querySelectorAll('#model-picker option')].map(o => o.textContent).join('|') === want",
            arg="|".join(options),
        )

    def up(name: str) -> None:
        p.page.wait_for_function(
            "name => document.getElementById('server-status').dataset.state === 'up'"
            " && document.getElementById('model-name').textContent === name",
            arg=name,
        )

    p = Page(browser, routed.url)
    try:
        p.open()
        shows("smol-a · unloaded", "smol-b · unloaded")
        p.page.select_option("#model-picker", "smol-b")
        up("smol-b")
        shows("smol-a · unloaded", "smol-b · loaded")
        p.send("Say hello.")
        p.wait_idle()
        assert "smol-b" in p.page.locator(".message.assistant .stats").last.inner_text()  # who answered
        p.page.select_option("#model-picker", "smol-a")  # --models-max 1: smol-b makes room
        up("smol-a")
        shows("smol-a · loaded", "smol-b · unloaded")
        p.page.reload()  # the choice is kept
        up("smol-a")
        assert p.page.input_value("#model-picker") == "smol-a"
        assert p.console == []
    finally:
        p.close()


# -- screenshots for the README ---------------------------------------------------------------------
@pytest.mark.skipif(
    not os.environ.get("LOCALSPEC_SCREENSHOTS"), reason="set LOCALSPEC_SCREENSHOTS=1 to write docs/ui-*.png"
)
def test_screenshots(browser, server):
    p = Page(browser, server.url, device_scale_factor=1)
    try:
        p.open()
        p.settings(max_tokens="72")
        for q in (
            "Write a Python function that reverses a string.",
            "Now name three colours of the rainbow, as a list.",
        ):
            p.send(q)
            p.wait_idle()
        for theme in ("light", "dark"):
            if p.page.get_attribute("html", "data-theme") != theme:
                p.page.click("#theme-toggle")
            p.page.evaluate(
                "() => { const s = document.getElementById('scroller'); s.scrollTop = s.scrollHeight; }"
            )
            p.page.screenshot(path=str(ROOT / "docs" / f"ui-{theme}.png"))
    finally:
        p.close()


# -- images ---------------------------------------------------------------------------------------
# a file handed to the page as a paste or a drop would: a DataTransfer holding it
HAND_OVER = """([kind, name, type, b64]) => {
  const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  const dt = new DataTransfer();
  dt.items.add(new File([bytes], name, { type }));
  if (kind === 'paste') document.querySelector('#input').dispatchEvent(new ClipboardEvent('paste', { clipboardData: dt, bubbles: true, cancelable: true }));
  else document.querySelector('#composer').dispatchEvent(new DragEvent('drop', { dataTransfer: dt, bubbles: true, cancelable: true }));
}"""  # noqa: E501


def test_an_attached_image_reaches_the_model(browser, seeing, tmp_path):
    page = Page(browser, seeing.url).open()
    try:
        picture = tmp_path / "picture.png"
        picture.write_bytes(png(7))
        page.page.set_input_files("#attach-file", str(picture))
        page.page.wait_for_selector("#attachments img")
        ask = "What is in this picture?"
        page.send(ask)
        page.wait_idle()
        assert page.page.is_hidden("#attachments")  # sent with the message
        url = "data:image/png;base64," + base64.b64encode(png(7)).decode()
        user = page.page.locator(".message.user").last
        assert user.locator(".user-images img").get_attribute("src") == url  # the conversation shows it
        reply = page.stored()["messages"][-1]["content"]
        assert reply.strip()
        # the model saw that image: the API gives the same reply for it at temperature 0, another without
        image_part = {"type": "image_url", "image_url": {"url": url}}
        assert reply == chat(
            seeing, [{"role": "user", "content": [image_part, {"type": "text", "text": ask}]}]
        )
        assert reply != chat(seeing, [{"role": "user", "content": ask}])
        assert page.console == []
    finally:
        page.close()


def test_images_paste_and_drop_and_a_bad_one_is_a_clear_error(browser, seeing):
    page = Page(browser, seeing.url).open()
    try:
        b64 = base64.b64encode(png(8)).decode()
        page.page.evaluate(HAND_OVER, ["paste", "pasted.png", "image/png", b64])
        page.page.evaluate(HAND_OVER, ["drop", "dropped.png", "image/png", b64])
        page.page.wait_for_function("() => document.querySelectorAll('#attachments img').length === 2")
        page.page.locator("#attachments .link").first.click()  # removed again
        assert page.page.locator("#attachments img").count() == 1
        page.page.evaluate(HAND_OVER, ["drop", "notes.txt", "text/plain", base64.b64encode(b"hi").decode()])
        page.page.wait_for_selector("#banner:not([hidden])")
        assert "notes.txt is not an image" in page.page.inner_text("#banner-text")
        page.page.locator("#attachments .link").first.click()
        # a file that claims to be a PNG but is not: the server's 400, shown as the reply
        fake = base64.b64encode(b"not a picture at all").decode()
        page.page.evaluate(HAND_OVER, ["drop", "fake.png", "image/png", fake])
        page.page.wait_for_selector("#attachments img")
        page.send("And this one?")
        page.page.wait_for_selector(".message.error")
        assert "not an image localspec reads" in page.page.inner_text(".message.error")
        assert seeing.proc.poll() is None
    finally:
        page.close()
