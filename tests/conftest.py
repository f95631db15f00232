"""Shared fixtures: one SparkSession for the whole test session, and small pipeline builders."""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FLOWS = ROOT / "flows"

# Airflow (imported by cbp.airflow.triggers / cbp.airflow.dagfactory, also while collecting doctests) reads its
# configuration once, at import: point it at a throw-away home before anything imports it, so
# tests never touch a user's ~/airflow. tests/test_airflow.py creates the database there.
AIRFLOW_HOME = tempfile.mkdtemp(prefix="cbp-test-airflow-")
atexit.register(shutil.rmtree, AIRFLOW_HOME, True)  # the session's own: nothing left in /tmp
os.environ["AIRFLOW_HOME"] = AIRFLOW_HOME
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(ROOT / "dags")
os.environ["AIRFLOW__CORE__UNIT_TEST_MODE"] = "False"
os.environ["CBP_DAGS_CONFIG"] = os.path.join(AIRFLOW_HOME, "cbp.yaml")  # written by tests/test_airflow.py

# A minimal stateful pipeline (word -> count) for tests that are about cbp, not about the pipeline.
WORD_COUNT = """
pipeline: counter
flows:
  words: {external: true, schema: {w: string}}
stages:
  count:
    translator: MOD:count
    partitions: 2
    inputs: [{flow: words, route_by: w}]
    state: {schema: {w: string, n: int}}
"""
WORD_COUNT_MODULE = """
import time

SLEEP = 0.0

def count(key, state, words, out):
    prev = next(state, None)
    time.sleep(SLEEP)
    out.state.write({"w": key, "n": sum(1 for _ in words) + (prev["n"] if prev else 0)})
"""


@pytest.fixture(scope="session")
def spark():
    from cbp.engine.session import get_spark

    os.environ.setdefault("CBP_SPARK_MASTER", "local[2,2]")  # 2 attempts per task, as in cbp's default
    session = get_spark()
    yield session


@pytest.fixture
def make_pipeline(tmp_path):
    """Write a YAML (and optional translator module) into a temp dir; return the YAML path."""

    counter = {"n": 0}

    def make(yaml_text: str, module: str | None = None, module_name: str | None = None) -> Path:
        counter["n"] += 1
        d = tmp_path / f"p{counter['n']}"
        d.mkdir()
        if module is not None:
            name = module_name or f"mod_{tmp_path.name}_{counter['n']}".replace("-", "_")
            (d / f"{name}.py").write_text(textwrap.dedent(module))
            yaml_text = yaml_text.replace("MOD", name)
            sys.modules.pop(name, None)
        path = d / "pipeline.yaml"
        path.write_text(textwrap.dedent(yaml_text))
        return path

    return make


def pytest_terminal_summary(terminalreporter):  # how many inputs each fuzz target tried
    from fuzzing import TRIED

    if TRIED:
        terminalreporter.section("fuzzing")
        for name, (count, took) in sorted(TRIED.items()):
            terminalreporter.write_line(f"fuzz target {name}: {count} inputs in {took:.0f} s")
