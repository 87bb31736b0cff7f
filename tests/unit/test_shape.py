"""The heart of the product stays readable without anyone watching (issue #47): the algorithm's rooms
(decode/, draft_len/) hold no function longer than a screen and no class with behaviour that grows
into a god object, and nothing in the package probes a backend object for an attribute by name - a
context declares what it can do as typed fields (localspec/evaluator.py)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "localspec"
# getattr/hasattr with a literal name is fine on what is not a backend object: a module or library
# (llama_cpp's version, a symbol a build may lack), an exception's errno text, a request body, the
# server's app state and engine (a test's stand-in has no close), a settings-like object, gguf's keys
NOT_BACKENDS = {
    "C",
    "lib",
    "constants",
    "session",
    "e",
    "body",
    "self._app.state",
    "engine",
    "s",
    "Keys.Tokenizer",
}


def _modules(*rooms: str) -> list[tuple[str, ast.Module]]:
    roots = [PACKAGE / r for r in rooms] if rooms else [PACKAGE]
    return [
        (str(p.relative_to(PACKAGE.parent)), ast.parse(p.read_text(), str(p)))
        for root in roots
        for p in sorted(root.rglob("*.py"))
    ]


def test_no_backend_object_is_probed_by_name():
    probes = []
    for path, tree in _modules():
        in_backend = path.startswith("localspec/llama/")  # where the backend objects are made
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
                continue
            if node.func.id not in ("getattr", "hasattr") or len(node.args) < 2:
                continue
            name = node.args[1]
            if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
                continue
            receiver = ast.unparse(node.args[0])
            if receiver in NOT_BACKENDS or (receiver == "self" and not in_backend):
                continue
            probes.append(f"{path}:{node.lineno} {node.func.id}({receiver}, {name.value!r})")
    assert not probes, "declare these as typed fields (localspec/evaluator.py) instead:\n" + "\n".join(probes)
