"""tqdm bars driven by (stage, done, total) callbacks, e.g. llama.cpp's per-tensor quantize log."""

from __future__ import annotations

import sys

from tqdm import tqdm


class StageBars:
    """One bar per stage; a new stage name closes the previous bar. Use as a context manager."""

    def __init__(self, unit: str = "tensor") -> None:
        self.unit = unit
        self._bar: tqdm | None = None
        self._stage: str | None = None

    def update(self, stage: str, done: int, total: int) -> None:
        if stage != self._stage:
            self.close()
            self._stage = stage
            self._bar = tqdm(
                total=total,
                desc=f"{stage:<14}",
                unit=self.unit,
                file=sys.stderr,
                dynamic_ncols=True,
                leave=True,
            )
        assert self._bar is not None
        self._bar.update(done - self._bar.n)

    def write(self, line: str, err: bool = False) -> None:
        # tqdm.write keeps an open bar intact below the message
        tqdm.write(line, file=sys.stderr if err else sys.stdout)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar, self._stage = None, None

    def __enter__(self) -> StageBars:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
