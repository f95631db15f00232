"""Where cbp raises each error code, found in its source with :mod:`ast` (used by
``tests/test_error_catalog.py``): the pairs ``(code, error class name)`` and one place of each.

Followed: a cbp error class called with ``code="..."`` or a module constant; without ``code=``
(the class's own code); a function that hands one of its parameters on as ``code=`` (``fail``,
``_failed``), called with a literal; classes that carry a code to a ``CbpError`` (``RecordError``,
``SourceSpecError``, ...: :data:`CARRIED_AS` says which error they become); ``a if e.code == "x"
else e.code`` as code. Codes read from a caught error (``code=e.code``) are found where that error
was made.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

from cbp import errors

#: A class that is not a CbpError but carries a code that cbp re-raises: the error classes it
#: becomes (where it is caught: cbp/pipeline.py and feedfiles.py for records, cbp/spec/loader.py
#: for the YAML loader's refusals, cbp/spec/sources.py for a source flow's keys, cbp/views/__init__.py
#: for a view's SQL, the task driver cbp/engine/driver/job.py for a task's failure record).
CARRIED_AS = {
    "RecordError": ("InputError",),
    "DiffError": ("InputError",),
    "ArrowRecordError": ("InputError",),
    "_YamlRefused": ("SpecError",),
    "SourceSpecError": ("SpecError",),
    "FailureRecord": ("UserCodeError",),
    "ViewError": ("SpecError",),
}
#: Where a carrier takes its code positionally.
CODE_ARG = {"_YamlRefused": 0, "SourceSpecError": 1, "FailureRecord": 0, "ViewError": 0}
#: A failure record whose code the task driver raises as another class (job.py ``_job_error``).
FAILURE_AS = {"io": "RuntimeStateError"}


def _error_classes() -> dict[str, str]:
    """Name -> default code of every CbpError class."""
    out, todo = {}, [errors.CbpError]
    while todo:
        c = todo.pop()
        out[c.__name__] = c.code
        todo += c.__subclasses__()
    return out


#: Another name a relay is called by (the batch translator's ``self._fail`` is ``calls._failed``).
ALIASES = {"_fail": "_failed"}


def _name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return ALIASES.get(func.id, func.id)
    if isinstance(func, ast.Attribute):
        return ALIASES.get(func.attr, func.attr)
    return None


def _codes_of(node: ast.expr, consts: dict[str, str]) -> list[str]:
    """The literal codes an expression given as ``code`` can be."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Name) and node.id in consts:
        return [consts[node.id]]
    if isinstance(node, ast.IfExp):
        out = _codes_of(node.body, consts) + _codes_of(node.orelse, consts)
        t = node.test
        if isinstance(t, ast.Compare) and len(t.ops) == 1 and isinstance(t.ops[0], ast.Eq):
            out += [c for c in _codes_of(t.comparators[0], consts) if isinstance(node.body, ast.Attribute)]
        return out
    return []


class _Scan:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.trees = {p: ast.parse(p.read_text(encoding="utf-8")) for p in sorted(root.rglob("*.py"))}
        self.classes = _error_classes()
        self.consts = {
            t.id: n.value.value
            for tree in self.trees.values()
            for n in tree.body
            if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
            for t in n.targets
            if isinstance(t, ast.Name)
        }
        self.found: dict[tuple[str, str], list[str]] = defaultdict(list)
        self.relays: dict[str, tuple[int, str, tuple[str, ...]]] = {}  # function -> (param index, param name, classes)

    def _makers(self) -> dict[str, tuple[str, ...]]:
        """Callable name -> the error classes a code given to it ends in."""
        out = {c: (c,) for c in self.classes}
        out.update(CARRIED_AS)
        out.update({f: cls for f, (_, _, cls) in self.relays.items()})
        return out

    def _functions(self) -> Iterator[tuple[Path, ast.FunctionDef, ast.Call]]:
        for path, tree in self.trees.items():
            for fn in ast.walk(tree):
                if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    for call in ast.walk(fn):
                        if isinstance(call, ast.Call):
                            yield path, fn, call

    def _code_arg(self, call: ast.Call, name: str) -> ast.expr | None:
        for kw in call.keywords:
            if kw.arg == "code":
                return kw.value
        if name in self.relays:
            index, param, _ = self.relays[name]
            for kw in call.keywords:
                if kw.arg == param:
                    return kw.value
            if index < len(call.args):
                return call.args[index]
        if name in CODE_ARG and len(call.args) > CODE_ARG[name]:
            return call.args[CODE_ARG[name]]
        return None

    def find_relays(self) -> None:
        """Functions that hand a parameter on as an error's code."""
        for _ in range(3):
            makers = self._makers()
            for _path, fn, call in self._functions():
                name = _name(call.func)
                if name not in makers or fn.name in makers:
                    continue
                arg = self._code_arg(call, name)
                params = [a.arg for a in fn.args.args if a.arg not in ("self", "cls")]
                if isinstance(arg, ast.Name) and arg.id == "code" and arg.id in params:
                    self.relays[fn.name] = (params.index(arg.id), arg.id, makers[name])

    def scan(self) -> dict[tuple[str, str], list[str]]:
        self.find_relays()
        makers = self._makers()
        for path, _fn, call in self._functions():
            name = _name(call.func)
            if name not in makers:
                continue
            arg = self._code_arg(call, name)
            where = f"{path.relative_to(self.root.parent)}:{call.lineno}"
            if arg is None and name in self.classes:
                self.found[(self.classes[name], name)].append(where)
            for code in _codes_of(arg, self.consts) if arg is not None else []:
                for cls in makers[name]:
                    cls = FAILURE_AS.get(code, cls) if name in ("FailureRecord", "_failed") else cls
                    if cls in self.classes:
                        self.found[(code, cls)].append(where)
        self._class_codes(makers)
        return dict(self.found)

    def _class_codes(self, makers: dict[str, tuple[str, ...]]) -> None:
        """``code = "..."`` on a carrier class (RecordError's ``bad-record``, DiffError's ``bad-diff``)."""
        for path, tree in self.trees.items():
            for c in ast.walk(tree):
                if isinstance(c, ast.ClassDef) and c.name in CARRIED_AS:
                    for n in c.body:
                        if isinstance(n, (ast.Assign, ast.AnnAssign)) and isinstance(n.value, ast.Constant):
                            targets = n.targets if isinstance(n, ast.Assign) else [n.target]
                            if any(isinstance(t, ast.Name) and t.id == "code" for t in targets):
                                for cls in makers[c.name]:
                                    where = f"{path.relative_to(self.root.parent)}:{n.lineno}"
                                    self.found[(n.value.value, cls)].append(where)


def raise_sites(root: Path) -> dict[tuple[str, str], list[str]]:
    """``(code, class name)`` -> the places (``cbp/x.py:LINE``) it is raised from."""
    return _Scan(root).scan()
