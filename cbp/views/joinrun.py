"""The join translator of the stages views compile to (:mod:`cbp.views.plan`): one two-input step of
a view's join chain (:mod:`cbp.views.joins`), signed (it sums ``_diff``), keyed by the join key.

DBSP's rules: an inner join keeps both inputs' rows by key and emits ``dA ⋈ B + A ⋈ dB + dA ⋈ dB``.
An outer, semi or anti join also knows, for each row of a side it keeps (the left side of a LEFT
JOIN, a semi or anti join; the right of a RIGHT JOIN; both of a FULL JOIN), how many rows of the
other side match it: the other side's count at the key, or, when a match has conditions besides
the key (``m``, kept per row in the state), the count of the rows meeting them. A LEFT JOIN's
NULL-padded row is written when its count goes to 0 and retracted when it leaves 0; a semi join
writes the row while its count is positive, an anti join while it is 0.

An inner join at a key of many rows (more than :data:`WIDE`: a join on a key of few values, such as
TPC-H's nation key) also keeps a *directory* per side: row ``(DIR + side, "")``, whose ``d`` lists
the side's rows with their counts while it has at most :data:`LISTED`, else is NULL (many). A change
of one side then reads the other side's directory and its own changed rows (``get_many``), not the
key's rows: ``dA ⋈ B`` needs ``B``, never ``A``. A key without directories (an older home's, a bulk
build's, a narrow key's), or whose other side is many, is read whole, which writes them when wide.

    >>> PRESERVED["left"], PRESERVED["full"]
    ((0,), (0, 1))
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from .compiled import conformer, expr_fn
from .joins import PRESERVED
from .mode import per_plan
from .vtypes import decode_key, key_text

__all__ = ["SKIP", "join", "DIR", "LISTED", "WIDE"]

#: The key of records no group or join takes (filtered out, or a NULL join key): dropped unread.
SKIP = "-"
#: ``s`` of a side's directory row (``DIR + side``; its ``r`` is ``""``).
DIR = 2
#: The distinct rows of a side a directory lists; above it the directory says "many" (``d`` NULL).
LISTED = 64
#: The distinct rows (both sides) above which an inner join's key keeps directories.
WIDE = 64


def _consolidated(rows: Iterable[dict[str, Any]], fields: list[str]) -> dict[str, int]:
    """Each distinct row (JSON of its fields' values) with the sum of its ``_diff``, zeros dropped."""
    out: dict[str, int] = {}
    for r in rows:
        k = key_text([r[f] for f in fields])
        out[k] = out.get(k, 0) + r["_diff"]
    return {k: d for k, d in out.items() if d}


class _Joined:
    """The output rows of one key: each row (after the filter and projection) with its weight."""

    def __init__(self, plan: dict[str, Any]) -> None:
        self.plan = plan
        self.names = [n for n, _ in plan["cols"]]
        self.exprs = [(expr_fn(e), conformer(plan["types"].get(n), plan["out"])) for n, e in plan["cols"]]
        self.filter = expr_fn(plan["filter"]) if plan["filter"] is not None else None
        self.match = expr_fn(plan["match"]) if plan.get("match") is not None else None
        self.prefixes = plan.get("prefixes") or ["l__", "r__"]
        self.nulls = [{self.prefixes[s] + f: None for f in plan["fields"][s]} for s in (0, 1)]
        self.rows: dict[tuple[Any, ...], int] = {}
        self.never = False  # a NULL key (a kept side's rows routed together): nothing matches
        self._decoded: dict[tuple[int, str], dict[str, Any]] = {}

    def row(self, side: int, text: str) -> dict[str, Any]:
        """The row ``text`` of ``side`` as an environment (its fields with the side's prefix)."""
        got = self._decoded.get((side, text))
        if got is None:
            values = decode_key(text, self.plan["ftypes"][side])
            got = dict(zip((self.prefixes[side] + f for f in self.plan["fields"][side]), values))
            self._decoded[(side, text)] = got
        return got

    def matches(self, left: str, right: str) -> bool:
        if self.never:
            return False
        return self.match is None or self.match(self.row(0, left) | self.row(1, right)) is True

    def emit(self, env: dict[str, Any], weight: int) -> None:
        if self.filter is not None and self.filter(env) is not True:
            return
        vals = tuple(to(f(env)) for f, to in self.exprs)
        self.rows[vals] = self.rows.get(vals, 0) + weight

    def add(self, left: dict[str, int], right: dict[str, int]) -> None:
        for lt, ld in left.items():
            for rt, rd in right.items():
                if self.matches(lt, rt):
                    self.emit(self.row(0, lt) | self.row(1, rt), ld * rd)

    def alone(self, side: int, text: str, weight: int, padded: bool) -> None:
        """A row of ``side`` without a match: NULL-padded (outer) or as it is (semi, anti)."""
        env = self.row(side, text)
        if padded:
            env = (env | self.nulls[1]) if side == 0 else (self.nulls[0] | env)
        self.emit(env, weight)

    def count(self, side: int, text: str, others: dict[str, int]) -> int:
        """How many rows of ``others`` (the other side, with their multiplicity) match row ``text``."""
        if self.match is None:
            return 0 if self.never else sum(others.values())
        pair = (lambda o: (text, o)) if side == 0 else (lambda o: (o, text))
        return sum(w for o, w in others.items() if self.matches(*pair(o)))


def _added(old: dict[str, int], delta: dict[str, int], plan: dict[str, Any], key: str) -> dict[str, int]:
    new = dict(old)
    for text, d in delta.items():
        n = new.get(text, 0) + d
        if n < 0:
            raise ValueError(f"view '{plan['out']}', join key {key}: a row retracted more often than it was added")
        if n:
            new[text] = n
        else:
            new.pop(text, None)
    return new


def _kept(
    joined: _Joined,
    how: str,
    p: int,
    old: list[dict[str, int]],
    new: list[dict[str, int]],
    delta: Any,
    m: list[dict[str, int]],
) -> set[str]:
    """Update the match counts ``m`` of kept side ``p``'s rows and emit the change of its rows without
    a match (outer, anti) or with one (semi); return the rows whose count changed."""
    o = 1 - p
    if joined.match is None:  # every row's count is the other side's: only a change through 0 matters
        before, after = (0, 0) if joined.never else (sum(old[o].values()), sum(new[o].values()))
        rows = set(delta[p]) | (set(old[p]) if (before == 0) != (after == 0) else set())
        counts = {t: (before, after) for t in rows}
    else:
        rows = set(delta[p]) | (set(old[p]) if delta[o] else set())
        counts = {}
        for t in rows:
            was = m[p].get(t, 0) if t in old[p] else 0
            now = was + joined.count(p, t, delta[o]) if t in old[p] else joined.count(p, t, new[o])
            counts[t] = (was, now)
    changed = set()
    hit = (lambda c: c > 0) if how == "semi" else (lambda c: c == 0)  # the row is written while hit(count)
    for t, (was, now) in counts.items():
        d = (new[p].get(t, 0) if hit(now) else 0) - (old[p].get(t, 0) if hit(was) else 0)
        if d:
            joined.alone(p, t, d, how not in ("semi", "anti"))
        if joined.match is not None and (was != now or t not in old[p]):
            m[p][t] = now
            changed.add(t)
    return changed


def _write_rows(
    out: Any, joined: _Joined, how: str, new: list[dict[str, int]], texts: list[set[str]], m: list[dict[str, int]]
) -> None:
    """Write (or delete) the stored rows ``texts`` of each side as ``new`` counts them."""
    for side in (0, 1):
        for text in texts[side]:
            n = new[side].get(text, 0)
            if not n:
                out.state.delete((side, text))
            elif joined.match is not None and how != "inner":
                out.state.write({"s": side, "r": text, "n": n, "m": m[side].get(text, 0)})
            elif joined.plan.get("dirs"):
                out.state.write({"s": side, "r": text, "n": n, "d": None})
            else:
                out.state.write({"s": side, "r": text, "n": n})


def _directory(side: int, rows: dict[str, int]) -> dict[str, Any]:
    """The directory row of ``side`` holding ``rows`` (their texts and counts; NULL: more than LISTED;
    ``n`` 0, so that a side of many rows keeps one unchanged row)."""
    listed = json.dumps(rows, sort_keys=True, separators=(",", ":")) if len(rows) <= LISTED else None
    return {"s": DIR + side, "r": "", "n": 0, "d": listed}


def _by_directory(key: str, state: Any, delta: list[dict[str, int]], plan: dict[str, Any], out: Any) -> _Joined | None:
    """An inner join's step from the directories of the key (see the module): the other side's rows
    from its directory, the changed rows' counts read one by one. None (nothing written) when a side
    the change needs is not listed: the key has no directories, or that side has many rows."""
    got = state.get_many([(DIR, ""), (DIR + 1, "")])
    dirs = [got.get((DIR + s, "")) for s in (0, 1)]
    listed = [json.loads(d["d"]) if d is not None and d.get("d") is not None else None for d in dirs]
    if any(delta[1 - s] and listed[s] is None for s in (0, 1)):
        return None
    want = [(s, t) for s in (0, 1) if listed[s] is None for t in delta[s]]
    found = state.get_many(want) if want else {}
    old: list[dict[str, int]] = [{t: found[(s, t)]["n"] for t in delta[s] if (s, t) in found} for s in (0, 1)]
    for s in (0, 1):
        old[s] = listed[s] or old[s]  # a listed side's whole rows (its changed rows' counts among them)
    joined = _Joined(plan)
    joined.never = None in json.loads(key)
    joined.add(delta[0], old[1])
    joined.add(old[0], delta[1])
    joined.add(delta[0], delta[1])
    new = [_added(old[s], delta[s], plan, key) for s in (0, 1)]
    _write_rows(out, joined, "inner", new, [set(delta[0]), set(delta[1])], [{}, {}])
    if all(listed[s] is not None and not new[s] for s in (0, 1)):  # the key is empty: so are its directories
        for s in (0, 1):
            out.state.delete((DIR + s, ""))
        return joined
    for s in (0, 1):
        if listed[s] is not None and delta[s]:
            out.state.write(_directory(s, new[s]))
    return joined


def _narrow(state: Any) -> bool:
    """Whether the key is known to hold at most WIDE rows (so no directories: they are not looked
    up, a read that costs as much as the key's few rows), from what the state read already holds."""
    stored = getattr(state, "stored", None)
    n = stored() if stored is not None else None
    return n is not None and n <= WIDE


def _by_rows(key: str, state: Any, delta: list[dict[str, int]], plan: dict[str, Any], out: Any, dirs: bool) -> _Joined:
    """A join step from every stored row of the key; with ``dirs`` (an inner join), the key's
    directories written when it holds more than WIDE rows, else deleted."""
    how = plan.get("how", "inner")
    old: list[dict[str, int]] = [{}, {}]
    m: list[dict[str, int]] = [{}, {}]
    had = set()
    for row in state:
        if row["s"] >= DIR:
            had.add(row["s"] - DIR)
            continue
        old[row["s"]][row["r"]] = row["n"]
        m[row["s"]][row["r"]] = row.get("m") or 0
    joined = _Joined(plan)
    joined.never = None in json.loads(key)
    if how != "semi" and how != "anti":
        joined.add(delta[0], old[1])
        joined.add(old[0], delta[1])
        joined.add(delta[0], delta[1])
    new = [_added(old[s], delta[s], plan, key) for s in (0, 1)]
    recount = [_kept(joined, how, p, old, new, delta, m) if p in PRESERVED[how] else set() for p in (0, 1)]
    _write_rows(out, joined, how, new, [set(delta[s]) | recount[s] for s in (0, 1)], m)
    if dirs and len(new[0]) + len(new[1]) > WIDE:
        for s in (0, 1):
            out.state.write(_directory(s, new[s]))
    elif dirs:
        for s in had:
            out.state.delete((DIR + s, ""))
    return joined


@per_plan
def join(key: str, state: Any, left: Iterable[dict[str, Any]], right: Iterable[dict[str, Any]], out: Any) -> None:
    """One join step (plan ``how``: inner, left, right, full, semi, anti): the key's stored rows of each
    side (row key: side, row) joined with the other side's new records, and the new records with
    each other; the rows without a match of a kept side padded (or kept: semi, anti); the stored rows
    and match counts updated. An inner join reads the key's directories first (see the module).

    Example: key ``["c1"]`` holding two order rows of a LEFT JOIN and no customer: a customer row
    arriving (``_diff`` 1) retracts the two NULL-padded rows and writes the two joined rows.
    """
    if key == SKIP:
        return
    plan = out.params["cbp_view"]
    delta = [_consolidated(left, plan["fields"][0]), _consolidated(right, plan["fields"][1])]
    if not delta[0] and not delta[1]:
        return
    dirs = plan.get("dirs") is True and hasattr(state, "get_many")  # an inner join's (plan.py: state field d)
    narrow = dirs and _narrow(state)
    joined = _by_directory(key, state, delta, plan, out) if dirs and not narrow else None
    if joined is None:
        joined = _by_rows(key, state, delta, plan, out, dirs)
    w = getattr(out, plan["out"])
    for vals, d in joined.rows.items():
        if d:
            w.write(dict(zip(joined.names, vals)) | {"_diff": d})
