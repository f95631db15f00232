"""A view's common table expressions (``WITH name [(cols)] AS (SELECT ...), ... SELECT ...``), each
compiled once as internal view ``<v>__cte<i>`` and read by name from every place that reads it.

Before a view's tree is hoisted (:mod:`cbp.views.hoist`), :func:`inline_ctes` walks its ``WITH``
clauses outer first (those of subqueries too). A CTE that is read is compiled by the same compiler
over the pipeline's flows and the CTEs before it (a CTE reads earlier ones; its own name inside its
body is the flow of that name, as Spark reads a non-recursive CTE); each table that reads it becomes
``<v>__cte<i> AS <its alias or the CTE's name>``. A CTE's name shadows a flow of the same name. A
CTE nobody reads is not compiled (Spark drops it too). A column list (``WITH t (a, b) AS``) renames
the body's columns. ``WITH RECURSIVE`` is refused (``view-unsupported``: recursion).

    >>> import sqlglot
    >>> tree = sqlglot.parse_one("WITH s AS (SELECT k FROM t) SELECT a.k FROM s a JOIN s b ON a.k = b.k", read="spark")
    >>> inline_ctes(tree, "", "v", {"t": {"k": "int"}}, lambda n, tree, f: {"k": "int"})
    {'v__cte1': {'k': 'int'}}
    >>> tree.sql()
    'SELECT a.k FROM v__cte1 AS a JOIN v__cte1 AS b ON a.k = b.k'
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from sqlglot import exp

from .query import _view_refusal, defining_cte

__all__ = ["inline_ctes"]

Flows = Mapping[str, Mapping[str, str]]
Compile = Callable[[str, exp.Expr, Flows], dict[str, str]]


def _with_of(node: exp.Expr) -> exp.With | None:
    w = node.args.get("with_") or node.args.get("with")
    return w if isinstance(w, exp.With) else None


def inline_ctes(
    tree: exp.Expr, sql: str, view: str, flows: Flows, compile: Compile | None
) -> dict[str, dict[str, str]]:
    """Compile each read CTE of ``tree`` (in place) as an internal view; their flows (name -> field -> type)."""
    made: dict[str, dict[str, str]] = {}
    while True:
        owner = next((n for n in tree.walk() if _with_of(n) is not None), None)  # outer first
        if owner is None:
            return made
        w = _with_of(owner)
        assert w is not None
        if w.args.get("recursive"):
            raise _view_refusal(
                "view-unsupported", "WITH RECURSIVE (recursion) is not supported", None, sql, "RECURSIVE"
            )
        for cte in list(w.expressions):
            readers = [t for t in owner.find_all(exp.Table) if defining_cte(t) is cte]
            if not readers or compile is None:
                continue
            name = _fresh(f"{view}__cte", {**flows, **made})
            columns = cte.args["alias"].args.get("columns") if cte.args.get("alias") is not None else None
            if columns:
                _rename_columns(cte.this, columns, sql)
            made[name] = compile(name, cte.this, {**flows, **made})
            for t in readers:
                table = exp.Table(
                    this=exp.to_identifier(name), alias=exp.TableAlias(this=exp.to_identifier(t.alias_or_name))
                )
                table.this.meta.update(t.this.meta)  # a message about it points at the name in the SQL
                t.replace(table)
        owner.set("with_" if "with_" in owner.args else "with", None)


def _rename_columns(body: exp.Expr, names: list[exp.Expr], sql: str) -> None:
    """``WITH t (a, b) AS (body)``: the names of the first SELECT's columns (the first branch's of a set
    operation, whose names are its result's)."""
    first = body
    while isinstance(first, exp.SetOperation):
        first = first.this
    if isinstance(first, exp.Subquery):
        first = first.unnest()
    cols = first.expressions if isinstance(first, exp.Select) else []
    if len(cols) != len(names) or any(isinstance(c, exp.Star) or c.find(exp.Star) for c in cols):
        raise _view_refusal(
            "view-unsupported",
            f"a CTE's column list of {len(names)} names for {len(cols)} columns (or *)",
            names[0],
            sql,
        )
    first.set(
        "expressions", [exp.alias_(c.this if isinstance(c, exp.Alias) else c, n.name) for c, n in zip(cols, names)]
    )


def _fresh(prefix: str, taken: Mapping[str, object]) -> str:
    i = 1
    while f"{prefix}{i}" in taken:
        i += 1
    return f"{prefix}{i}"
