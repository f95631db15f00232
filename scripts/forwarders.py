"""Count the forwarding members of classes: members that only hand a call on to another object.

A *forwarder* is a method whose body (its docstring aside) is one statement, ``return
self.<part>...<method>(<args>)`` or that call alone, passing exactly the method's own parameters
(positionally or by the same name), or a property whose body only returns ``self.<part>.<attr>``.
It *renames* when the called member's name differs from its own. With ``--loose``, a member
also counts when it passes other arguments (converted, reordered) or wraps its one call in a
``with`` block: it does nothing of its own but hand the call on.

    .venv/bin/python scripts/forwarders.py cbp/pipeline.py:Pipeline cbp/controller/__init__.py:Parts
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Member:
    cls: str
    name: str
    target: str  # what it forwards to ("" when it is not a forwarder)

    @property
    def renames(self) -> bool:
        return bool(self.target) and self.target.rsplit(".", 1)[-1] != self.name


def _body(fn: ast.FunctionDef) -> list[ast.stmt]:
    body = fn.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    return body


def _on_other_object(node: ast.expr) -> bool:
    """``self.<a>.<b>...``: an attribute of something ``self`` holds (not ``self.<method>`` itself)."""
    return isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) and _rooted(node.value)


def _rooted(node: ast.expr) -> bool:
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name) and node.id == "self"


def _params(fn: ast.FunctionDef) -> list[str]:
    a = fn.args
    return [x.arg for x in [*a.posonlyargs, *a.args, *a.kwonlyargs]][1:]


def _same_arguments(call: ast.Call, params: list[str]) -> bool:
    passed = [x.id for x in call.args if isinstance(x, ast.Name)]
    if len(passed) != len(call.args):
        return False
    for kw in call.keywords:
        if kw.arg is None or not isinstance(kw.value, ast.Name) or kw.value.id != kw.arg:
            return False
        passed.append(kw.arg)
    return sorted(passed) == sorted(params)


def forwards_to(fn: ast.FunctionDef, loose: bool = False) -> str:
    """What ``fn`` forwards to ("" if it does something of its own)."""
    body = _body(fn)
    while loose and len(body) == 1 and isinstance(body[0], ast.With):
        body = body[0].body
    if len(body) != 1:
        return ""
    stmt = body[0]
    value = stmt.value if isinstance(stmt, (ast.Return, ast.Expr)) else None
    if value is None:
        return ""
    is_property = any(ast.unparse(d) == "property" for d in fn.decorator_list)
    if is_property and _on_other_object(value):
        return ast.unparse(value)
    if isinstance(value, ast.Call) and _on_other_object(value.func) and (loose or _same_arguments(value, _params(fn))):
        return ast.unparse(value.func)
    return ""


def members(path: str, cls: str, loose: bool = False) -> list[Member]:
    tree = ast.parse(open(path, encoding="utf-8").read())
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            return [
                Member(cls, fn.name, forwards_to(fn, loose))
                for fn in node.body
                if isinstance(fn, ast.FunctionDef) and (not fn.name.startswith("_") or fn.name == "__call__")
                if not any(ast.unparse(d).endswith(".setter") for d in fn.decorator_list)
            ]
    return []


def main(argv: list[str]) -> int:
    loose = "--loose" in argv
    for arg in [a for a in argv if a != "--loose"]:
        path, _, cls = arg.partition(":")
        found = members(path, cls, loose)
        fwd = [m for m in found if m.target]
        print(
            f"{cls} ({path}): {len(found)} public members, {len(fwd)} forwarders, "
            f"{sum(m.renames for m in fwd)} renaming"
        )
        for m in fwd:
            print(f"  {m.name} -> {m.target}{'  (renames)' if m.renames else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
