"""The router's rule for making room for a model, as a pure function over numbers: which loaded
models to unload first (least recently used first, idle ones only), or why it cannot be done.

Two limits: the count (`--models-max`: loaded and loading models) and the memory (the incoming
model's plan against what is free after the unloads). A model with requests in flight, or still
loading, is never unloaded to make room: the request that wanted room gets a 503 that says what
is busy, what would be free, and which of the other models would fit."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from localspec.gguf.memory_plan import fmt_bytes


@dataclass(frozen=True)
class Held:
    """A loaded (or loading) model as the rule sees it."""

    name: str
    frees: int  # bytes its unloading gives back
    last_used: float  # monotonic seconds
    busy: str = ""  # why it cannot be unloaded now ("2 requests", "loading"); "" = idle


@dataclass(frozen=True)
class Room:
    evict: tuple[str, ...] = ()  # unload these, in this order, then load
    refused: str | None = None  # or: why not (one line), nothing unloaded
    free_after: int | None = None
    fits_instead: tuple[str, ...] = field(default=())


def make_room(
    name: str,
    need: int | None,
    free: int | None,
    held: Sequence[Held],
    models_max: int,
    others: Sequence[tuple[str, int]] = (),
) -> Room:
    """Room for `name`, which needs `need` bytes where `free` are free now (None: not known, the
    memory is not checked), beside `held` (models_max 0: no count limit). `others`: the models not
    loaded, with what they need, to say which would fit when `name` does not."""
    idle = sorted((h for h in held if not h.busy), key=lambda h: h.last_used)
    busy = [h for h in held if h.busy]
    over = len(held) + 1 - models_max if models_max > 0 else 0
    if over > len(idle):
        what = ", ".join(f"{h.name} ({h.busy})" for h in busy)
        return Room(
            refused=f"cannot load {name}: {len(held)} of --models-max {models_max} models are loaded "
            f"and none is idle ({what}); retry when one is done"
        )
    evict = idle[: max(over, 0)]
    if need is None or free is None:
        return Room(tuple(h.name for h in evict))
    free_after = free + sum(h.frees for h in evict)
    for h in idle[len(evict) :]:
        if free_after >= need:
            break
        evict.append(h)
        free_after += h.frees
    if free_after >= need:
        return Room(tuple(h.name for h in evict), free_after=free_after)
    fits = tuple(n for n, b in others if n != name and b <= free_after)
    held_txt = f"; busy: {', '.join(f'{h.name} ({h.busy})' for h in busy)}" if busy else ""
    instead = f"; would fit: {', '.join(fits)}" if fits else "; none of the other models would fit either"
    return Room(
        refused=f"cannot load {name}: it needs {fmt_bytes(need)}, {fmt_bytes(free_after)} would be "
        f"free after unloading every idle model{held_txt}{instead}",
        free_after=free_after,
        fits_instead=fits,
    )
