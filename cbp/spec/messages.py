"""Internal: a pydantic validation error of a pipeline YAML as one message naming lines, stages and flows.

>>> describe(["stages", "count", "inputs", "0", "flow"])
"stage 'count' inputs.[0].flow"
"""

from __future__ import annotations

from pydantic import ValidationError

__all__ = ["pydantic_messages", "describe"]

#: The most validation errors of one file reported (a file of many mistakes is usually not a pipeline file).
MAX_REPORTED = 50


def pydantic_messages(e: ValidationError, lines: dict[tuple[str, ...], int]) -> list[str]:
    """Each validation error (at most :data:`MAX_REPORTED`) as a message naming its line, stage or flow."""
    parts = []
    for err in e.errors()[:MAX_REPORTED]:
        loc = [str(x) for x in err["loc"]]
        keys = tuple(x for x in loc if not x.isdigit())
        line = None
        for n in range(len(keys), -1, -1):
            line = lines.get(keys[:n])
            if line:
                break
        what = {"missing": "missing (required)", "extra_forbidden": "unknown field"}.get(err["type"], err["msg"])
        label = describe(loc)
        parts.append((f"line {line}: " if line else "") + f"{label}: {what}")
    return parts


def describe(loc: list[str]) -> str:
    if len(loc) >= 2 and loc[0] in ("stages", "flows"):
        rest = ".".join(x if not x.isdigit() else f"[{x}]" for x in loc[2:])
        return f"{loc[0][:-1]} '{loc[1]}'" + (f" {rest}" if rest else "")
    return ".".join(loc) or "file"
