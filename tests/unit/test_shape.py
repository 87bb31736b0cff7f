"""The heart of the product stays readable without anyone watching (issue #47): the algorithm's rooms
(decode/, draft_len/) hold no function longer than a screen and no class with behaviour that grows
into a god object, and nothing in the package probes a backend object for an attribute by name - a
context declares what it can do as typed fields (localspec/evaluator.py)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "localspec"
ROOMS = ("decode", "draft_len")
MAX_FUNCTION_LINES = 60
MAX_FIELDS = 15  # of a class with behaviour; plain data records may be wider
RECORD_HELPERS = 3  # a dataclass with at most this many methods of its own is a plain data record

# getattr/hasattr with a literal name is fine on what is not a backend object: a module or library
# (llama_cpp's version, a symbol a build may lack), an exception's errno text, a request body, the
# server's app state and engine (a test's stand-in has no close), a settings-like object, gguf's keys,
# a server dialect module (its optional PREFIX: server/errors.py), the os module (a flag a platform
# may lack), a dialect's request blocks and response choices, the ASGI app and its state at shutdown
NOT_BACKENDS = {
    "os",
    "b",
    "block",
    "choice",
    "app",
    "getattr(app, 'state', None)",
    "app.state",
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
    "d",
}


def _modules(*rooms: str) -> list[tuple[str, ast.Module]]:
    roots = [PACKAGE / r for r in rooms] if rooms else [PACKAGE]
    return [
        (str(p.relative_to(PACKAGE.parent)), ast.parse(p.read_text(), str(p)))
        for root in roots
        for p in sorted(root.rglob("*.py"))
    ]


def test_no_function_in_the_algorithm_is_longer_than_a_screen():
    long = [
        f"{path}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for path, tree in _modules(*ROOMS)
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert not long, "functions over a screen:\n" + "\n".join(long)


def _fields(cls: ast.ClassDef) -> set[str]:
    """Its instance state: annotated class-level names and every `self.X = ...` in its methods."""
    names = {n.target.id for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    for node in ast.walk(cls):
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, ast.AnnAssign)
            else []
        )
        for t in targets:
            for el in t.elts if isinstance(t, ast.Tuple) else [t]:
                if isinstance(el, ast.Attribute) and isinstance(el.value, ast.Name) and el.value.id == "self":
                    names.add(el.attr)
    return names


def _has_behaviour(cls: ast.ClassDef) -> bool:
    dataclass = any("dataclass" in ast.unparse(d) for d in cls.decorator_list)
    dataclass |= any(ast.unparse(b) == "NamedTuple" for b in cls.bases)  # a record too
    plain = {"property", "classmethod", "staticmethod"}
    methods = [
        n
        for n in cls.body
        if isinstance(n, ast.FunctionDef)
        and not n.name.startswith("__")
        and not plain & {ast.unparse(d) for d in n.decorator_list}
    ]
    return not dataclass or len(methods) > RECORD_HELPERS


def test_no_class_with_behaviour_holds_too_much_state():
    wide = [
        f"{path}:{node.lineno} {node.name} ({len(_fields(node))} fields)"
        for path, tree in _modules(*ROOMS)
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef) and _has_behaviour(node) and len(_fields(node)) > MAX_FIELDS
    ]
    assert not wide, "classes with behaviour over the field budget:\n" + "\n".join(wide)


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
