"""The suite's own rules, checked on its text: the tiers of tests/tiers.py name real tests and
registered markers, ``scripts/test --fast`` leaves out exactly the expensive ones, no test bounds
wall-clock time from above, every skip says what it needs, and doctests run (no ``+SKIP``)."""

from __future__ import annotations

import ast
import re

import tiers
import tomllib
from conftest import ROOT

TESTS = ROOT / "tests"

#: Modules whose docstrings still skip examples (other work rewrites them; see docs/concepts/test-suite.md).
SKIPPED_DOCTESTS_PENDING: set[str] = set()  # every doctest runs or is plain text


def _test_names(file: str) -> set[str]:
    tree = ast.parse((TESTS / file).read_text())
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}


def test_every_entry_of_the_tiers_names_a_test_that_exists():
    keys = [*tiers.MARKS, *tiers.GROUPS, *tiers.WHOLE_FILES, *tiers.FIRST]
    for key in keys:
        file, _, name = key.partition("::")
        assert (TESTS / file).is_file(), key
        assert not name or name.split("[", 1)[0] in _test_names(file), key


def test_the_markers_are_registered_and_fast_leaves_out_the_expensive_ones():
    ini = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    registered = {m.split(":", 1)[0] for m in ini["markers"]}
    assert set(tiers.EXPENSIVE) <= registered
    assert {m for marks in tiers.MARKS.values() for m in marks} <= set(tiers.EXPENSIVE)
    assert int(ini["timeout"]) >= 600  # generous: a hang fails, a slow machine does not
    script = (ROOT / "scripts" / "test").read_text()
    assert f'-m "not ({" or ".join(tiers.EXPENSIVE)})"' in script


#: An assert that a duration (a clock's reading minus an earlier one, or a variable holding one) is small.
_WALL_CLOCK_BOUND = re.compile(r"\bassert\b.*((perf_counter|monotonic|time)\(\)\s*-\s*\w+|\b(took|elapsed|waited))\s*<")


def test_no_test_bounds_wall_clock_time_from_above():
    """A test counts operations or waits for events; a deadline to give up waiting is fine."""
    found = []
    for path in sorted(TESTS.glob("*.py")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if _WALL_CLOCK_BOUND.search(line):
                found.append(f"{path.name}:{n}: {line.strip()}")
    assert not found, "\n".join(found)


_SKIP = re.compile(r"pytest\.(skip|importorskip)\(|skipif\(")


def test_every_skip_says_what_it_needs():
    found = []
    for path in sorted(TESTS.glob("*.py")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if _SKIP.search(line) and "needs " not in line and path.name != "test_tiers.py":
                found.append(f"{path.name}:{n}: {line.strip()}")
    assert not found, "\n".join(found)


def test_doctests_run_or_are_plain_text():
    skipping = {
        str(p.relative_to(ROOT)) for p in sorted((ROOT / "cbp").rglob("*.py")) if "doctest: +SKIP" in p.read_text()
    }
    assert skipping <= SKIPPED_DOCTESTS_PENDING, sorted(skipping - SKIPPED_DOCTESTS_PENDING)


def test_modules_left_out_of_doctest_collection_have_no_doctest():
    """pyproject's ``--ignore=cbp/airflow/...`` saves each worker importing Airflow while collecting: only
    while those modules hold no example, which would then never run."""
    addopts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["addopts"]
    ignored = [a.split("=", 1)[1] for a in addopts.split() if a.startswith("--ignore=cbp/airflow/")]
    assert ignored
    for module in ignored:
        assert ">>>" not in (ROOT / module).read_text(), module
