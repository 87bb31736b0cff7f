"""`localspec pair`: two sources -> a quantized target, a quantized draft, a vocabulary check, pair.toml."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from gguf import LlamaFileType

from localspec.config.pair_toml import write_pair_toml
from localspec.convert.hf import Progress, convert_hf
from localspec.convert.quant import quantize_file
from localspec.errors import LocalspecError
from localspec.files import copy_atomic
from localspec.gguf.compat import check_pair, pair_facts
from localspec.gguf.file import GGUF_MAGIC, read_header
from localspec.gguf.projector import DRAFT_NEEDS_TARGET, given_projectors, projector_facts, projector_for

RUNTIME = {"draft_max": "auto"}  # recommended settings stored with every pair


def is_gguf(src: str | Path) -> bool:
    p = Path(src)
    if not p.is_file():
        return False
    with p.open("rb") as f:
        return f.read(4) == GGUF_MAGIC


def quant_name(path: Path) -> str:
    """A GGUF's general.file_type as a quantize name (q4_k_m), "" when absent or unknown."""
    try:
        return (
            LlamaFileType(int(read_header(path).get("general.file_type", -1)))
            .name.removeprefix("MOSTLY_")
            .lower()
        )
    except ValueError:
        return ""


def materialize(
    src: str, dst: Path, qtype: str, *, role: str, log: Callable[[str], None], progress: Progress | None
) -> Path:
    """Produce `dst` at `qtype` from a GGUF file (requantized) or a Hugging Face folder / repo id."""
    if is_gguf(src) and quant_name(Path(src)) == qtype.lower():  # as shipped: requantizing only loses
        log(f"{role:<8} {src} -> {dst.name} (already {qtype})")
        return copy_atomic(src, dst)
    if is_gguf(src):
        log(f"{role:<8} {src} -> {dst.name}")
        qstage = None if progress is None else (lambda i, n, _name: progress(f"{role} {qtype}", i, n))
        return quantize_file(Path(src), dst, qtype, progress=qstage)
    if Path(src).is_file():
        raise LocalspecError(f"{src} is neither a GGUF file nor a Hugging Face folder")
    return convert_hf(src, dst, out_type=qtype, log=log, progress=progress)


def build_pair(
    target_src: str,
    draft_src: str,
    out_dir: Path,
    *,
    target_type: str = "q4_k_m",
    draft_type: str = "q8_0",
    log: Callable[[str], None] = print,
    progress: Progress | None = None,
    mmproj: Path | None = None,
    draft_mmproj: Path | None = None,
    info: dict[str, Any] | None = None,
) -> Path:
    """The pair in out_dir (`info`: more keys for pair.toml's [pair] table); `mmproj`, the target's vision projector (and `draft_mmproj`, the
    draft's), is checked against its model and linked (or copied) beside it."""
    out_dir = Path(out_dir)
    if draft_mmproj is not None and mmproj is None:
        raise LocalspecError(DRAFT_NEEDS_TARGET)
    for p, src, role in given_projectors(mmproj, draft_mmproj, target_src, draft_src):
        if is_gguf(src):  # a bad projector is refused before converting
            projector_for(p, src, role)
        else:  # a checkpoint's width is known once converted; the file's kind now
            projector_facts(p)
    if is_gguf(target_src) and is_gguf(draft_src):
        report = check_pair(target_src, draft_src)
        if not report.ok:
            raise LocalspecError(report.message)
    out_dir.mkdir(parents=True, exist_ok=True)
    draft = materialize(
        draft_src, out_dir / f"draft-{draft_type}.gguf", draft_type, role="draft", log=log, progress=progress
    )
    target = materialize(
        target_src,
        out_dir / f"target-{target_type}.gguf",
        target_type,
        role="target",
        log=log,
        progress=progress,
    )
    try:
        report = check_pair(target, draft)
        if not report.ok:
            raise LocalspecError(report.message)
        for p, model, role in given_projectors(mmproj, draft_mmproj, target, draft):  # converted: widths now
            projector_for(p, model, role)
    except LocalspecError:
        for f in (target, draft):
            f.unlink(missing_ok=True)
        raise
    if mmproj is not None:
        log(f"mmproj   {mmproj} -> {Path(mmproj).name}")
        mmproj = copy_atomic(mmproj, out_dir / Path(mmproj).name)
    if draft_mmproj is not None:  # both repos may name theirs mmproj-F16.gguf
        log(f"mmproj   {draft_mmproj} -> draft-{Path(draft_mmproj).name}")
        draft_mmproj = copy_atomic(draft_mmproj, out_dir / f"draft-{Path(draft_mmproj).name}")
    facts = {
        "stand_in": False,
        "target_quant": target_type,
        "draft_quant": draft_type,
        "target_source": str(target_src),
        "draft_source": str(draft_src),
    }
    toml = write_pair_toml(
        out_dir,
        target,
        draft,
        info={**pair_facts(target, draft), **facts, **(info or {})},
        runtime=RUNTIME,
        mmproj=mmproj,
        draft_mmproj=draft_mmproj,
    )
    log(f"done     {toml} ({report.message})")
    return toml
