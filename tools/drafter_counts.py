"""How much of the tree a kind of drafter is spread over (issue 59's counts), read from the source:

mtp_files      modules whose code (not comments or docstrings) names MTP: an identifier or a
               string holding "mtp" (draft_mtp, MtpDrafter, load_mtp, "mtp", ...), and
               pyproject.toml where an entry point registers it
new_drafter    files a new kind of drafter touches: its own two (the backend's evaluator and the
               kind's module) plus every module outside them naming an existing kind in code (what
               a newcomer copies a branch into) - the MTP modules less the MTP kind's own files
special_cases  string constants naming a source ("lookup", "grammar", "mtp", "history") in
               draft_len/ and decode/record.py: a comparison or a count by name
seqstate_fields, seqplan_fields
               the dataclass fields of SeqState (decode/state.py) and SeqPlan (decode/seqplan.py)

python tools/drafter_counts.py [--list]
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "localspec"
SOURCE_NAMES = {"lookup", "grammar", "mtp", "history"}
# an MTP kind's own files (a new kind brings the same two of its own): everything else naming it
# would be edited again for the next kind
MTP_OWN = {"localspec/llama/mtp.py", "localspec/draft_kinds/mtp.py", "localspec/decode/sources/mtp.py"}


def _code_words(path: Path) -> list[tuple[int, str, bool]]:
    """(line, text, is a string) for every name and string constant of the module's code; docstrings
    (a string that is a whole statement) left out."""
    tree = ast.parse(path.read_text())
    docs = {
        id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)
    }
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs:
            out.append((n.lineno, n.value, True))
        for attr in ("id", "attr", "arg", "name", "asname", "module"):
            v = getattr(n, attr, None)
            if isinstance(v, str):
                out.append((getattr(n, "lineno", 0), v, False))
    return out


def _rel(p: Path) -> str:
    return p.relative_to(ROOT).as_posix()


def _registered_in_pyproject() -> bool:
    """Whether pyproject.toml's entry points name it (the registry's line)."""
    eps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"].get("entry-points", {})
    return any("mtp" in f"{k} {v}".lower() for group in eps.values() for k, v in group.items())


def mtp_files() -> list[str]:
    code = [_rel(p) for p in PKG.rglob("*.py") if any("mtp" in w.lower() for _, w, _ in _code_words(p))]
    return sorted(code + (["pyproject.toml"] if _registered_in_pyproject() else []))


def special_cases() -> list[str]:
    paths = sorted((PKG / "draft_len").glob("*.py")) + [PKG / "decode" / "record.py"]
    hits = []
    for p in paths:
        for line, w, is_str in _code_words(p):
            if is_str and w in SOURCE_NAMES:
                hits.append(f"{_rel(p)}:{line} {w!r}")
    return hits


def fields_of(path: Path, cls: str) -> list[str]:
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            return [
                s.target.id
                for s in node.body
                if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
            ]
    return []


def counts() -> dict[str, list[str]]:
    mtp = mtp_files()
    return {
        "mtp_files": mtp,
        "new_drafter": [
            "<its backend evaluator>",
            "<its kind module>",
            *(f for f in mtp if f not in MTP_OWN),
        ],
        "special_cases": special_cases(),
        "seqstate_fields": fields_of(PKG / "decode" / "state.py", "SeqState"),
        "seqplan_fields": fields_of(PKG / "decode" / "seqplan.py", "SeqPlan"),
    }


def main(argv: list[str]) -> None:
    for name, items in counts().items():
        print(f"{name}: {len(items)}")
        if "--list" in argv:
            for it in items:
                print(f"    {it}")


if __name__ == "__main__":
    main(sys.argv[1:])
