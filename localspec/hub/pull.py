"""`pull`: a preset (or two Hub repos) -> both models in the Hugging Face cache, checked, with a
pair.toml in models/NAME and a memory verdict for this machine.

GGUF repos are downloaded as they are (the file matching the quant); a repo with only safetensors is
fetched and converted by our converter (Q4_K_M target, Q8_0 draft). Sizes come from the Hub before
anything is downloaded, so a full disk is refused up front. A target that names its vision projector
(a preset's `mmproj`, or --mmproj) brings that file too, checked against the target like the pair.
"""

from __future__ import annotations

import dataclasses
import re
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from localspec import paths
from localspec.config.pair_toml import PAIR_TOML, write_pair_toml
from localspec.errors import LocalspecError
from localspec.gguf.compat import check_pair, pair_facts
from localspec.gguf.memory_fit import verdict
from localspec.gguf.memory_plan import Runtime, fmt_bytes, plan_pair, read_spec
from localspec.gguf.projector import ProjectorFacts, projector_for
from localspec.hub import fetch
from localspec.hub.presets import ModelRef, Preset
from localspec.hub.sizing import CTX_CAP, largest_fitting_ctx

Log = Callable[[str], None]
# (stage, done, total): the converter reports its passes; the front end draws them (cli.progress)
Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class Planned:
    """One model of the pair: a GGUF file to download, or a safetensors repo to convert."""

    role: str
    ref: ModelRef
    gguf: fetch.RemoteFile | None = None
    hf_bytes: int = 0  # safetensors repo: bytes to download before converting
    weights: tuple[str, ...] = ()  # safetensors repo: the weight files the converter reads
    weights_bytes: int = 0  # ... and their size, cached or not
    projectors: tuple[str, ...] = ()  # vision projectors the repo holds (a listed GGUF repo)

    @property
    def download_bytes(self) -> int:
        return self.gguf.missing_bytes if self.gguf else self.hf_bytes

    @property
    def disk_bytes(self) -> int:
        """Everything this model adds to the disk (the converted GGUF too)."""
        if self.gguf:
            return self.gguf.missing_bytes
        return self.hf_bytes + int(self.weights_bytes * fetch.CONVERTED_RATIO.get(self.ref.quant, 1.0))

    @property
    def scratch_bytes(self) -> int:
        """The converter's full-size f16/bf16 GGUF, written before it quantizes and removed after:
        counted at the checkpoint's size (exact for the bf16/f16 checkpoints the Hub holds, twice
        the truth for an f32 one)."""
        if self.gguf or self.ref.quant in ("f16", "bf16", "f32"):
            return 0
        return self.weights_bytes


@dataclass(frozen=True)
class PullResult:
    pair_dir: Path
    pair_toml: Path
    target: Path
    draft: Path
    compat: str
    verdict: str
    n_ctx: int | None
    mmproj: Path | None = None


def plan_model(ref: ModelRef, role: str) -> Planned:
    if ref.file:
        return Planned(role, ref, gguf=fetch.stat_file(ref, ref.file))
    files = fetch.repo_files(ref)
    name = fetch.pick_gguf(files, ref)
    if name is not None:
        mmprojs = tuple(sorted(f for f in files if f.lower().endswith(".gguf") and "mmproj" in f.lower()))
        ref = dataclasses.replace(ref, file=name)
        return Planned(role, ref, gguf=fetch.stat_file(ref, name), projectors=mmprojs)
    if not any(f.endswith(".safetensors") for f in files) or "config.json" not in files:
        raise LocalspecError(f"{ref.repo} holds neither a GGUF nor a safetensors checkpoint (config.json)")
    weights = fetch.weight_files(ref, files)
    # the cache may already hold part of it; the converter's output is counted in disk_bytes
    wanted = [f for f in files if f.endswith((".json", ".jinja", ".txt"))] + weights
    size = sum(files[f] or 0 for f in wanted if fetch.cached_path(ref, f) is None)
    return Planned(
        role, ref, hf_bytes=size, weights=tuple(weights), weights_bytes=sum(files[f] or 0 for f in weights)
    )


def pair_name(target: ModelRef, draft: ModelRef) -> str:
    stem = lambda r: re.sub(r"(?i)[-_.]?gguf$", "", r.repo.split("/")[-1])  # noqa: E731
    return f"{stem(target)}+{stem(draft)}".lower()


def pull_pair(
    target: ModelRef,
    draft: ModelRef,
    *,
    name: str,
    out_dir: Path | None = None,
    preset: Preset | None = None,
    log: Log = print,
    progress: Progress | None = None,
) -> PullResult:
    out_dir = Path(out_dir) if out_dir else paths.models_dir() / name
    plans = [plan_model(target, "target"), plan_model(draft, "draft")]
    projector = target.projector()
    if projector is not None:
        plans.append(_plan_projector(projector))
    elif plans[0].projectors:
        log(
            f"note     {target.repo} also holds a vision projector ({', '.join(plans[0].projectors)}); "
            "pull with --mmproj FILE to take it, for images"
        )
    for p in plans:
        _note_checksum(p, log)
    todo = sum(p.download_bytes for p in plans)
    fetch.check_disk(todo, fetch.cache_dir(), name)
    if any(p.gguf is None for p in plans):  # converted models land in out_dir, one at a time
        need = sum(p.disk_bytes for p in plans) + max(p.scratch_bytes for p in plans)
        fetch.check_disk(need, out_dir, name, doing="with the conversion's full-size intermediate")
    log(f"pull     {name}: {fmt_bytes(todo)} to download" if todo else f"pull     {name}: all files cached")
    early = _check_before_download(plans, name, preset, log)
    files = {p.role: _materialize(p, out_dir, log, progress) for p in plans}
    kept = "the files stay in the Hugging Face cache, no pair.toml was written"
    report = check_pair(files["target"], files["draft"])
    if not report.ok:
        raise LocalspecError(
            f"{name}: the downloaded files cannot be paired ({'; '.join(report.problems)}); {kept}"
        )
    facts = _check_projector(plans, files, name, kept)
    verdict, n_ctx = early or local_verdict(files["target"], files["draft"], preset, facts)
    runtime: dict[str, Any] = {"draft_max": "auto", **(preset.runtime if preset else {})}
    if n_ctx:
        runtime["n_ctx"] = n_ctx
    info = {
        "source": "hub",
        "preset": preset.name if preset else "",
        "target_repo": plans[0].ref.repo,
        "target_file": plans[0].ref.file or "(converted)",
        "draft_repo": plans[1].ref.repo,
        "draft_file": plans[1].ref.file or "(converted)",
        **({"mmproj_file": projector.file} if projector else {}),
    }

    toml = write_pair_toml(
        out_dir,
        files["target"],
        files["draft"],
        info={**pair_facts(files["target"], files["draft"]), **info},
        runtime=runtime,
        mmproj=files.get("mmproj"),
    )
    log(f"check    {report.message}")
    if early is None or not todo:
        log(f"memory   {verdict}")
    log(f"done     {toml}")
    return PullResult(
        out_dir, toml, files["target"], files["draft"], report.message, verdict, n_ctx, files.get("mmproj")
    )


def _plan_projector(ref: ModelRef) -> Planned:
    try:
        return Planned("mmproj", ref, gguf=fetch.stat_file(ref, str(ref.file)))
    except LocalspecError as e:
        raise LocalspecError(f"{e} (--no-mmproj pulls the pair without its projector)") from None


def _check_projector(
    plans: list[Planned], files: Mapping[str, Path | None], name: str, then: str
) -> ProjectorFacts | None:
    """The projector against the target it is to feed (a header: `files` may be Range-read copies):
    one line naming its Hub file, what became of the pull (`then`) and how to skip it."""
    plan = next((p for p in plans if p.role == "mmproj"), None)
    mmproj, target = files.get("mmproj"), files["target"]
    if plan is None or mmproj is None or target is None:
        return None
    try:
        return projector_for(mmproj, target)
    except LocalspecError as e:
        why = str(e).replace(str(mmproj), plan.ref.label)
        raise LocalspecError(
            f"{name}: {why}; {then} (--no-mmproj pulls the pair without its projector)"
        ) from None


def _check_before_download(
    plans: list[Planned], name: str, preset: Preset | None, log: Log
) -> tuple[str, int | None] | None:
    """From the GGUF headers alone (a Range request for the first MBs of each file), before
    gigabytes move: refuse a pair whose vocabularies differ or a projector made for another model,
    and tell what this machine's GPU will hold. None when a header cannot be had (a converted model,
    a server without ranges, a file cut short: each is judged once downloaded)."""
    if any(p.gguf is None for p in plans):
        return None
    with tempfile.TemporaryDirectory(prefix="localspec-hdr-") as scratch:
        heads = {p.role: fetch.remote_header(p.gguf, Path(scratch)) for p in plans if p.gguf}
        target, draft = heads["target"], heads["draft"]
        if target is None or draft is None:
            return None
        report = check_pair(target, draft)
        if not report.ok:
            raise LocalspecError(
                f"{name}: these files cannot be paired ({'; '.join(report.problems)}); nothing was downloaded"
            )
        facts = _check_projector(plans, heads, name, "nothing was downloaded")
        if facts is None and "mmproj" in heads:
            return None
        verdict = local_verdict(target, draft, preset, facts)
    if any(p.download_bytes for p in plans):
        log(f"memory   {verdict[0]}")
    return verdict


def _note_checksum(p: Planned, log: Log) -> None:
    """The preset's sha256 against the one the Hub reports (free: the LFS etag is the sha256)."""
    got, want = (p.gguf.sha256 if p.gguf else None), p.ref.sha256
    if got and want and got != want:
        log(
            f"note     {p.ref.repo}:{p.ref.file} changed on the Hub since the preset was written "
            f"(sha256 {got[:12]}..., preset {want[:12]}...)"
        )


def _materialize(p: Planned, out_dir: Path, log: Log, progress: Progress | None) -> Path:
    if p.gguf is not None:
        path = p.gguf.cached or fetch.download(p.gguf)
        log(f"{p.role:<8} {p.gguf.repo}:{p.gguf.file} -> {path}")
        return path
    from localspec.convert.hf import convert_hf  # noqa: PLC0415

    folder = fetch.snapshot(p.ref, p.weights)
    out_dir.mkdir(parents=True, exist_ok=True)
    dst = out_dir / f"{p.role}-{p.ref.quant}.gguf"
    return convert_hf(folder, dst, out_type=p.ref.quant, log=log, progress=progress)


def local_verdict(
    target: Path, draft: Path, preset: Preset | None, projector: ProjectorFacts | None = None
) -> tuple[str, int | None]:
    """What this machine can do with the pair (doctor's plan, the projector counted), and the n_ctx
    to store for it: the largest that fits the GPU fully (None on a CPU-only machine, or when not
    even 1024 fits)."""
    from localspec import llama  # noqa: PLC0415 - llama.cpp only for the device list

    t, d = read_spec(target), read_spec(draft)
    devices = llama.devices()
    acc = [x for x in devices if x.kind == "gpu"] or [x for x in devices if x.kind == "igpu"]
    if not acc:
        cpu = next((x for x in devices if x.kind == "cpu"), None)
        need = plan_pair(t, d, Runtime(), projector).cpu_bytes
        free = f", {fmt_bytes(cpu.free_bytes)} free" if cpu and cpu.free_bytes else ""
        return (
            f"no GPU offload in this build: CPU run needs {fmt_bytes(need)} of RAM at n_ctx 4096{free}",
            None,
        )
    best = max(acc, key=lambda x: x.free_bytes)
    max_ctx = min(CTX_CAP, int((preset.target.arch if preset else {}).get("n_ctx_train", CTX_CAP)))
    n_ctx = largest_fitting_ctx(t, d, best.free_bytes, max_ctx=max_ctx, projector=projector) or None
    v = verdict(
        plan_pair(t, d, Runtime(n_ctx=n_ctx or 4096), projector),
        best.free_bytes,
        f"{best.name} ({best.description})",
    )
    head = f"n_ctx {n_ctx} stored in pair.toml; " if n_ctx else ""
    return head + v.message(), n_ctx


def pull_preset(
    preset: Preset,
    *,
    out_dir: Path | None = None,
    log: Log = print,
    progress: Progress | None = None,
    mmproj: bool = True,
) -> PullResult:
    """`mmproj=False`: without the vision projector the preset names."""
    return pull_pair(
        preset.target if mmproj else dataclasses.replace(preset.target, mmproj=None),
        preset.draft,
        name=preset.name,
        out_dir=out_dir,
        preset=preset,
        log=log,
        progress=progress,
    )


def pull_one(ref: ModelRef, *, log: Log = print) -> Path:
    """A single model (no pair): download the GGUF, or fetch a safetensors repo for the converter."""
    p = plan_model(ref, "model")
    fetch.check_disk(p.download_bytes, fetch.cache_dir(), ref.label)
    if p.gguf is None:
        folder = fetch.snapshot(ref, p.weights)
        log(f"done     {folder} (safetensors; convert it with `localspec convert` or pair it)")
        return folder
    path = p.gguf.cached or fetch.download(p.gguf)
    log(f"done     {path}")
    return path


def is_pulled(name: str) -> Path | None:
    d = paths.models_dir() / name
    return d if (d / PAIR_TOML).exists() else None
