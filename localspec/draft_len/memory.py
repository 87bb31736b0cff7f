"""What the adaptive-K tuner learned, remembered across processes.

A fresh process would otherwise spend its first rounds re-measuring the machine. The record is kept
per (pair, llama.cpp build, device, settings that change the cost) in the user's cache directory:
one small JSON file per key, written atomically. A file that does not parse, was written for
another key or schema, or holds more than a record can (batch sizes, list lengths, bytes), is
ignored with one note and overwritten by the next save.

Requests end on the engine thread: `remember` only hands the record to a writer thread
(deferred.py), which writes the newest at most once per SAVE_EVERY_S. Timings are not kept blindly:
a batch that took more than CONTENTION times what its share of the cheapest batch predicts was
measured under a neighbour's load (a batch never costs more than the steps it replaces), and a
timing above CONTENTION times the one already remembered is left at the remembered one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import platform
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from localspec import paths
from localspec.config.settings import AUTO_K_MAX
from localspec.deferred import Deferred
from localspec.errors import LocalspecError
from localspec.files import fingerprint, read_capped, write_text_atomic

SCHEMA = 1
MAX_BYTES = 64 << 10  # a record is ~1 KB
MAX_BATCH = 1 << 16  # the largest verify batch a record may time (n_batch's own bound is far above use)
MAX_SIZES = 1024  # batch sizes timed
MAX_POSITIONS = AUTO_K_MAX  # acceptance evidence per draft position
CONTENTION = 2.0  # a timing this many times what it should be was taken under someone else's load
SAVE_EVERY_S = 10.0


@dataclass
class TunerRecord:
    """Costs (seconds) and acceptance evidence, in the shape `AutoK.prime` takes."""

    verify_s: dict[int, float]  # target verify time by batch size (tokens)
    draft_s: float | None  # draft time per token
    acc: list[float] = field(default_factory=list)  # decayed accepted counts by draft position
    tried: list[float] = field(default_factory=list)  # decayed reached counts by draft position
    saved_at: float = 0.0
    catch_s: float | None = None  # the draft's catch-up seconds per token (None in older records)

    def to_json(self, key: dict[str, Any]) -> str:
        d = asdict(self)
        d["verify_s"] = {str(n): t for n, t in sorted(self.verify_s.items())}
        return json.dumps({"schema": SCHEMA, "key": key, **d}, indent=1)

    @classmethod
    def from_json(cls, text: str, key: dict[str, Any]) -> "TunerRecord":
        d = json.loads(text)
        if not isinstance(d, dict) or d.get("schema") != SCHEMA:
            raise ValueError("written by another version of localspec")
        if d.get("key") != key:
            raise ValueError("written for another pair, build or device")
        if len(d["verify_s"]) > MAX_SIZES or len(d.get("acc", [])) > MAX_POSITIONS:
            raise ValueError("more entries than a record holds")
        verify = {int(n): float(t) for n, t in d["verify_s"].items()}
        if not verify or any(not 0 < t < 3600 for t in verify.values()):  # NaN fails these too
            raise ValueError("verify timings out of range")
        if any(not 1 <= n <= MAX_BATCH for n in verify):
            raise ValueError(f"batch sizes out of range (1..{MAX_BATCH})")
        draft = d.get("draft_s")
        if draft is not None and not 0 < float(draft) < 3600:
            raise ValueError("draft timing out of range")
        acc, tried = [float(x) for x in d.get("acc", [])], [float(x) for x in d.get("tried", [])]
        if len(acc) != len(tried) or not all(0 <= a <= t + 1e-9 < math.inf for a, t in zip(acc, tried)):
            raise ValueError("acceptance counts inconsistent")
        catch = d.get("catch_s")
        if catch is not None and not 0 < float(catch) < 3600:
            raise ValueError("catch-up timing out of range")
        return cls(
            plausible(verify),
            None if draft is None else float(draft),
            acc,
            tried,
            float(d.get("saved_at", 0)),
            None if catch is None else float(catch),
        )


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def plausible(verify: dict[int, float]) -> dict[int, float]:
    """The timings a quiet machine could have given: a batch of n tokens never costs more than the
    n / b0 batches of the cheapest size b0 it replaces, so one CONTENTION times above that was taken
    while something else held the CPU (2.6-3.7 s for 11-18 tokens against 0.016 s for one)."""
    if not verify:
        return verify
    b0 = min(verify)
    return {n: t for n, t in verify.items() if t <= CONTENTION * max(1.0, n / b0) * verify[b0]}


class TunerMemory:
    def __init__(self, key: dict[str, Any], directory: Path | None = None, *, note: Callable[[str], None]):
        self.key = key
        self.dir = directory or paths.tuner_dir()
        digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
        self.path = self.dir / f"{digest}.json"
        self._note = note
        self._known: TunerRecord | None = None  # loaded or saved last: what a new timing is held to
        self._latest: TunerRecord | None = None
        self._writer: Deferred = Deferred(self._save_latest, name="localspec-tuner", interval=SAVE_EVERY_S)

    def load(self) -> TunerRecord | None:
        if not os.path.lexists(self.path):  # nothing remembered yet (a symlink loop is a note below)
            return None
        try:
            text = read_capped(self.path, "tuner cache", MAX_BYTES).decode()
            self._known = TunerRecord.from_json(text, self.key)
            return self._known
        except (LocalspecError, ValueError, KeyError, TypeError, AttributeError) as e:  # JSON, UTF-8 too
            self._note(f"note: ignoring tuner cache {self.path} ({e}); measuring afresh")
            return None

    def remember(self, record: TunerRecord) -> None:
        """Save `record` soon, off this thread (the engine's): the newest within SAVE_EVERY_S wins."""
        self._latest = record
        self._writer.put(None)

    def flush(self, timeout: float | None = None) -> bool:
        return self._writer.flush(timeout)

    def _save_latest(self, _: list[None]) -> None:
        record, self._latest = self._latest, None
        if record is not None:
            self.save(record)

    def save(self, record: TunerRecord) -> None:
        """Atomic: a reader sees the old file or the new one, never half of one. Failures are notes,
        never errors: remembering is an optimisation. Timings a neighbour's load inflated are not
        kept (`plausible`), nor is one over CONTENTION times what was remembered for that size."""
        known = self._known.verify_s if self._known is not None else {}
        verify = plausible(record.verify_s)
        verify = known | {n: t for n, t in verify.items() if t <= CONTENTION * known.get(n, t)}
        record = dataclasses.replace(record, verify_s=verify, saved_at=time.time())
        try:
            write_text_atomic(self.path, record.to_json(self.key), private=True)
            self._known = record
        except (OSError, LocalspecError) as e:
            self._note(
                f"warning: could not save the tuner cache to {self.dir} ({getattr(e, 'strerror', None) or e})"
            )


def memory_key(
    settings: Any, target_gpu_layers: int, draft_gpu_layers: int, draft: str | None
) -> dict[str, Any]:
    """What the costs depend on: the target's file, the drafter's key (its kind's: a draft GGUF's
    fingerprint, or what drafts; None: lookup drafts only), the llama.cpp build, the hardware and
    the settings that change a decode's cost."""
    from localspec import llama  # noqa: PLC0415 - llama.cpp facts come only from the backend

    return {
        "target": fingerprint(Path(settings.target)),
        "draft": draft,
        "llama_cpp": llama.llama_cpp_version(),
        "build": hashlib.sha256(llama.system_info().encode()).hexdigest()[:16],
        "cpu": cpu_name(),
        "devices": sorted(f"{d.name}:{d.description}" for d in llama.devices() if d.kind != "cpu"),
        "rpc": settings.rpc,  # a target split over the network verifies at another cost
        "gpu_layers": [target_gpu_layers, draft_gpu_layers],
        "threads": settings.n_threads or llama.default_threads(),
        "kv_type": settings.kv_type,
        "flash_attn": settings.flash_attn,
        "n_ubatch": settings.n_ubatch,
    }
