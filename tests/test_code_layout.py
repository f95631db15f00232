"""The code shows its layers: no module over 500 lines, no function over 80, no import cycle, and
no layer importing one above it (docs/concepts/code-layout.md)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[1] / "cbp"

#: Each top-level piece of the package and its layer: a module may import its own layer and the
#: layers below, never one above (the package's ``__init__`` only for ``__version__``).
LAYERS = {
    "errors": 0,
    "settings": 0,
    "errorcodes": 0,
    "faults": 0,
    "gcpolicy": 0,
    "model": 0,
    "spec": 1,
    "storage": 1,
    "views": 1,
    "engine": 2,
    "controller": 3,
    "sql": 4,
    "sqlcheck": 4,
    "pipeline": 5,
    "follow": 5,
    "testing": 6,
    "crawl": 6,
    "cli": 7,
    "airflow": 7,
    "commands": 7,
}


def _modules() -> dict[str, Path]:
    out = {}
    for f in sorted(ROOT.rglob("*.py")):
        parts = ["cbp", *f.relative_to(ROOT).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = f
    return out


def _imports(mods: dict[str, Path], typing: bool = False) -> dict[str, set[tuple[str, list[str]]]]:
    """Per module, the cbp modules it imports, with the names it takes from each (also those
    imported for annotations only, under ``TYPE_CHECKING``, if ``typing``); imports inside
    functions count."""
    out: dict[str, set[tuple[str, list[str]]]] = {}
    for m, f in mods.items():
        pkg = m if f.name == "__init__.py" else m.rsplit(".", 1)[0]
        found = set()
        tree = ast.parse(f.read_text(encoding="utf-8"))
        typing_only = {
            id(n)
            for block in ast.walk(tree)
            if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.dump(block.test)
            for stmt in block.body
            for n in ast.walk(stmt)
        }
        for node in ast.walk(tree):
            if id(node) in typing_only and not typing:  # annotations only: not an import at run time
                continue
            if isinstance(node, ast.ImportFrom):
                base = pkg.split(".")[: len(pkg.split(".")) - (node.level - 1)] if node.level else []
                name = ".".join(base + ([node.module] if node.module else [])) if node.level else (node.module or "")
                if not name.startswith("cbp"):
                    continue
                for a in node.names:  # "from .. import faults" imports a module
                    sub = f"{name}.{a.name}"
                    found.add((sub, ()) if sub in mods else (name, (a.name,)))
            elif isinstance(node, ast.Import):
                found |= {(a.name, ()) for a in node.names if a.name.startswith("cbp.")}
        out[m] = {(d, tuple(names)) for d, names in found if d in mods and d != m}  # type: ignore[misc]
    return out


def _layer(module: str) -> str:
    return module.split(".")[1] if "." in module else "cbp"


def test_code_is_formatted_so_sizes_count_formatted_code():
    """The counts below are of the code as ``ruff format`` writes it (line length 120, pyproject.toml
    ``[tool.ruff]``): packing statements onto fewer lines would not pass this first. Lines over 120
    characters are ruff's E501 (``ruff check``, run by scripts/test)."""
    ruff = Path(sys.executable).with_name("ruff")
    done = subprocess.run(
        [str(ruff) if ruff.exists() else "ruff", "format", "--check", str(ROOT)],
        capture_output=True,
        text=True,
        cwd=ROOT.parent,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_module_and_function_sizes():
    """No module over 500 lines and no function over 80, as formatted (the test above)."""
    too_long = []
    for m, f in _modules().items():
        text = f.read_text(encoding="utf-8")
        if len(text.splitlines()) > 500:
            too_long.append(f"{m}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > 80:
                    too_long.append(f"{m}.{node.name}: {lines} lines")
    assert not too_long


def test_no_import_cycle_and_no_layer_reaching_up():
    mods = _modules()
    imports = _imports(mods)
    assert set(map(_layer, mods)) - {"cbp"} <= set(LAYERS)  # a new top-level piece gets a layer here
    g = nx.DiGraph([(m, d) for m, ds in imports.items() for d, _ in ds if _layer(d) != "cbp"])
    assert list(nx.simple_cycles(g)) == []
    upward = []
    for m, ds in imports.items():
        for d, names in ds:
            a, b = _layer(m), _layer(d)
            if b == "cbp":
                if a != "cbp" and set(names) != {"__version__"}:
                    upward.append(f"{m} imports {names} from the package")
            elif a != "cbp" and a != b and LAYERS[a] < LAYERS[b]:
                upward.append(f"{m} ({a}) imports {d} ({b})")
    assert not upward


#: The engine's packages by where their code runs (docs/concepts/code-layout.md): a Spark task's
#: code never imports the driver's, and what both use imports neither.
ENGINE_SIDES = {"task": {"task", "common"}, "common": {"common"}, "driver": {"driver", "task", "common"}}


def _engine_side(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 3 and parts[1] == "engine" else None


def test_engine_task_side_never_imports_the_driver_side():
    mods = _modules()
    assert {_engine_side(m) for m in mods if m.startswith("cbp.engine.")} - {None} == set(ENGINE_SIDES)
    assert not [
        m for m in mods if m.startswith("cbp.engine.") and m.count(".") == 2 and m.rsplit(".", 1)[1] not in ENGINE_SIDES
    ]
    wrong = []
    for m, ds in _imports(mods, typing=True).items():
        side = _engine_side(m)
        for d, _ in ds:
            if side is not None and _engine_side(d) is not None and _engine_side(d) not in ENGINE_SIDES[side]:
                wrong.append(f"{m} imports {d}")
    assert not wrong


def test_engine_task_modules_import_each_other_without_a_cycle():
    """Annotations-only and function-level imports count: a task module's dependencies run one way."""
    mods = _modules()
    task = {m for m in mods if _engine_side(m) == "task"}
    g = nx.DiGraph([(m, d) for m, ds in _imports(mods, typing=True).items() if m in task for d, _ in ds if d in task])
    assert len(task) > 10 and list(nx.simple_cycles(g)) == []


_SHIPPING = {
    "mapPartitions",
    "mapPartitionsWithIndex",
    "mapInArrow",
    "mapInPandas",
    "applyInPandas",
    "flatMap",
    "map",
    "foreachPartition",
}


def test_driver_jobs_ship_only_task_side_functions():
    """What a driver module hands Spark to run on the executors (``rdd.mapPartitions(partial(f, ...))``,
    ``df.mapInArrow(f, ...)`` ...) is a function of :mod:`cbp.engine.task`, imported from there."""
    shipped, wrong = [], []
    for m, f in _modules().items():
        if _engine_side(m) != "driver":
            continue
        tree = ast.parse(f.read_text(encoding="utf-8"))
        pkg = m.rsplit(".", 1)[0].split(".")
        origin = {
            a.asname or a.name: ".".join(pkg[: len(pkg) - node.level + 1] + [node.module or ""])
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.level
            for a in node.names
        }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in _SHIPPING
                and node.args
            ):
                fn = node.args[0]
                if isinstance(fn, ast.Call) and isinstance(fn.func, ast.Name) and fn.func.id == "partial":
                    fn = fn.args[0]
                name = fn.id if isinstance(fn, ast.Name) else ast.dump(fn)
                shipped.append(name)
                if _engine_side(origin.get(name, "") + ".x") != "task":
                    wrong.append(f"{m}: {name}")
    assert len(shipped) >= 8 and not wrong


CONTROLLER = ROOT / "controller"


def _controller_modules() -> dict[str, ast.Module]:
    return {f.name: ast.parse(f.read_text(encoding="utf-8")) for f in sorted(CONTROLLER.glob("*.py"))}


def test_controller_parts_are_composed_not_mixed_in():
    """The controller is the parts :class:`cbp.controller.Parts` composes, each handed what it works with (issue 37,
    item 7): no controller class derives from another, no function takes the whole controller, no
    part reaches into a collaborator's private state, and none keeps the spec or the snapshot of
    its own (they are read through the shared :class:`cbp.controller.live.Live`, never stale)."""
    from cbp.controller import Parts

    assert Parts.__bases__ == (object,)
    mods = _controller_modules()
    classes = {n.name for tree in mods.values() for n in tree.body if isinstance(n, ast.ClassDef)}
    wrong = [
        f"{name}: class {n.name}({ast.unparse(b)})"
        for name, tree in mods.items()
        for n in tree.body
        if isinstance(n, ast.ClassDef)
        for b in n.bases
        if ast.unparse(b).split(".")[-1] in classes
    ]
    for name, tree in mods.items():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                wrong += [
                    f"{name}:{node.lineno}: {node.name}({a.arg}: {ast.unparse(a.annotation) if a.annotation else ''})"
                    for a in node.args.args
                    if a.arg in ("ctl", "controller") or "Controller" in ast.unparse(a.annotation or ast.Constant(""))
                ]
            if name in ("__init__.py", "live.py") or not isinstance(node, ast.Attribute):
                continue
            inner = node.value
            if isinstance(inner, ast.Name) and inner.id == "self" and node.attr in ("st", "spec", "committed"):
                wrong.append(f"{name}:{node.lineno}: self.{node.attr} (read it from the Live object)")
            if (
                isinstance(inner, ast.Attribute)
                and isinstance(inner.value, ast.Name)
                and inner.value.id == "self"
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
            ):
                wrong.append(f"{name}:{node.lineno}: self.{inner.attr}.{node.attr} (another part's private state)")
    assert not wrong


def test_controller_modules_say_what_they_read_and_write():
    """Each controller module's docstring names what its part reads and what it writes, so that
    each file can be read alone."""
    missing = [
        name
        for name, tree in _controller_modules().items()
        if not all(w in (ast.get_docstring(tree) or "") for w in ("Reads:", "Writes:"))
    ]
    assert not missing


def test_controller_parts_take_only_what_they_use():
    """Each part (a controller class handed the shared ``live``) uses every collaborator its
    ``__init__`` takes: what a part is handed is what it reads and writes through."""
    unused = []
    for name, tree in _controller_modules().items():
        for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
            methods = [m for m in cls.body if isinstance(m, ast.FunctionDef)]
            init = next((m for m in methods if m.name == "__init__"), None)
            params = {a.arg for a in init.args.args[1:]} if init else set()
            if "live" not in params:
                continue
            handed = {}  # attribute -> the parameter stored in it
            for node in ast.walk(init):
                if isinstance(node, ast.Assign):
                    pairs = (
                        zip(node.targets[0].elts, node.value.elts)
                        if isinstance(node.targets[0], ast.Tuple) and isinstance(node.value, ast.Tuple)
                        else [(node.targets[0], node.value)]
                    )
                    handed.update(
                        {
                            t.attr: v.id
                            for t, v in pairs
                            if isinstance(t, ast.Attribute) and isinstance(v, ast.Name) and v.id in params
                        }
                    )
            used = {
                n.attr
                for m in methods
                if m is not init
                for n in ast.walk(m)
                if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self"
            }
            unused += [f"{name}: {cls.name}({p})" for p in params - {handed[a] for a in handed if a in used}]
    assert not unused
