"""Hub access through huggingface_hub: file sizes before downloading (HEAD / repo listing), the
disk-space check, the download itself (resumable, cached, with its progress bars) and one clear line
for every way that can fail."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from localspec.errors import LocalspecError
from localspec.gguf.file import read_header
from localspec.gguf.memory_plan import fmt_bytes
from localspec.hub.presets import ModelRef

T = TypeVar("T")
DISK_MARGIN = 256 << 20  # keep this much free beyond the files themselves
HEADER_PROBE, HEADER_MAX = 8 << 20, 128 << 20  # a GGUF header (vocabulary included) is a few MB
# a converted GGUF's size relative to its bf16/f16 safetensors, per output quant (bits per weight / 16)
CONVERTED_RATIO = {"q8_0": 8.5 / 16, "q4_k_m": 4.85 / 16, "f16": 1.0, "bf16": 1.0}
HF_SIDE_FILES = ("*.json", "*.jinja", "*.txt")  # config, tokenizer, template: what the converter reads
INDEX_JSON = "model.safetensors.index.json"  # a sharded checkpoint's table of contents


@dataclass(frozen=True)
class RemoteFile:
    repo: str
    file: str
    revision: str | None
    size: int | None  # bytes, from the Hub's metadata (None: unknown)
    sha256: str | None  # the LFS sha256 the Hub reports as X-Linked-Etag (None for small git files)
    cached: Path | None  # already complete in the Hugging Face cache

    @property
    def missing_bytes(self) -> int:
        return 0 if self.cached else (self.size or 0)


def offline() -> bool:
    from huggingface_hub import constants  # noqa: PLC0415

    is_offline = getattr(constants, "is_offline_mode", None)
    return bool(is_offline() if is_offline else constants.HF_HUB_OFFLINE)


def cache_dir() -> Path:
    from huggingface_hub import constants  # noqa: PLC0415

    return Path(constants.HF_HUB_CACHE)


def _endpoint() -> str:
    from huggingface_hub import constants  # noqa: PLC0415

    return constants.ENDPOINT


def hub_call(what: str, fn: Callable[[], T]) -> T:
    """Run a huggingface_hub call; turn its exceptions into one line saying what to do."""
    from huggingface_hub import utils  # noqa: PLC0415

    try:
        return fn()
    except utils.GatedRepoError:
        raise LocalspecError(
            f"{what}: the repo is gated; accept its license on the Hub and log in (`hf auth login` or HF_TOKEN)"
        ) from None
    except utils.RepositoryNotFoundError:
        raise LocalspecError(
            f"{what}: no such repo on {_endpoint()} (or it is private: log in with `hf auth login` or HF_TOKEN)"
        ) from None
    except utils.RevisionNotFoundError:
        raise LocalspecError(f"{what}: no such revision") from None
    except (utils.OfflineModeIsEnabled, utils.LocalEntryNotFoundError):
        if offline():
            raise LocalspecError(
                f"{what}: offline (HF_HUB_OFFLINE=1) and not in the Hugging Face cache ({cache_dir()}); "
                "pull it once while online, or unset HF_HUB_OFFLINE"
            ) from None
        raise LocalspecError(
            f"{what}: cannot reach {_endpoint()} and nothing is cached; check the network "
            "(a rerun resumes: finished files are kept in the cache)"
        ) from None
    except utils.EntryNotFoundError:
        raise LocalspecError(f"{what}: no such file in the repo") from None
    except OSError as e:
        if isinstance(e, (FileNotFoundError, PermissionError)) and e.filename:
            raise
        raise LocalspecError(
            f"{what}: download failed ({type(e).__name__}: {_first_line(e)}); rerun to continue "
            "(finished files are kept in the Hugging Face cache, no partial file is left as finished)"
        ) from None
    except Exception as e:  # httpx errors (connection refused, timeouts) and HTTP errors
        if type(e).__module__.split(".")[0] in ("httpx", "httpx2", "requests", "urllib3", "huggingface_hub"):
            raise LocalspecError(
                f"{what}: cannot download from {_endpoint()} ({type(e).__name__}: {_first_line(e)}); "
                "check the network, or set HF_HUB_OFFLINE=1 to use cached files only"
            ) from None
        raise


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [""])[0][:200]


def cached_path(ref: ModelRef, file: str) -> Path | None:
    from huggingface_hub import try_to_load_from_cache  # noqa: PLC0415

    got = try_to_load_from_cache(ref.repo, file, revision=ref.revision)
    return Path(got) if isinstance(got, str) and Path(got).exists() else None


def repo_files(ref: ModelRef) -> dict[str, int | None]:
    """File name -> size for a repo (GET /api/models/{repo}/revision/{rev}?blobs=true); offline,
    the files of its snapshot in the cache."""
    from huggingface_hub import HfApi, snapshot_download  # noqa: PLC0415

    if offline():
        try:
            folder = Path(snapshot_download(ref.repo, revision=ref.revision, local_files_only=True))
        except Exception:  # noqa: BLE001 - whatever the reason, nothing usable is cached
            raise LocalspecError(
                f"{ref.repo}: offline (HF_HUB_OFFLINE=1) and not in the Hugging Face cache ({cache_dir()}); "
                "pull it once while online, or unset HF_HUB_OFFLINE"
            ) from None
        return {str(f.relative_to(folder)): f.stat().st_size for f in folder.rglob("*") if f.is_file()}

    info = hub_call(
        ref.repo, lambda: HfApi().model_info(ref.repo, revision=ref.revision, files_metadata=True)
    )
    return {s.rfilename: (s.lfs.size if s.lfs else s.size) for s in info.siblings or []}


def pick_gguf(files: dict[str, Any], ref: ModelRef) -> str | None:
    """The one GGUF of `ref.quant` in a repo listing; None when the repo holds no GGUF at all."""
    ggufs = [f for f in files if f.lower().endswith(".gguf") and "mmproj" not in f.lower()]
    if not ggufs:
        return None
    quant = ref.quant.lower()
    hits = [f for f in ggufs if quant in Path(f).name.lower()]
    whole = [f for f in hits if "-of-0" not in f]
    if len(whole) == 1:
        return whole[0]
    if hits and not whole:
        raise LocalspecError(
            f"{ref.repo}: its {quant} GGUF is split into parts ({hits[0]}, ...), not supported"
        )
    choices = ", ".join(sorted(ggufs)[:8])
    if not hits:
        raise LocalspecError(f"{ref.repo} has no {quant} GGUF; pick one with {ref.repo}:FILE from: {choices}")
    raise LocalspecError(
        f"{ref.repo} has several {quant} GGUFs; pick one with {ref.repo}:FILE from: {choices}"
    )


def stat_file(ref: ModelRef, file: str) -> RemoteFile:
    """Size and sha256 of one file from a HEAD request (GET-free), or from the cache when offline."""
    cached = cached_path(ref, file)
    if offline():
        if cached is None:
            raise LocalspecError(
                f"{ref.repo}:{file}: offline (HF_HUB_OFFLINE=1) and not in the Hugging Face cache "
                f"({cache_dir()}); pull it once while online, or unset HF_HUB_OFFLINE"
            )
        return RemoteFile(ref.repo, file, ref.revision, cached.stat().st_size, None, cached)
    from huggingface_hub import get_hf_file_metadata, hf_hub_url  # noqa: PLC0415

    url = hf_hub_url(ref.repo, file, revision=ref.revision)
    meta = hub_call(f"{ref.repo}:{file}", lambda: get_hf_file_metadata(url))
    etag = (meta.etag or "").strip('"')
    sha = etag if len(etag) == 64 else None
    # the cached copy counts only if it is the file the Hub serves now (blob name = etag)
    if cached is not None and etag and cached.resolve().name != etag:
        cached = None
    return RemoteFile(ref.repo, file, ref.revision, meta.size, sha, cached)


def free_disk_bytes(path: Path) -> int:
    path = Path(path)
    while not path.exists():
        path = path.parent
    return shutil.disk_usage(path).free


def check_disk(need: int, where: Path, what: str, *, doing: str = "to download") -> None:
    """Refuse before downloading when `where` has less than `need` (+ a margin) free."""
    if need <= 0:
        return
    free = free_disk_bytes(where)
    if free < need + DISK_MARGIN:
        raise LocalspecError(
            f"not enough disk space for {what}: {fmt_bytes(need)} {doing} (+{fmt_bytes(DISK_MARGIN)} "
            f"margin), {fmt_bytes(free)} free on {where}; free some space or set HF_HOME to a bigger disk"
        )


def weight_files(ref: ModelRef, files: dict[str, Any]) -> list[str]:
    """The safetensors files the converter reads (convert.safetensors_io.Checkpoint): the shards
    the index lists when there is one - a repo may also hold consolidated.safetensors, the same
    weights in another layout, which would double the download - else every *.safetensors."""
    if INDEX_JSON not in files:
        return sorted(f for f in files if f.endswith(".safetensors"))
    from huggingface_hub import hf_hub_download  # noqa: PLC0415

    path = hub_call(
        f"{ref.repo}:{INDEX_JSON}", lambda: hf_hub_download(ref.repo, INDEX_JSON, revision=ref.revision)
    )
    try:
        shards = sorted(set(json.loads(Path(path).read_text())["weight_map"].values()))
    except (ValueError, KeyError, TypeError, AttributeError):
        raise LocalspecError(f"{ref.repo}: its {INDEX_JSON} is corrupt (no weight_map)") from None
    missing = [f for f in shards if f not in files]
    if missing or not shards:
        raise LocalspecError(f"{ref.repo}: {INDEX_JSON} lists {missing or 'no files'}, not in the repo")
    return shards


def download(f: RemoteFile) -> Path:
    """hf_hub_download: resumes an interrupted transfer with a Range request, keeps the cache layout,
    uses the stored token, shows its progress bar."""
    from huggingface_hub import hf_hub_download  # noqa: PLC0415

    got = hub_call(f"{f.repo}:{f.file}", lambda: hf_hub_download(f.repo, f.file, revision=f.revision))
    return Path(got)


def snapshot(ref: ModelRef, weights: list[str] | tuple[str, ...]) -> Path:
    """A safetensors repo's files (config, tokenizer, the `weights` files) in the cache, for the
    converter."""
    from huggingface_hub import snapshot_download  # noqa: PLC0415

    patterns = [*HF_SIDE_FILES, *weights]
    got = hub_call(
        ref.repo, lambda: snapshot_download(ref.repo, revision=ref.revision, allow_patterns=patterns)
    )
    return Path(got)


def remote_header(f: RemoteFile, scratch: Path) -> Path | None:
    """The first megabytes of a remote GGUF (Range requests, doubling until the header parses), as a
    file the header readers accept, so the pair can be checked before gigabytes move. None when the
    server does not answer ranges; the checks then run after the download."""
    if f.cached is not None:
        return f.cached
    from huggingface_hub import hf_hub_url  # noqa: PLC0415

    url = hf_hub_url(f.repo, f.file, revision=f.revision)
    dst = Path(scratch) / f"{f.repo.replace('/', '--')}--{Path(f.file).name}"
    n = HEADER_PROBE
    while n <= HEADER_MAX:
        data = _range(url, n)
        if data is None:
            return None
        dst.write_bytes(data)
        if f.size and f.size > len(data):  # sparse up to the remote size: the readers' length check
            os.truncate(dst, f.size)  # passes, and no disk is used for the bytes not fetched
        try:
            if read_header(dst).data_offset <= len(data):  # parsed from fetched bytes, not the zeros
                return dst
        except LocalspecError:
            pass
        if len(data) < n:  # the whole file, and still no header: not ours to judge here
            return None
        n *= 2
    return None


def _range(url: str, n: int) -> bytes | None:
    """The first n bytes of url through huggingface_hub's session (its auth headers, its redirects),
    read as a stream so a server that ignores Range does not send us the whole file."""
    from huggingface_hub.utils import build_hf_headers, get_session  # noqa: PLC0415

    headers = {**build_hf_headers(), "Range": f"bytes=0-{n - 1}"}
    session = get_session()
    out = bytearray()
    try:
        if hasattr(session, "stream"):  # httpx (huggingface_hub >= 1.0)
            with session.stream("GET", url, headers=headers) as r:
                if r.status_code not in (200, 206):
                    return None
                for chunk in r.iter_bytes():
                    out += chunk
                    if len(out) >= n:
                        break
        else:  # requests (huggingface_hub < 1.0)
            with session.get(url, headers=headers, stream=True) as r:
                if r.status_code not in (200, 206):
                    return None
                for chunk in r.iter_content(1 << 20):
                    out += chunk
                    if len(out) >= n:
                        break
    except Exception:  # noqa: BLE001 - no early check then; the download reports real errors
        return None
    return bytes(out[:n])
