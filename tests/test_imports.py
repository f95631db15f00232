"""What importing cbp loads (issue 47, item 5): ``import cbp`` loads cbp's ``__init__`` alone and
each public name on first use (PEP 562); a Spark Python worker, which imports the functions the
driver ships (``rdd.mapPartitions(partial(f, ...))``, ``df.mapInArrow(f, ...)``), loads the task
side of the engine and what it needs, never the controller, the driver side, the pipeline, the
command line, Airflow or the crawl application. Each is measured in a fresh interpreter."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import cbp

ROOT = Path(__file__).resolve().parents[1]

#: cbp's pieces a Spark worker may load: the bottom layer, the spec and storage it needs for the
#: task plan and the home, the engine's task and common sides.
WORKER_MAY_LOAD = (
    "cbp",
    "cbp.errors",
    "cbp.faults",
    "cbp.gcpolicy",
    "cbp.model",
    "cbp.settings",
    "cbp.spec",
    "cbp.storage",
)
WORKER_ENGINE = ("cbp.engine", "cbp.engine.task", "cbp.engine.common")


def _loaded(code: str) -> dict[str, list[str]]:
    """The cbp modules and the heavy third-party packages loaded by ``code`` in a fresh interpreter."""
    probe = textwrap.dedent(code) + textwrap.dedent(
        """
        import json, sys
        heavy = ("pyspark", "pandas", "pyarrow", "deltalake", "pydantic", "yaml", "cbp_crawl")
        print(json.dumps({"cbp": sorted(m for m in sys.modules if m == "cbp" or m.startswith("cbp.")),
                          "heavy": [h for h in heavy if h in sys.modules]}))
        """
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.splitlines()[-1])


def test_import_cbp_loads_only_the_package():
    got = _loaded("import cbp")
    assert got == {"cbp": ["cbp"], "heavy": []}


def test_a_translator_taking_the_emitter_loads_the_model_only():
    got = _loaded("from cbp import Emitter, multicast")
    assert got == {"cbp": ["cbp", "cbp.model"], "heavy": []}


def test_public_names_resolve_and_are_listed():
    assert set(cbp.__all__) == set(cbp._HOME)
    assert set(cbp.__all__) <= set(dir(cbp))
    for name in cbp.__all__:
        value = getattr(cbp, name)
        assert getattr(value, "__name__", name) == name or name == "ALL"
    assert "Crawler" not in cbp.__all__ and not hasattr(cbp, "Crawler")
    assert cbp.spec.load_spec is cbp.load_spec  # a subpackage by attribute, as an eager import gave it


def _shipped_modules() -> list[str]:
    """The task-side modules the driver's jobs import the functions they ship from."""
    found = set()
    for f in sorted((ROOT / "cbp" / "engine" / "driver").glob("*.py")):
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 2 and (node.module or "").startswith("task."):
                found.add(f"cbp.engine.{node.module}")
    return sorted(found)


def test_spark_worker_entry_points_load_the_task_side_only():
    shipped = _shipped_modules()
    assert {"cbp.engine.task.translate", "cbp.engine.task.runners", "cbp.engine.task.restate"} <= set(shipped)
    got = _loaded("\n".join(f"import {m}" for m in shipped))
    wrong = [
        m
        for m in got["cbp"]
        if not any(m == p or m.startswith(p + ".") for p in WORKER_ENGINE)
        and not any(m == p or m.startswith(p + ".") for p in WORKER_MAY_LOAD[6:])
        and m not in WORKER_MAY_LOAD[:6]
    ]
    assert wrong == []
    assert "pyspark" not in got["heavy"] and "pandas" not in got["heavy"] and "cbp_crawl" not in got["heavy"]


#: The modules of ``cbp.crawl`` before the application moved out: each keeps its old name.
OLD_CRAWL_MODULES = ("corpus", "crawler", "crawlstate", "fetch", "links", "reference", "schedule", "stats", "versions")
#: What the crawl application takes from cbp beyond its public names (``from cbp import ...``): the
#: hooks it plugs into and two internals it still needs (a record the pipeline refuses, the lease
#: that locks a home on S3), each named here so that a new one is a decision.
APP_USES = {"cbp.airflow.config", "cbp.spec.schema", "cbp.storage.lease"}


def _imported(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
    return names


def test_cbp_never_imports_the_crawl_application():
    """cbp finds the application by its entry points; its old names, ``cbp/crawl/*``, name it as a
    string and import nothing themselves."""
    wrong = [
        f"{f.relative_to(ROOT)}: {m}"
        for f in sorted((ROOT / "cbp").rglob("*.py"))
        for m in _imported(f)
        if m.split(".")[0] == "cbp_crawl" or (f.parent.name == "crawl" and m not in ("importlib", "sys", "typing"))
    ]
    assert wrong == []
    aliases = {f.stem for f in (ROOT / "cbp" / "crawl").glob("*.py")}
    assert aliases == {"__init__", *OLD_CRAWL_MODULES}
    assert aliases <= {f.stem for f in (ROOT / "cbp_crawl").glob("*.py")}


def test_the_crawl_application_uses_the_public_api():
    wrong = [
        f"{f.relative_to(ROOT)}: {m}"
        for f in sorted((ROOT / "cbp_crawl").glob("*.py"))
        for m in _imported(f)
        if m.split(".")[0] == "cbp" and m != "cbp" and m not in APP_USES
    ]
    assert wrong == []


def test_old_crawl_names_are_the_application_modules():
    """A home recorded by an older cbp names ``cbp.crawl.<module>:<name>``; older translator modules
    import ``cbp.crawl.links``: the same modules and objects, never second copies."""
    got = _loaded(
        """
        import sys
        import cbp.crawl.links, cbp.crawl.crawler, cbp_crawl.links, cbp_crawl.crawler, cbp_crawl.versions
        from cbp.crawl import Crawler
        from cbp.spec.resolve import resolve_callable
        assert cbp.crawl.links is cbp_crawl.links and Crawler is cbp_crawl.crawler.Crawler
        assert cbp.crawl.crawler.Corpus is cbp_crawl.Corpus
        assert resolve_callable("cbp.crawl.versions:status_of", ".") is cbp_crawl.versions.status_of
        old = [m for m in sys.modules if m.startswith("cbp.crawl.")]
        assert old and all(sys.modules[m].__name__ == "cbp_crawl." + m[10:] for m in old)  # no second copies
        """
    )
    assert "cbp_crawl" in got["heavy"]
