"""llama-server's record of an agent task (the comparison's) is read from its log: each finished
request's prompt eval, tokens generated, drafts, and its final n_tokens (the prompt's size)."""

from __future__ import annotations

from tools.agents import record

# two requests as llama-server logs them (the second reused the first's prefix), other lines between
LOG = """\
slot launch_slot_: id  0 | task 0 | processing task, is_child = 0
slot print_timing: id  0 | task 0 | prompt eval time =  111718.56 ms /  6104 tokens (   18.30 ms per token,    54.64 tokens per second)
slot print_timing: id  0 | task 0 |        eval time =    9615.93 ms /   114 tokens (   85.10 ms per token,    11.75 tokens per second)
slot print_timing: id  0 | task 0 |       total time =  121334.49 ms /  6218 tokens
slot      release: id  0 | task 0 | stop processing: n_tokens = 6217, truncated = 0
srv  log_server_r: done request: POST /v1/responses 127.0.0.1 200
slot print_timing: id  0 | task 9 | prompt eval time =    4000.00 ms /   171 tokens (   23.39 ms per token,    42.75 tokens per second)
slot print_timing: id  0 | task 9 |        eval time =    2000.00 ms /    20 tokens (  100.00 ms per token,    10.00 tokens per second)
slot print_timing: id  0 | task 9 | draft acceptance = 0.50000 (    6 accepted /    12 generated), mean len =  1.50
slot      release: id  0 | task 9 | stop processing: n_tokens = 6383, truncated = 0
"""


def test_llama_servers_log_gives_the_same_record(tmp_path, monkeypatch):
    log = tmp_path / "server.log"
    log.write_text("srv  load_model: loading\n")
    watch = record.PeerWatch("http://127.0.0.1:1", log)  # no server asked: it counts no cut requests
    with log.open("a") as f:
        f.write(LOG)
    monkeypatch.setattr(record.time, "sleep", lambda s: None)
    r = watch.record()
    assert (r.requests, r.prompts, r.evaluated, r.generated) == (2, [6104, 6364], [6104, 171], 134)
    assert (r.reused, r.accepted, r.drafted, r.cut) == (6193, 6, 12, 0)
    assert [round(s, 1) for s in r.prefill] == [111.7, 4.0]
