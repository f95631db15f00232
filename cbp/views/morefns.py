"""More scalar functions of a view's expressions, with Spark's semantics: ``sign``/``signum``,
``pmod``, ``power``/``pow``, ``sqrt``, ``exp``, ``ln``/``log``, ``log10``, ``log2``, ``log(b, x)`` (each a
double, as Java's ``Math`` computes it: ``sqrt(-1)`` is NaN, a logarithm of a number <= 0 NULL),
``cbrt``, ``bround`` (HALF_EVEN), ``regexp(s, p)`` (``s RLIKE p``), ``nvl2``, ``substring_index``,
``instr``, ``locate`` and ``initcap``. :mod:`cbp.views.exprs` types them
with :data:`TYPES` (and :data:`NAMED`, functions sqlglot leaves anonymous) and evaluates them with
:data:`VALUES`.

    >>> from cbp.views.exprs import ev, parse_expr
    >>> ev(parse_expr("substring_index(s, '.', -2)"), {"s": "www.apache.org"})
    'apache.org'
    >>> ev(parse_expr("pmod(-7, 3)"), {}), ev(parse_expr("initcap(s)"), {"s": "hELLO wORLD"})
    (2, 'Hello World')
"""

from __future__ import annotations

import decimal
import fractions
import math
from collections.abc import Callable, Mapping
from typing import Any

from sqlglot import exp

from . import dateparts, regex, unixtime
from .functions import _int_literal, _round_type, rounded
from .ops import _mod
from .viewerror import ViewError
from .vtypes import arith, is_numeric, wider

__all__ = ["TYPES", "VALUES", "NAMED", "java_pow", "cbrt"]

_Infer = Callable[[exp.Expr, Mapping[str, str | None]], Any]
_Ev = Callable[[exp.Expr, Mapping[str, Any]], Any]
_Types = Mapping[str, str | None]


def _name(node: exp.Expr) -> str:
    if isinstance(node, exp.Anonymous):
        return node.name.lower()
    names: dict[type[exp.Expr], str] = {exp.StrPosition: "locate", exp.Log: "log", exp.Pow: "power"}
    return names.get(type(node)) or (node.sql_name().lower() if isinstance(node, exp.Func) else type(node).__name__)


def _want(node: exp.Expr, t: str | None, ok: Callable[[str], bool], what: str) -> None:
    if t is not None and not ok(t):
        raise ViewError("view-unsupported", f"{_name(node)}() of a {t} (it takes {what})", node=node)


def _doubles(node: exp.Expr, infer: _Infer, types: _Types) -> str:
    for a in (node.this, node.args.get("expression")):
        if a is not None:
            _want(node, infer(a, types), is_numeric, "numbers")
    return "float"


def java_pow(a: float, b: float) -> float:
    """``Math.pow``: Infinity where Python overflows, NaN where it has no real value.

    >>> java_pow(0.0, -1.0), java_pow(-8.0, 1 / 3), java_pow(10.0, 400.0)
    (inf, nan, inf)
    """
    try:
        return math.pow(a, b)
    except OverflowError:
        odd = b.is_integer() and int(b) % 2 == 1
        return -math.inf if a < 0 and odd else math.inf
    except ValueError:  # 0 to a negative power, a negative number to a fraction
        if a == 0:
            odd = b.is_integer() and int(b) % 2 == 1
            return -math.inf if math.copysign(1, a) < 0 and odd else math.inf
        return math.nan


def _unary(fn: Callable[[float], float | None]) -> Callable[[exp.Expr, Mapping[str, Any], _Ev], Any]:
    def value(node: exp.Expr, row: Mapping[str, Any], ev: _Ev) -> Any:
        x = ev(node.this, row)
        return None if x is None else fn(float(x))

    return value


def _sqrt(x: float) -> float:
    return math.sqrt(x) if x >= 0 else math.nan


def _exp(x: float) -> float:
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def _ln(x: float) -> float | None:
    return None if x <= 0 else math.log(x)  # (Spark: NULL for a number <= 0)


def _sign(x: float) -> float:
    return x if math.isnan(x) else float((x > 0) - (x < 0))


def _log_value(node: exp.Expr, row: Mapping[str, Any], ev: _Ev) -> Any:
    b, x = ev(node.this, row), ev(node.expression, row)
    if b is None or x is None or b <= 0 or x <= 0:
        return None
    b, x = float(b), float(x)
    return math.log10(x) if b == 10 else math.log(x) / math.log(b)


def _pow_value(node: exp.Expr, row: Mapping[str, Any], ev: _Ev) -> Any:
    a, b = ev(node.this, row), ev(node.expression, row)
    return None if a is None or b is None else java_pow(float(a), float(b))


def _pmod_type(node: exp.Expr, infer: _Infer, types: _Types) -> str | None:
    if len(node.expressions) != 2:
        raise ViewError("view-unsupported", "pmod() of other than two arguments", node=node)
    ts = [infer(a, types) for a in node.expressions]
    for t in ts:
        _want(node, t, is_numeric, "numbers")
    known = [t for t in ts if t is not None]
    if "float" in known:
        return "float"
    if not any(t.startswith("decimal(") for t in known):
        return "int" if known else None
    if len(known) < 2:
        return known[0]
    lits = [
        int(str(e.this)) if isinstance(e, exp.Literal) and str(e.this).isdigit() else None for e in node.expressions
    ]
    return arith("%", known[0], known[1], lits[0], lits[1])  # (an int literal: its digits, as Spark types it)


def _pmod_value(node: exp.Expr, row: Mapping[str, Any], ev: _Ev) -> Any:
    a, b = (ev(e, row) for e in node.expressions)
    r = _mod(a, b)  # Spark: r = a % b (NULL, or failing by zero, as %); if r < 0 then (r + b) % b
    return _mod(r + b, b) if r is not None and r < 0 else r


def _nvl2_type(node: exp.Expr, infer: _Infer, types: _Types) -> str | None:
    infer(node.this, types)
    ts = [t for t in (infer(node.args["true"], types), infer(node.args["false"], types)) if t is not None]
    if len({"number" if is_numeric(t) else t for t in ts}) > 1:
        raise ViewError("view-unsupported", f"nvl2() of {' and '.join(ts)} (Spark wants one type)", node=node)
    return wider(ts[0], ts[1]) if len(ts) == 2 else ts[0] if ts else None


def _nvl2_value(node: exp.Expr, row: Mapping[str, Any], ev: _Ev) -> Any:
    return ev(node.args["true"] if ev(node.this, row) is not None else node.args["false"], row)


def _typed(result: str, *specs: tuple[str, str]) -> Callable[[exp.Expr, _Infer, _Types], str]:
    def type_of(node: exp.Expr, infer: _Infer, types: _Types) -> str:
        for arg, want in specs:
            a = node.args.get(arg)
            t = infer(a, types) if a is not None else None
            if t is not None and t != want:
                raise ViewError("view-unsupported", f"{_name(node)}() of a {t} (it takes {want}s)", node=node)
        return result

    return type_of


def _substring_index_value(node: exp.Expr, row: Mapping[str, Any], ev: _Ev) -> Any:
    s, delim, n = ev(node.this, row), ev(node.args["delimiter"], row), ev(node.args["count"], row)
    if s is None or delim is None or n is None:
        return None
    if n == 0 or delim == "":
        return ""
    parts = s.split(delim)
    return delim.join(parts[:n]) if n > 0 else delim.join(parts[n:])


def _locate_value(node: exp.Expr, row: Mapping[str, Any], ev: _Ev) -> Any:
    pos = ev(node.args["position"], row) if node.args.get("position") is not None else 1
    if pos is None:
        return 0  # (Spark: as Hive)
    s, sub = ev(node.this, row), ev(node.args["substr"], row)
    if s is None or sub is None:
        return None
    if pos < 1:
        return 0
    return 1 if sub == "" else s.find(sub, pos - 1) + 1


def _initcap_value(node: exp.Expr, row: Mapping[str, Any], ev: _Ev) -> Any:
    s = ev(node.this, row)
    if s is None:
        return None
    out, start = [], True
    for c in s.lower():
        out.append(c.title() if start else c)  # the full title case ('ß' is 'Ss'), as Spark 4's
        start = c == " "
    return "".join(out)


def cbrt(x: float) -> float:
    """The cube root, correctly rounded as Java's ``Math.cbrt`` (the double whose cube is nearest ``x``).

    >>> cbrt(27.0), cbrt(-8.0), cbrt(2.0)
    (3.0, -2.0, 1.2599210498948732)
    """
    if x == 0 or not math.isfinite(x):
        return x
    exact = fractions.Fraction(x)
    guess = fractions.Fraction(math.copysign(abs(x) ** (1 / 3), x))
    r = float(guess - (guess**3 - exact) / (3 * guess**2))  # one exact Newton step: within an ulp
    candidates = [r, math.nextafter(r, math.inf), math.nextafter(r, -math.inf)]
    return min(candidates, key=lambda c: abs(fractions.Fraction(c) ** 3 - exact))


_HALF_EVEN = decimal.Context(prec=1000, rounding=decimal.ROUND_HALF_EVEN)  # (a double: up to 309 digits)


def _bround_value(node: exp.Expr, row: Mapping[str, Any], ev: _Ev) -> Any:
    """``bround(x [, s])``: ``round`` with HALF_EVEN (a double by its shortest digits, as Spark's)."""
    scale = _int_literal(node, node.expressions[1] if len(node.expressions) > 1 else None, 0)
    return rounded(ev(node.expressions[0], row), scale, _HALF_EVEN)


def _bround_type(node: exp.Expr, infer: _Infer, types: _Types) -> str | None:
    if not 1 <= len(node.expressions) <= 2:
        raise ViewError("view-unsupported", "bround() of other than one or two arguments", node=node)
    scale = node.expressions[1] if len(node.expressions) > 1 else None
    return _round_type(exp.Round(this=node.expressions[0], decimals=scale), infer, types)


def _rlike_node(node: exp.Expr) -> exp.Expr:
    """``regexp(s, p)`` as ``s RLIKE p`` (kept on the node)."""
    got = node.meta.get("cbp_rlike")
    if got is None:
        if len(node.expressions) != 2:
            raise ViewError("view-unsupported", "regexp() of other than two arguments", node=node)
        got = exp.RegexpLike(this=node.expressions[0], expression=node.expressions[1])
        node.meta["cbp_rlike"] = got
    return got


def _regexp_type(node: exp.Expr, infer: _Infer, types: _Types) -> str | None:
    try:
        return regex.TYPES[exp.RegexpLike](_rlike_node(node), infer, types)
    except ViewError as e:
        raise ViewError(e.code, e.message.replace("rlike()", "regexp()"), node=node) from None


def _regexp_value(node: exp.Expr, row: Mapping[str, Any], ev: _Ev) -> Any:
    return regex.VALUES[exp.RegexpLike](_rlike_node(node), row, ev)


#: The type of each function node (its arguments checked).
TYPES: dict[type[exp.Expr], Callable[[exp.Expr, _Infer, _Types], str | None]] = {
    exp.Sign: _doubles,
    exp.Pow: _doubles,
    exp.Sqrt: _doubles,
    exp.Exp: _doubles,
    exp.Ln: _doubles,
    exp.Log: _doubles,
    exp.Cbrt: _doubles,
    exp.Nvl2: _nvl2_type,
    exp.SubstringIndex: _typed("string", ("this", "string"), ("delimiter", "string"), ("count", "int")),
    exp.StrPosition: _typed("int", ("this", "string"), ("substr", "string"), ("position", "int")),
    exp.Initcap: _typed("string", ("this", "string")),
}
#: The value of each function node on a row.
VALUES: dict[type[exp.Expr], Callable[[exp.Expr, Mapping[str, Any], _Ev], Any]] = {
    exp.Sign: _unary(_sign),
    exp.Pow: _pow_value,
    exp.Sqrt: _unary(_sqrt),
    exp.Exp: _unary(_exp),
    exp.Ln: _unary(_ln),
    exp.Log: _log_value,
    exp.Cbrt: _unary(cbrt),
    exp.Nvl2: _nvl2_value,
    exp.SubstringIndex: _substring_index_value,
    exp.StrPosition: _locate_value,
    exp.Initcap: _initcap_value,
}
#: Functions sqlglot parses as anonymous: name -> (type, value).
NAMED: dict[str, tuple[Callable[[exp.Expr, _Infer, _Types], str | None], Callable[..., Any]]] = {
    "pmod": (_pmod_type, _pmod_value),
    "bround": (_bround_type, _bround_value),
    "regexp": (_regexp_type, _regexp_value),
    **unixtime.NAMED,  # make_date()
    **dateparts.NAMED,  # date_part(), datepart()
}
