"""The error-code page, ``docs/reference/error-codes.md``, written from the catalog."""

from __future__ import annotations

from .entry import Code, Reported

_INTRO = """# Error codes

Every error cbp reports has a stable code, printed as `cbp COMMAND: error [CODE]: message` (and in
Python as the `code` attribute of the `cbp.errors` exception). The message names the file, stage,
flow or record; the code is what scripts and tests should match. Nothing is landed or committed
by a command that fails with one of them. The exit code follows the error's class: 2 a mistake in
the YAML or the command (`SpecError`, `UsageError`), 3 bad input records (`InputError`), 4 user
code failed (`UserCodeError`), 5 a runtime or storage problem (`RuntimeStateError`, and an
`OSError` cbp did not expect), 6 another run holds the home (`BusyError`); 130 interrupted.

The mistakes of a pipeline YAML are reported together: every one that does not follow from another
(a stage reading an unknown flow is not also checked against that flow's schema), one a line, each
with its file, line, stage or flow and code; the `SpecError`'s `code` is the first one's and its
`problems` lists every `(code, message)`.

This page is generated from the catalog in `cbp/errorcodes/`, which `tests/test_error_catalog.py`
checks against every place cbp raises a code; after changing the catalog, regenerate it with
`python -m cbp.errorcodes > docs/reference/error-codes.md`.
"""


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown(sections: list[tuple[str, list[Code]]], reported: list[Reported]) -> str:
    """The error-code page of the codes in ``sections`` (a table each) and the ``reported`` ones."""
    out = [_INTRO]
    for title, codes in sections:
        out += [f"## {title}", "", "| code | raised as | exit | what it means | what to do |", "|---|---|---|---|---|"]
        for c in codes:
            classes = ", ".join(f"`{k.__name__}`" for k in c.classes)
            exits = ", ".join(str(e) for e in c.exits)
            out.append(f"| `{c.code}` | {classes} | {exits} | {_cell(c.meaning)} | {_cell(c.hint)} |")
        out.append("")
    out += [
        "## Reported, not raised",
        "",
        "Warnings, the lines of a refused plan (under `plan-refused`) and inbox files "
        "set aside: they carry a code but end no command by themselves.",
        "",
        "| code | where | what it means | what to do |",
        "|---|---|---|---|",
    ]
    out += [f"| `{r.code}` | {r.where} | {_cell(r.meaning)} | {_cell(r.hint)} |" for r in reported]
    return "\n".join(out) + "\n"
