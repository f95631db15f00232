"""docs/concepts/code-layout.md names every module of cbp and of the crawl application: its module
table is written from the modules' docstrings by scripts/code_layout.py, and is current."""

from __future__ import annotations

import importlib.util

from conftest import ROOT


def _script():
    spec = importlib.util.spec_from_file_location("code_layout", ROOT / "scripts" / "code_layout.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_code_layout_page_names_every_module_and_is_current():
    layout = _script()
    text = layout.PAGE.read_text(encoding="utf-8")
    assert text == layout.page(text), "run: .venv/bin/python scripts/code_layout.py"
    found = {p.relative_to(ROOT).as_posix() for pkg in layout.PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    assert len(found) > 100 and all(f"| `{m}` |" in text for m in found)
    assert "(no docstring)" not in text
