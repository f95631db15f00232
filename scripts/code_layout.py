#!/usr/bin/env python
"""Write the module table of docs/concepts/code-layout.md from the modules' docstrings: every module
of ``cbp/`` and of the crawl application ``cbp_crawl/``, each with the first sentence of its
docstring, between the page's ``<!-- modules -->`` and ``<!-- /modules -->`` markers.

    .venv/bin/python scripts/code_layout.py            # rewrite the table
    .venv/bin/python scripts/code_layout.py --check    # exit 1 if the page is not current

``tests/test_docs_layout.py`` checks that the page is current, so a new module, a moved one or a
changed first sentence is one run of this script.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "concepts" / "code-layout.md"
PACKAGES = ("cbp", "cbp_crawl")
BEGIN, END = "<!-- modules -->", "<!-- /modules -->"
MOST = 160  # characters of a summary; a longer first sentence is cut at a word

#: The end of a first sentence: a full stop before a blank and a capital or the end (not the one
#: of "e.g.", "i.e." or "Fig.", nor inside a number such as §4.1).
_END = re.compile(r"(?<!\be\.g)(?<!\bi\.e)(?<!\bFig)\.(?=\s+[A-Z`(]|$)")


_ROLE = re.compile(r":\w+:`~?\.?([^`]+)`")


def summary(doc: str) -> str:
    """The first sentence of a docstring, on one line, without markup the table cannot hold.

    >>> summary("Internal: the engine (:mod:`.task`, ``x``). More.")
    'Internal: the engine (`task`, `x`).'
    >>> summary("Spark's hashes (e.g. xxhash64, Fig. 2) in the driver.\\n\\nMore.")
    "Spark's hashes (e.g. xxhash64, Fig. 2) in the driver."
    """
    para = " ".join(doc.strip().split("\n\n")[0].split())
    m = _END.search(para)
    text = para[: m.start() + 1] if m else para
    text = _ROLE.sub(r"`\1`", text).replace("``", "`")  # reST roles and literals as Markdown code
    if len(text) > MOST:
        text = text[:MOST].rsplit(" ", 1)[0] + " …"
    return text.replace("|", "\\|")


def modules() -> list[tuple[str, str]]:
    """``(path, summary)`` of every module of :data:`PACKAGES`, in path order."""
    out = []
    for pkg in PACKAGES:
        for f in sorted((ROOT / pkg).rglob("*.py")):
            doc = ast.get_docstring(ast.parse(f.read_text(encoding="utf-8"))) or ""
            out.append((f.relative_to(ROOT).as_posix(), summary(doc) if doc else "(no docstring)"))
    return out


def table() -> str:
    rows = [f"| `{path}` | {text} |" for path, text in modules()]
    return "\n".join(["| module | what it is (its docstring's first sentence) |", "|---|---|", *rows])


def page(text: str) -> str:
    """The page ``text`` with the table between the markers written anew."""
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{table()}\n{END}{tail}"


def main(argv: list[str]) -> int:
    text = PAGE.read_text(encoding="utf-8")
    new = page(text)
    if "--check" in argv:
        if new != text:
            print(f"{PAGE.relative_to(ROOT)} is not current: run .venv/bin/python scripts/code_layout.py")
            return 1
        return 0
    PAGE.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
