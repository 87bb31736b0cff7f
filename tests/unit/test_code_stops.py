"""Code completion's stops in the text stream, as llama-server's: n_indent ends the text where a
line after a newline starts less indented (keeping the newline and the indentation), and
t_max_predict_ms at the first newline once generating has taken that long."""

from __future__ import annotations

from localspec.decode.state import Step
from localspec.decode.text_stream import TextStream

# a vocabulary of pieces: each token is one piece of text
PIECES = ["    x = 1", "\n", "    y", " = 2", "\n  ", "z", "\n", "w", "<eos>", "\t", "\tq"]
EOS = PIECES.index("<eos>")


def stream(**stops: int) -> TextStream:
    return TextStream(lambda t: PIECES[t].encode(), lambda t: t == EOS, **stops)


def feed(ts: TextStream, tokens: list[int], times: list[float] | None = None) -> str:
    """The text of `tokens` fed one at a time, token i at times[i] seconds."""
    out = []
    for i, t in enumerate(tokens):
        now = times[i] if times else 0.0
        out += [d for d, _ in ts.feed([Step(t, False)], lambda now=now: now)]
        if ts.done:
            break
    return "".join(out) + "".join(d for d, _ in ts.close())


def test_n_indent_cuts_at_the_first_character_of_a_line_less_indented():
    ts = stream(n_indent=4)
    text = feed(ts, [0, 1, 2, 3, 4, 5, 6, 7])
    assert text == "    x = 1\n    y = 2\n  " and ts.finish == "length"
    assert ts.tokens == [0, 1, 2, 3, 4]  # "z" started at the cut: dropped with what came after
    assert [s.token for s in ts.dropped] == [5]


def test_the_first_line_and_enough_indentation_pass():
    ts = stream(n_indent=4)
    assert feed(ts, [5, 1, 2, 3, EOS]) == "z\n    y = 2" and ts.finish == "stop"  # the cursor's line: free
    assert feed(stream(n_indent=2), [0, 1, 9, 10, 6, EOS]) == "    x = 1\n\t\tq\n"  # tabs count one each
    assert feed(stream(), [0, 6, 7, EOS]) == "    x = 1\nw"  # off: nothing cut


def test_t_max_predict_ms_ends_at_a_newline_once_late():
    ts = stream(t_max_predict_ms=1000)
    text = feed(ts, [0, 1, 2, 3, 6, 7, 6], times=[0.0, 0.5, 0.9, 1.0, 1.2, 1.3, 1.4])
    assert text == "    x = 1\n    y = 2\n" and ts.finish == "length"  # the early newline did not stop it
    assert ts.tokens == [0, 1, 2, 3, 6]
