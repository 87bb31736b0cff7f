"""llama.cpp's log callback (localspec/llama/log.py) taken again on its own thread: the garbage
collector runs inside it now and then and may finalize an engine nobody closed, whose models log as
they are freed. That once deadlocked a test run (the next engine's load never returned)."""

from __future__ import annotations

import threading

from localspec.llama import log


class _Finalizing(list):
    """A line buffer whose append, the first time, logs a line itself (as a finalizer run by the
    garbage collector inside the callback does)."""

    nested = False

    def append(self, item: str) -> None:
        super().append(item)
        if not self.nested:
            self.nested = True
            log._on_log(2, b"freed while logging\n", None)


def test_a_line_logged_while_a_line_is_taken_does_not_deadlock(monkeypatch):
    monkeypatch.setattr(log, "_LOG_PARTIAL", _Finalizing())
    mark = log.log_mark()
    t = threading.Thread(target=log._on_log, args=(2, b"outer\n", None), daemon=True)
    t.start()
    t.join(timeout=10)
    assert not t.is_alive(), "the log callback deadlocked on its own lock"
    assert any("outer" in line for line in log.log_since(mark))
