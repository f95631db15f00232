"""The catalog of cbp's error codes: for each code, the error class(es) it is raised with, the exit
code ``cbp`` ends with, what it means and what to do. ``docs/reference/error-codes.md`` is generated
from it (``python -m cbp.errorcodes > docs/reference/error-codes.md``; a test compares the two), and
``tests/test_error_catalog.py`` checks it against every raise site in ``cbp/``, both ways.

The codes are held by kind, a module each, in the order of the page: :mod:`.spec` (the pipeline
YAML), :mod:`.usage` (calls, input records, user code), :mod:`.runtime` (the home, Spark, another
run, Delta sources), :mod:`.changes` (plan, upgrade, rewind, unfeed) and :mod:`.reported` (codes
printed, never raised). Adding a code is one ``_c(...)`` entry (:mod:`.entry`) in its kind's module.

    >>> entry("busy").classes[0].__name__, entry("busy").exits
    ('BusyError', (6,))
"""

from __future__ import annotations

from . import changes, page, runtime, spec, usage
from .entry import Code, Reported
from .reported import REPORTED

__all__ = ["Code", "Reported", "SECTIONS", "REPORTED", "entry", "markdown"]

#: The codes, by subject (a section of the page each).
SECTIONS: list[tuple[str, list[Code]]] = [*spec.SECTIONS, *usage.SECTIONS, *runtime.SECTIONS, *changes.SECTIONS]


def entry(code: str) -> Code:
    """The catalog entry of ``code`` (KeyError if there is none)."""
    for _, codes in SECTIONS:
        for c in codes:
            if c.code == code:
                return c
    raise KeyError(code)


def markdown() -> str:
    """The error-code page."""
    return page.markdown(SECTIONS, REPORTED)
