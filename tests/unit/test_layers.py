"""The package's layout stays true without anyone watching: read every module's imports (function-
local ones too) and fail on an import cycle, on an import against the layer order documented in
docs/architecture.md, on `llama_cpp` imported outside the llama.cpp boundary, on server/
reaching past the model facade, on serving/ reaching past the engine's, and on a dialect importing
another."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "localspec"

# bottom to top; a module may import its own room and any room below it, never one above or beside it
LAYERS: list[tuple[str, ...]] = [
    (
        "errors",
        "paths",
        "text_input",
        "files",
        "deferred",
        "data",
        "top_logits",
        "images",
        "evaluator",
        "chunk_reuse",
    ),
    ("config",),
    ("gguf",),
    ("llama",),
    ("constrain", "draft_len"),
    ("decode",),
    ("draft_kinds",),
    ("chat",),
    ("telemetry",),
    ("engine",),
    ("serving",),
    ("convert",),
    ("hub",),
    ("bench", "server"),
    ("cli",),
    ("__main__",),
]
LEAVES = set(LAYERS[0])  # leaves import no other room (other leaves aside)
RANK = {room: i for i, rooms in enumerate(LAYERS) for room in rooms}


def _modules() -> dict[str, Path]:
    out = {}
    for p in PACKAGE.rglob("*.py"):
        parts = p.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = p
    return out


# the compiled row kernels (decode/_kernels.c): C that imports nothing of localspec, so any layer may
# call them (llama/interrupt.py takes its abort callback from there)
COMPILED = {"localspec.decode._kernels"}


def _imports(name: str, path: Path) -> set[str]:
    is_pkg = path.name == "__init__.py"
    base = name.split(".") if is_pkg else name.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level:
                mod = ".".join(base[: len(base) - node.level + 1] + ([mod] if mod else []))
            names = {f"{mod}.{a.name}" for a in node.names}  # `from pkg import module`
            found |= names if names <= COMPILED else {mod, *names}
    return found


MODULES = _modules()


def _ancestors(name: str) -> set[str]:
    parts = name.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts))}


# a module's own packages are always imported before it: not an edge
GRAPH = {
    name: {m for m in _imports(name, path) if m in MODULES and m != name and m not in _ancestors(name)}
    for name, path in MODULES.items()
}


def _room(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def test_every_room_is_placed_in_a_layer():
    rooms = {_room(m) for m in MODULES} - {None}
    assert rooms <= set(RANK), f"rooms with no layer: {sorted(rooms - set(RANK))}"


def test_no_import_points_up_or_sideways():
    bad = []
    for name, deps in GRAPH.items():
        room = _room(name)
        if room is None:
            continue
        for dep in deps - COMPILED:
            other = _room(dep)
            if other is None or other == room:
                continue
            if room in LEAVES and other in LEAVES:
                continue
            if RANK[other] >= RANK[room]:
                bad.append(f"{name} -> {dep}")
    assert not bad, "imports against the layer order:\n" + "\n".join(sorted(bad))


def test_no_import_cycle():
    state: dict[str, int] = {}  # 1: on the path, 2: done
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for d in sorted(GRAPH[m]):
            if state.get(d) == 1:
                return stack[stack.index(d) :] + [d]
            if d not in state and (cycle := visit(d)):
                return cycle
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(GRAPH):
        if m not in state and (cycle := visit(m)):
            pytest.fail("import cycle: " + " -> ".join(cycle))


def test_llama_cpp_is_imported_only_in_the_boundary():
    outside = [
        name
        for name, path in MODULES.items()
        if _room(name) != "llama" and any(m.split(".")[0] == "llama_cpp" for m in _imports(name, path))
    ]
    assert not outside, f"llama_cpp imported outside localspec/llama: {outside}"


def test_the_server_reaches_the_model_only_through_the_facade():
    """Routes and dialects use localspec.serving (the model facade), never llama.cpp's wrappers or
    the Engine itself: a dialect is a parse and a render, never a second path into the engine."""
    bad = sorted(
        f"{name} -> {dep}"
        for name, deps in GRAPH.items()
        if _room(name) == "server"
        for dep in deps
        if _room(dep) in ("llama", "engine")
    )
    assert not bad, "server/ imports below the facade:\n" + "\n".join(bad)


def test_settings_reach_no_front_end():
    seen, todo = set(), ["localspec.config.settings"]
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo += GRAPH[m]
    reached = sorted(m for m in seen if _room(m) in ("hub", "convert", "cli", "server", "bench"))
    assert not reached, f"Settings imports {reached}"


# the loaded pair's handles an Engine keeps for the tools below the facade (cli, bench, tests)
PAIR_HANDLES = {"target", "target_ctx", "draft", "draft_ctx", "projector", "decision", "placement"}


def _engine_handles_read(path: Path) -> list[str]:
    """`engine.target` and the like: a pair handle read off anything named engine."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Attribute) and node.attr in PAIR_HANDLES:
            owner = node.value
            name = owner.id if isinstance(owner, ast.Name) else getattr(owner, "attr", "")
            if name == "engine":
                out.append(f"{path.name}:{node.lineno} engine.{node.attr}")
    return out


def test_serving_reaches_the_model_only_through_the_engine_facade():
    """serving/ knows the model by the engine's typed facade (engine/facade.py: its text API and
    its facts), never by llama.cpp's wrappers: no import of localspec.llama, no read of the pair's
    handles (`engine.target`, `engine.projector`, ...)."""
    bad = sorted(
        f"{name} -> {dep}"
        for name, deps in GRAPH.items()
        if _room(name) == "serving"
        for dep in deps
        if _room(dep) == "llama"
    )
    bad += [
        hit
        for name, path in MODULES.items()
        if _room(name) == "serving"
        for hit in _engine_handles_read(path)
    ]
    assert not bad, "serving/ reaches past the engine's facade:\n" + "\n".join(sorted(bad))


def _dialect(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 3 and parts[1] == "server" else None  # a package under server/


def test_no_dialect_imports_another():
    """A dialect's package (server/openai, server/anthropic, server/ollama) imports its own modules
    and the server's common ones, never another dialect's: what they share lives in server/."""
    bad = sorted(
        f"{name} -> {dep}"
        for name, deps in GRAPH.items()
        if (mine := _dialect(name)) is not None
        for dep in deps
        if (other := _dialect(dep)) is not None and other != mine
    )
    assert not bad, "a dialect imports another:\n" + "\n".join(bad)
