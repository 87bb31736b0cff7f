"""What the adaptive-K tuner learned, remembered across processes.

A fresh process would otherwise spend its first rounds re-measuring the machine. The record is kept
per (pair, llama.cpp build, device, settings that change the cost) in the user's cache directory:
one small JSON file per key, written atomically. A file that does not parse, or was written for
another key or schema, is ignored with one note and overwritten by the next save.
"""

from __future__ import annotations

import hashlib
import json
import math
import platform
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from localspec import paths
from localspec.errors import LocalspecError
from localspec.files import fingerprint, write_text_atomic

SCHEMA = 1


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
        verify = {int(n): float(t) for n, t in d["verify_s"].items()}
        if not verify or any(not 0 < t < 3600 for t in verify.values()):  # NaN fails these too
            raise ValueError("verify timings out of range")
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
            verify,
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


class TunerMemory:
    def __init__(self, key: dict[str, Any], directory: Path | None = None, *, note: Callable[[str], None]):
        self.key = key
        self.dir = directory or paths.tuner_dir()
        digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
        self.path = self.dir / f"{digest}.json"
        self._note = note

    def load(self) -> TunerRecord | None:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return None
        except OSError as e:
            self._note(f"note: tuner cache {self.path} unreadable ({e.strerror}); measuring afresh")
            return None
        try:
            return TunerRecord.from_json(text, self.key)
        except (ValueError, KeyError, TypeError, AttributeError) as e:  # JSONDecodeError is a ValueError
            self._note(f"note: ignoring tuner cache {self.path} ({e}); measuring afresh")
            return None

    def save(self, record: TunerRecord) -> None:
        """Atomic: a reader sees the old file or the new one, never half of one. Failures are notes,
        never errors: remembering is an optimisation."""
        record.saved_at = time.time()
        try:
            write_text_atomic(self.path, record.to_json(self.key), private=True)
        except (OSError, LocalspecError) as e:
            self._note(
                f"warning: could not save the tuner cache to {self.dir} ({getattr(e, 'strerror', None) or e})"
            )


def memory_key(settings: Any, target_gpu_layers: int, draft_gpu_layers: int) -> dict[str, Any]:
    """What the costs depend on: the two files, the llama.cpp build, the hardware and the settings
    that change a decode's cost."""
    from localspec import llama  # noqa: PLC0415 - llama.cpp facts come only from the backend

    draft = fingerprint(Path(settings.draft)) if settings.speculative else None  # --lookup only: None
    return {
        "target": fingerprint(Path(settings.target)),
        "draft": "mtp" if settings.mtp_drafts else draft,  # the target's own head: not a lookup's costs
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
