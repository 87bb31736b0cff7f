"""The prompt cache's folder, as one context's key sees it: which saved prefixes there are (an index
of their tokens, read from the headers once), the longest one a prompt shares, reading one back
verified, and saving new ones off the engine thread.

Files are named `KEYHASH-TOKENSHASH.lsc`: only those named for this key are ever opened, so the
files of other models and settings (a router's other models, another llama.cpp build) share the
folder without being read. A file named for this key that does not check out is refused with one
line and removed. The folder is bounded: after each save the least recently used files (by mtime;
a load touches its file) go until the folder is under its cap, whichever key wrote them.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
import weakref
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from localspec.deferred import Deferred
from localspec.engine.prompt_disk import entry
from localspec.engine.sharing import common_prefix
from localspec.errors import LocalspecError
from localspec.files import PRIVATE_FILE, atomic_output, private_dir, remove_dead_partials

SUFFIX = ".lsc"
PENDING = 2  # states waiting for the writer, per store: each may be hundreds of MB
_EVICTING = threading.Lock()  # one eviction at a time in this process
_STORES: "weakref.WeakSet[Store]" = weakref.WeakSet()  # told when an eviction removes their files


class Store:
    def __init__(
        self,
        folder: Path,
        key: dict[str, Any],
        *,
        cap_bytes: int,
        max_tokens: int,
        log: Callable[[str], None],
    ) -> None:
        self.folder, self.key = folder, entry.canonical(key)
        self.cap_bytes, self.max_tokens, self._log = cap_bytes, max_tokens, log
        self.prefix = hashlib.sha256(json.dumps(self.key, sort_keys=True).encode()).hexdigest()[:16]
        self._index: dict[Path, list[int]] = {}  # file -> the tokens its state holds
        self._lock = threading.Lock()  # the index: the engine thread looks, the writer adds and drops
        self._writer: Deferred = Deferred(
            self._write, name="localspec-prompt-cache", interval=0.0, max_items=PENDING
        )
        private_dir(folder)
        self._scan()
        _STORES.add(self)

    def __len__(self) -> int:
        return len(self._index)

    def _scan(self) -> None:
        for path in sorted(self.folder.glob(f"{self.prefix}-*{SUFFIX}")):
            try:
                with open(path, "rb") as f:
                    header = entry.read_header(f, self.max_tokens)
                if header.key != self.key:  # named for this key, written for another: moved or forged
                    raise entry.Refused(entry.FOREIGN)
                self._index[path] = header.tokens.tolist()
            except entry.Refused as e:
                self._refuse(path, str(e))
            except OSError:
                pass  # gone meanwhile, or not ours to read: not an entry

    def best(self, tokens: Sequence[int], cap: int) -> tuple[Path | None, int]:
        """The saved prefix sharing the most of `tokens` (at most `cap` of them), and how much."""
        best, n_best = None, 0
        with self._lock:
            entries = list(self._index.items())
        for path, toks in entries:
            n = min(common_prefix(toks, tokens), cap)
            if n > n_best:
                best, n_best = path, n
        return best, n_best

    def load(self, path: Path) -> tuple[np.ndarray, memoryview] | None:
        """The file's tokens and state, verified; None when it is gone or refused (one line)."""
        try:
            tokens, state = entry.read_verified(path, self.key, self.cap_bytes, self.max_tokens)
        except FileNotFoundError:
            self.forget(path)  # evicted by another process: a miss, nothing to say
            return None
        except entry.Refused as e:
            self._refuse(path, str(e))
            return None
        except OSError as e:
            self._refuse(path, e.strerror or str(e))
            return None
        with contextlib.suppress(OSError):
            os.utime(path)  # used: the last to be evicted
        return tokens, state

    def save(self, tokens: Sequence[int], state: bytearray) -> bool:
        """Write this state of `tokens` soon, off this thread; False when it cannot be (too large,
        or PENDING states already wait for the disk)."""
        toks = np.asarray(tokens, np.int32)
        if len(state) > self.cap_bytes:
            return False
        name = hashlib.sha256(memoryview(toks).cast("B")).hexdigest()[:16]
        path = self.folder / f"{self.prefix}-{name}{SUFFIX}"
        with self._lock:  # counted as there at once: the next prompt does not save it again
            self._index[path] = toks.tolist()
        if not self._writer.put((path, toks, state)):
            self.forget(path)
            return False
        return True

    def flush(self, timeout: float | None = None) -> bool:
        return self._writer.flush(timeout)

    def forget(self, path: Path) -> None:
        with self._lock:
            self._index.pop(path, None)

    def _refuse(self, path: Path, reason: str) -> None:
        self.forget(path)
        with contextlib.suppress(OSError):
            path.unlink()
        self._log(f"prompt cache: {path.name} refused ({reason}); removed, the prompt is evaluated instead")

    def _write(self, batch: list[tuple[Path, np.ndarray, bytearray]]) -> None:
        for path, toks, state in batch:
            try:
                with atomic_output(path) as tmp:
                    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE)
                    with os.fdopen(fd, "wb") as f:
                        for part in entry.chunks(self.key, toks, state):
                            f.write(part)
            except (OSError, LocalspecError) as e:
                self.forget(path)
                self._log(
                    f"warning: prompt cache: could not save to {self.folder} ({getattr(e, 'strerror', None) or e})"
                )
        evict(self.folder, self.cap_bytes)


def evict(folder: Path, cap_bytes: int) -> list[Path]:
    """Remove the least recently used cache files until the folder holds at most cap_bytes (and
    what writers that were killed left half-written)."""
    with _EVICTING:
        remove_dead_partials(folder, SUFFIX)
        files = []
        for path in folder.glob(f"*{SUFFIX}"):
            with contextlib.suppress(OSError):
                st = path.stat()
                files.append((st.st_mtime_ns, st.st_size, path))
        total = sum(size for _, size, _ in files)
        gone = []
        for _, size, path in sorted(files):
            if total <= cap_bytes:
                break
            with contextlib.suppress(OSError):
                path.unlink()
                gone.append(path)
            total -= size
    for store in list(_STORES):
        for path in gone:
            store.forget(path)
    return gone
