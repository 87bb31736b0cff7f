"""The lifetime every C handle's owner shares: `close()` frees it, a `with` block closes it, and the
garbage collector closes what an owner forgot (a last resort, never relied on)."""

from __future__ import annotations

from typing import TypeVar

T = TypeVar("T", bound="Owner")


class Owner:
    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self: T) -> T:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
