#!/usr/bin/env python
"""Issue 47's acceptance numbers, measured on the work tree: the largest formatted module and function, the
most complex function, lines over the formatter's length, forwarding members, ``dict[str, Any]`` in the
controller, ``os.environ`` reads outside the settings object, and the modules that ``import cbp`` and a Spark
Python worker of cbp's sessions load (each in a fresh interpreter).

    .venv/bin/python scripts/codebase_numbers.py

prints one line per number, with what was measured; nothing is changed. Forwarders are counted by
``scripts/forwarders.py`` over every class of ``cbp/`` (strict and ``--loose``).
"""

from __future__ import annotations

import ast
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
LONG = 120  # [tool.ruff] line-length

#: What a Python worker of cbp's sessions holds before its first task (``spark.python.daemon.module``
#: imports it, then forks each worker: cbp/engine/task/daemon.py); a task then unpickles its plan
#: and functions (tests/test_worker_imports.py checks what real workers hold after an epoch).
WORKER = "import cbp.engine.task.daemon"


def _sources() -> list[Path]:
    return sorted((ROOT / "cbp").rglob("*.py"))


def sizes() -> dict[str, str]:
    """The largest module and function (lines as the files stand: ``ruff format --check`` says whether
    they are formatted), and the lines over :data:`LONG` characters."""
    mods, funcs, long_lines = [], [], 0
    for f in _sources():
        text = f.read_text(encoding="utf-8")
        rel = f.relative_to(ROOT).as_posix()
        mods.append((len(text.splitlines()), rel))
        long_lines += sum(1 for line in text.splitlines() if len(line) > LONG)
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                funcs.append(((node.end_lineno or node.lineno) - node.lineno + 1, f"{rel}:{node.name}"))
    mods.sort(reverse=True)
    funcs.sort(reverse=True)
    fmt = subprocess.run([str(ROOT / ".venv/bin/ruff"), "format", "--check", "--quiet", "cbp"], cwd=ROOT)
    return {
        "formatted (ruff format --check cbp)": "yes" if fmt.returncode == 0 else "NO",
        "modules / over 500 lines": f"{len(mods)} / {sum(1 for n, _ in mods if n > 500)}",
        "largest modules": ", ".join(f"{m} {n}" for n, m in mods[:3]),
        "functions / over 80 lines": f"{len(funcs)} / {sum(1 for n, _ in funcs if n > 80)}",
        "largest functions": ", ".join(f"{m} {n}" for n, m in funcs[:3]),
        f"lines over {LONG} characters": str(long_lines),
    }


def complexity() -> dict[str, str]:
    """The most complex functions by ruff's McCabe check (C901) with a limit of 0: every function listed."""
    done = subprocess.run(
        [str(ROOT / ".venv/bin/ruff"), "check", "cbp", "--select", "C901", "--output-format", "concise"]
        + ["--config", "lint.mccabe.max-complexity = 0", "--no-cache", "--exit-zero"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    found = [(int(m[2]), m[1]) for m in re.finditer(r"`([^`]+)` is too complex \((\d+) > 0\)", done.stdout)]
    found.sort(reverse=True)
    return {
        "McCabe: functions over 18": str(sum(1 for c, _ in found if c > 18)),
        "McCabe: most complex": ", ".join(f"{n} {c}" for c, n in found[:3]),
    }


def forwarders() -> dict[str, str]:
    """Members of any class of ``cbp/`` that only hand a call on (``scripts/forwarders.py``)."""
    spec = importlib.util.spec_from_file_location("forwarders", ROOT / "scripts" / "forwarders.py")
    assert spec and spec.loader
    fwd = importlib.util.module_from_spec(spec)
    sys.modules["forwarders"] = fwd  # its dataclass looks its module up
    spec.loader.exec_module(fwd)
    strict: list[str] = []
    loose: list[str] = []
    for f in _sources():
        for node in ast.parse(f.read_text(encoding="utf-8")).body:  # top-level classes (what it reads)
            if isinstance(node, ast.ClassDef):
                for out, is_loose in ((strict, False), (loose, True)):
                    members = fwd.members(str(f), node.name, loose=is_loose)
                    out += [f"{node.name}.{m.name}" for m in members if m.target]
    by_class: dict[str, int] = {}
    for name in strict:
        by_class[name.split(".")[0]] = by_class.get(name.split(".")[0], 0) + 1
    top = sorted(by_class.items(), key=lambda kv: -kv[1])[:4]
    return {
        "forwarding members (strict / --loose)": f"{len(strict)} / {len(loose)}",
        "classes with most forwarders (strict)": ", ".join(f"{c} {n}" for c, n in top),
    }


_WRITES = {"setdefault", "pop", "update", "clear", "__setitem__"}


def _env_use(node: ast.AST, parent: ast.AST | None) -> str | None:
    """ "read" or "write" if ``node`` is ``os.environ`` or ``os.getenv`` (by how its parent uses it), else None."""
    if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "os"):
        return None
    if node.attr == "getenv":
        return "read"
    if node.attr != "environ":
        return None
    if isinstance(parent, ast.Subscript) and not isinstance(parent.ctx, ast.Load):
        return "write"
    if isinstance(parent, ast.Attribute) and parent.attr in _WRITES:
        return "write"
    return "read"


def text_counts() -> dict[str, str]:
    """``dict[str, Any]`` in ``cbp/controller/``; ``os.environ``/``os.getenv`` outside ``cbp/settings*``, reads
    (``get``, a key looked up or tested, the mapping passed on) apart from writes (set, ``setdefault``, ``pop``)."""
    dict_any = sum(
        f.read_text(encoding="utf-8").count("dict[str, Any]") for f in (ROOT / "cbp/controller").rglob("*.py")
    )
    uses: dict[str, dict[str, int]] = {"read": {}, "write": {}}
    for f in _sources():
        if f.name.startswith("settings"):
            continue
        tree = ast.parse(f.read_text(encoding="utf-8"))
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            kind = _env_use(node, parents.get(node))
            if kind:
                rel = f.relative_to(ROOT).as_posix()
                uses[kind][rel] = uses[kind].get(rel, 0) + 1
    reads, writes = uses["read"], uses["write"]
    return {
        "dict[str, Any] in cbp/controller/": str(dict_any),
        "os.environ reads outside cbp/settings* (reads / files)": f"{sum(reads.values())} / {len(reads)}",
        "  reads in": ", ".join(f"{m} {n}" for m, n in sorted(reads.items(), key=lambda kv: -kv[1])),
        "os.environ writes outside cbp/settings* (writes / files)": f"{sum(writes.values())} / {len(writes)}",
    }


def _loaded(code: str) -> tuple[int, int]:
    """(cbp modules, all modules) in ``sys.modules`` after ``code`` in a fresh interpreter."""
    count = "print(sum(1 for n in m if n == 'cbp' or n.startswith('cbp.')), len(m))"
    probe = f"{code}\nimport sys\nm = list(sys.modules)\n{count}"
    out = subprocess.run([PY, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    return int(out[0]), int(out[1])


def imports() -> dict[str, str]:
    base = _loaded("pass")[1]
    cbp_mods, total = _loaded("import cbp")
    p_cbp, p_total = _loaded("import cbp\ncbp.Pipeline")  # the public object, loaded lazily (PEP 562)
    w_cbp, w_total = _loaded(WORKER)
    return {
        "import cbp: cbp modules / all modules (bare interpreter)": f"{cbp_mods} / {total} ({base})",
        "import cbp; cbp.Pipeline: cbp modules / all modules": f"{p_cbp} / {p_total}",
        f"a Spark worker ({WORKER}): cbp modules / all modules": f"{w_cbp} / {w_total}",
        "cbp modules in the tree": str(len(_sources())),
    }


def main() -> int:
    for part in (sizes, complexity, forwarders, text_counts, imports):
        for what, value in part().items():
            print(f"{what}: {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
