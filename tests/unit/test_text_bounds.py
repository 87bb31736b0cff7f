"""The bounds on a client's prompt text (serving/text_ops.py, issue 60 #3): none past what the
context could hold is rendered or tokenized, and large ones are worked on one at a time (three at
once took a neighbour's decoding to a quarter of its speed)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from localspec.serving import APIError, Message, Request, ToolCall, bulk, text_ops


def test_a_prompt_past_the_contexts_characters_is_a_400_naming_them():
    text_ops.Large.check(text_ops.MAX_TEXT, 512, "messages")  # the floor: /tokenize's bound
    text_ops.Large.check(300_000 * text_ops.CHARS_PER_TOKEN, 300_000, "messages")  # a long context's
    with pytest.raises(APIError) as e:
        text_ops.Large.check(text_ops.MAX_TEXT + 1, 512, "messages")
    assert e.value.status == 400 and e.value.param == "messages" and "characters" in e.value.message


def test_chars_of_counts_every_text_a_render_takes():
    req = Request(messages=(Message("user", "abc", reasoning="de"), Message("assistant", "f")))
    assert text_ops.chars_of(req) == 6 + 2 * text_ops.ITEM_CHARS  # and each message's markers
    assert text_ops.chars_of(Request(prompt="x" * 10)) == 10


def test_many_small_items_are_refused_before_a_template_loops_over_them():
    """60k empty calls held 120k characters, under the bound, and took a template seconds to
    render on a worker, three clients of them slowing a neighbour to a fifth (issue 60)."""
    calls = tuple(ToolCall(f"c{i}", "f") for i in range(60_000))
    req = Request(
        messages=(Message("user", "go"), Message("assistant", tool_calls=calls), Message("user", "go"))
    )
    with pytest.raises(APIError) as e:
        text_ops.Large.check(text_ops.chars_of(req), 8192, "messages")
    assert e.value.status == 400 and "characters" in e.value.message
    few = Request(messages=tuple(Message("user", "x" * 40) for _ in range(2_000)))  # a long chat: served
    text_ops.Large.check(text_ops.chars_of(few), 8192, "messages")


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


@pytest.mark.parametrize(("size", "together"), [(text_ops.LARGE + 1, False), (text_ops.LARGE, True)])
def test_large_renders_run_on_the_bulk_thread_one_at_a_time(size, together):
    """A large prompt's work goes to the one bulk thread (two never meet inside), a small one's
    stays on the worker that asked."""
    inside, met = threading.Barrier(2, timeout=1.0), []

    def work() -> None:
        try:
            inside.wait()
            met.append(True)
        except threading.BrokenBarrierError:
            met.append(False)

    threads = [threading.Thread(target=text_ops.in_turn, args=(size, work)) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(met) == together and len(met) == 2


def test_the_bulk_thread_is_one_thread_of_its_own():
    assert asyncio.run(bulk.run(threading.current_thread)).name.startswith("localspec-bulk")
    assert bulk.call(threading.current_thread) is asyncio.run(bulk.run(threading.current_thread))
