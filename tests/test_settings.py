"""The settings object (cbp/settings.py): every ``CBP_*`` variable cbp reads is read there and
nowhere else, documented on docs/reference/settings.md, and a field of :class:`cbp.settings.Settings`."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest

from cbp import settings
from cbp.errors import RuntimeStateError
from cbp.settings import VARIABLES, Settings

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs/reference/settings.md"


def test_the_page_the_object_and_the_reads_name_the_same_variables():
    names = [v.name for v in VARIABLES]
    assert len(set(names)) == len(names)
    assert [v.field for v in VARIABLES] == [f.name for f in dataclasses.fields(Settings)]
    page = PAGE.read_text(encoding="utf-8")
    assert page == settings.markdown()  # regenerate: python -m cbp.settings > docs/reference/settings.md
    rows = re.findall(r"^\| `(CBP_[A-Z_]+)` \| `(\w+)` \|", page, re.M)
    assert rows == [(v.name, v.field) for v in VARIABLES]
    src = (ROOT / "cbp/settings.py").read_text(encoding="utf-8")
    body = src[src.index("def from_env") : src.index("assert [v.field")]
    assert sorted(set(re.findall(r'"(CBP_[A-Z_]+)"', body))) == sorted(names)
    assert "reference/settings.md" in (ROOT / "mkdocs.yml").read_text(encoding="utf-8")


def _env_reads(tree: ast.AST) -> list[tuple[int, str]]:
    """The ``CBP_*`` names read from the environment: ``os.environ.get``, ``os.environ[...]``,
    ``os.getenv``, ``... in os.environ``."""

    def environ(n: ast.AST) -> bool:
        return isinstance(n, ast.Attribute) and n.attr == "environ"

    def cbp_name(n: ast.AST) -> str | None:
        ok = isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.startswith("CBP_")
        return n.value if ok else None  # type: ignore[union-attr]

    out = []
    for n in ast.walk(tree):
        found = None
        if isinstance(n, ast.Call) and n.args:
            f = n.func
            if isinstance(f, ast.Attribute) and (
                (f.attr in ("get", "pop", "setdefault") and environ(f.value)) or f.attr == "getenv"
            ):
                found = cbp_name(n.args[0])
        elif isinstance(n, ast.Subscript) and environ(n.value) and isinstance(n.ctx, ast.Load):
            found = cbp_name(n.slice)
        elif isinstance(n, ast.Compare) and any(environ(c) for c in n.comparators):
            found = cbp_name(n.left)
        if found is not None:
            out.append((getattr(n, "lineno", 0), found))
    return out


def test_no_cbp_variable_is_read_outside_settings():
    reads = {}
    for f in sorted((ROOT / "cbp").rglob("*.py")):
        if f == ROOT / "cbp/settings.py":
            continue
        found = _env_reads(ast.parse(f.read_text(encoding="utf-8")))
        if found:
            reads[str(f.relative_to(ROOT))] = found
    assert reads == {}
    assert {n for _, n in _env_reads(ast.parse((ROOT / "cbp/settings.py").read_text()))} == set()  # via env.get
    probe = ast.parse('import os\nos.environ.get("CBP_X")\nos.getenv("CBP_Y")\n"CBP_Z" in os.environ\n')
    assert [n for _, n in _env_reads(probe)] == ["CBP_X", "CBP_Y", "CBP_Z"]  # the check sees each kind of read


def test_read_again_when_a_variable_changes(monkeypatch):
    monkeypatch.delenv("CBP_STATE_CACHE_MB", raising=False)
    first = settings.current()
    assert settings.current() is first  # nothing changed: not read again
    monkeypatch.setenv("CBP_STATE_CACHE_MB", "64")
    assert settings.current().state_cache_mb == 64.0
    monkeypatch.setenv("CBP_COLUMNAR", "0")
    assert settings.current().columnar is False
    second = settings.current()
    monkeypatch.setenv("CBP_NOT_A_SETTING", "1")  # a variable cbp does not read: not read again
    monkeypatch.setenv("PATH_OF_SOMETHING", "x")
    assert settings.current() is second
    monkeypatch.delenv("CBP_COLUMNAR")  # unset: back to the default
    assert settings.current().columnar is True
    monkeypatch.delenv("CBP_REMOTE", raising=False)
    monkeypatch.setenv("SPARK_REMOTE", "sc://example:15002")
    assert settings.current().remote == "sc://example:15002"


@pytest.mark.parametrize("name", ["CBP_STATE_CACHE_MB", "CBP_SMALL_EPOCH_RECORDS", "CBP_LEASE_TTL"])
def test_a_number_that_is_not_one_is_refused(name):
    with pytest.raises(RuntimeStateError) as e:
        Settings.from_env({name: "lots"})
    assert e.value.code == "bad-setting"


def test_defaults():
    s = Settings.from_env({})
    assert s == Settings()
    assert (s.lease_ttl, s.lease_renew, s.fault, s.verbose) == (30.0, None, None, False)
    assert Settings.from_env({"CBP_VERBOSE": "0", "CBP_JVM_ARCHIVE": "0"}).jvm_archive is False
