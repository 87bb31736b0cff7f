"""The FIM benchmark's problems check their own checker: each reference middle passes its test, an
empty middle fails it; and the summary's arithmetic."""

from __future__ import annotations

import pytest

from localspec.bench.fim import Sample, load_problems, markdown, passes, summary

PROBLEMS = load_problems()


@pytest.mark.parametrize("p", PROBLEMS, ids=[p.id for p in PROBLEMS])
def test_the_reference_middle_passes_and_an_empty_one_fails(p):
    assert passes(p, p.middle)
    assert not passes(p, "")
    assert p.middle not in p.prefix + p.suffix  # the answer is not given away verbatim


def test_each_hole_is_on_an_indented_line():
    assert all(p.indent in (4, 8) for p in PROBLEMS)


def test_a_problem_with_extra_files_sees_them():
    p = next(p for p in PROBLEMS if p.extra)
    assert p.setup and all(c.filename in p.setup for c in p.extra)


def test_the_summary():
    s = [Sample("a", "plain", 0, 10.0, 100.0 * i, 5, 0.0, i % 2 == 0, "") for i in range(1, 11)]
    (row,) = summary(s)
    assert row["requests"] == 10 and row["pass_rate"] == 0.5
    assert row["median_ms"] == 550.0 and row["p90_ms"] == 1000.0 and row["ttft_ms"] == 10.0
    assert "| plain | 10 | 50% | 550 ms | 1000 ms |" in markdown([row])


def test_llama_servers_infill_is_sent_as_llama_vim_sends_it_and_its_stream_read():
    """fim_peer against a stand-in for llama-server's /infill stream: the body carries the problem
    (prefix, suffix, chunks, n_indent, no cache), greedy; the frames' content is the middle, and
    the last frame's timings give the tokens and acceptance."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from types import SimpleNamespace

    from localspec.bench import fim_peer
    from localspec.bench.peer import PeerSettings

    got = {}

    class Infill(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            got["path"] = self.path
            got["body"] = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for piece in ("    return ", "a + b"):
                self.wfile.write(b"data: " + json.dumps({"content": piece, "stop": False}).encode() + b"\n\n")
            last = {
                "content": "",
                "stop": True,
                "timings": {"predicted_n": 5, "draft_n": 4, "draft_n_accepted": 3},
            }
            self.wfile.write(b"data: " + json.dumps(last).encode() + b"\n\n")

        def log_message(self, *args):  # quiet
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Infill)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        p = next(p for p in PROBLEMS if p.extra)
        ps = PeerSettings(target="t", draft="d", n_threads=2, n_ctx=2048, n_batch=512, n_ubatch=512,
                          flash_attn="auto", kv_type="f16", top_k=40, top_p=0.95, min_p=0.05)  # fmt: skip
        m = fim_peer.infill(SimpleNamespace(port=srv.server_address[1], timeout_s=10), p, 64, ps)
    finally:
        srv.shutdown()
    b = got["body"]
    assert got["path"] == "/infill" and b["input_prefix"] == p.prefix and b["input_suffix"] == p.suffix
    assert b["input_extra"] == [{"filename": c.filename, "text": c.text} for c in p.extra]
    assert b["n_indent"] == p.indent and b["cache_prompt"] is False and b["n_predict"] == 64
    assert b["temperature"] == 0 and b["top_k"] == 1 and b["stream"] is True
    assert m.middle == "    return a + b" and m.tokens == 5 and m.acceptance == 0.75
    assert 0 < m.ttft_ms <= m.latency_ms
