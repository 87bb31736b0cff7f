"""The bounds on a client's prompt text (serving/text_ops.py, issue 60 #3): none past what the
context could hold is rendered or tokenized, and large ones are worked on one at a time (three at
once took a neighbour's decoding to a quarter of its speed)."""

from __future__ import annotations

import threading

import pytest

from localspec.serving import APIError, Message, Request, text_ops


def test_a_prompt_past_the_contexts_characters_is_a_400_naming_them():
    text_ops.Large.check(text_ops.MAX_TEXT, 512, "messages")  # the floor: /tokenize's bound
    text_ops.Large.check(300_000 * text_ops.CHARS_PER_TOKEN, 300_000, "messages")  # a long context's
    with pytest.raises(APIError) as e:
        text_ops.Large.check(text_ops.MAX_TEXT + 1, 512, "messages")
    assert e.value.status == 400 and e.value.param == "messages" and "characters" in e.value.message


def test_chars_of_counts_every_text_a_render_takes():
    req = Request(messages=(Message("user", "abc", reasoning="de"), Message("assistant", "f")))
    assert text_ops.chars_of(req) == 6
    assert text_ops.chars_of(Request(prompt="x" * 10)) == 10


@pytest.mark.parametrize(("size", "together"), [(text_ops.LARGE + 1, False), (text_ops.LARGE, True)])
def test_large_prompts_are_worked_on_one_at_a_time(size, together):
    """Three workers meet inside (a barrier, not a timing: the machine may be loaded) only when
    their prompts are small."""
    big, met = text_ops.Large(), []
    inside = threading.Barrier(3, timeout=1.0)

    def work() -> None:
        with big.one(size):
            try:
                inside.wait()
                met.append(True)
            except threading.BrokenBarrierError:
                met.append(False)

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(met) == together and len(met) == 3
