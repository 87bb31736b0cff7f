"""What a router serves: every model under a models folder, by a short, stable name.

- a folder with a pair.toml: the pair (pulled presets and built pairs are such folders);
- a folder holding a single GGUF (a projector `mmproj*` aside), or a top-level `NAME.gguf`: that
  model served alone, drafting with its MTP head when it has one, else with lookup drafts.

Names are the folder's name, or the file's stem. The folder's files are untrusted: nothing here
opens a model; a pair.toml is read by `Settings.load` (which keeps only what a pair may set) when
the model is first wanted, and a bad one makes that model an `error`, not the folder unreadable."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from localspec import draft_kinds
from localspec.config.pair_toml import PAIR_TOML
from localspec.config.settings import Settings
from localspec.engine import placement
from localspec.errors import LocalspecError
from localspec.gguf.file import read_header
from localspec.gguf.pooling import is_embedding_model
from localspec.serving.facade import ModelCard

GGUF = ".gguf"


@dataclass(frozen=True)
class Entry:
    name: str
    path: Path  # the pair's folder, or the GGUF
    kind: str  # pair | gguf


# the server's settings for one model: Settings.load with the router's flags and config, plus these
MakeSettings = Callable[..., Settings]


def scan(root: Path) -> tuple[list[Entry], list[str]]:
    """The models under `root`, sorted by name, and a line for each thing skipped and why."""
    root = Path(root)
    if not root.is_dir():
        raise LocalspecError(
            f"the models folder {root} does not exist (pass --models-dir DIR, or set LOCALSPEC_MODELS)"
        )
    found: dict[str, Entry] = {}
    skipped: list[str] = []
    for p in sorted(root.iterdir(), key=lambda p: (not p.is_dir(), p.name)):  # folders first
        entry, why = _entry(p)
        if entry is None:
            if why:
                skipped.append(f"{p}: {why}")
        elif entry.name in found:
            skipped.append(f"{p}: the name {entry.name!r} is taken by {found[entry.name].path}")
        else:
            found[entry.name] = entry
    return sorted(found.values(), key=lambda e: e.name), skipped


def _entry(p: Path) -> tuple[Entry | None, str]:
    if p.name.startswith(".") or not p.name.isprintable():
        return None, ""
    try:
        p.name.encode("utf-8")
    except UnicodeEncodeError:  # a name that is not text (undecodable bytes on disk)
        return None, "its name is not valid UTF-8"
    if p.is_dir():
        if (p / PAIR_TOML).is_file():
            return Entry(p.name, p, "pair"), ""
        ggufs = [f for f in p.glob(f"*{GGUF}") if f.is_file() and not f.name.startswith("mmproj")]
        if len(ggufs) == 1:
            return Entry(p.name, ggufs[0], "gguf"), ""
        if len(ggufs) > 1:
            return None, f"{len(ggufs)} GGUF files and no {PAIR_TOML} (which is the target?)"
        return None, ""
    if p.suffix.lower() == GGUF and p.is_file() and not p.name.startswith("mmproj"):
        return Entry(p.stem, p, "gguf"), ""
    return None, ""


def entry_settings(entry: Entry, make: MakeSettings) -> Settings:
    """The settings one model is served with (reads its header or pair.toml: off the event loop)."""
    if entry.kind == "pair":
        return make(pair=entry.path)
    kind = draft_kinds.in_target(entry.path)  # raises LocalspecError for a bad header
    if is_embedding_model(entry.path):  # its one context is the embeddings one (engine/embed_only.py)
        s = make(target=entry.path)
        return s.replace(n_ctx=max(s.embed_ctx, 8), parallel=1)  # what its plan and card count
    return make(target=entry.path, draft_source=kind.name) if kind is not None else make(target=entry.path)


@dataclass(frozen=True)
class Facts:
    """What a model is before it loads, from its headers: how it is served and what it needs."""

    settings: Settings
    card: ModelCard  # as /v1/models shows it while it is not loaded
    cpu_bytes: int  # in system memory, run on the CPU (its files mapped, KV cache, compute)
    file_bytes: int  # of which its files (mapped: the kernel counts them as available memory)
    device_bytes: int  # on the accelerator, fully offloaded


def measure(entry: Entry, make: MakeSettings) -> Facts:
    """The model's settings, memory plan and card (reads headers: off the event loop); a bad
    pair.toml or GGUF raises LocalspecError with the reason."""
    s = entry_settings(entry, make)
    plan = placement.plan_for(s)
    h = read_header(s.target)
    spec = plan.target.spec
    card = ModelCard(
        name=entry.name, created=int(entry.path.stat().st_mtime), n_ctx=s.n_ctx,
        n_ctx_train=int(h.get("{arch}.context_length", 0) or 0), n_vocab=spec.n_vocab,
        n_params=spec.n_params, size=spec.file_weights_bytes, target=Path(s.target).name,
        draft=draft_kinds.label(s),
        parallel=s.parallel, chat_template=tpl if isinstance(tpl := h.get("tokenizer.chat_template"), str) else None,
        n_embd=spec.n_embd, arch=h.arch, embeds_only=is_embedding_model(h), vision=s.mmproj is not None,
        fim=all(h.get(f"tokenizer.ggml.fim_{k}_token_id") is not None for k in ("pre", "suf", "mid")),
    )  # fmt: skip
    files = sum(m.spec.file_weights_bytes for m in plan.models)
    return Facts(s, card, plan.cpu_bytes, files, plan.device_bytes)
