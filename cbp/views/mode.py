"""The SQL semantics a view is compiled with: Spark's ANSI mode (``spark.sql.ansi.enabled=true``, Spark
4's default) or its non-ANSI mode, where a division by zero, a value a cast cannot convert and a
decimal that overflows its type are NULL and an integer overflow wraps as Java's does.

The mode is the session's setting when the pipeline is loaded (:func:`session_ansi`: the session given
to :class:`cbp.Pipeline`, else ``CBP_SPARK_CONF``), fixed when a view is compiled and recorded in its
stages' plans (``"ansi": false``), so a change of the setting is a change of every view
(``cbp plan`` shows them rebuilt), never a view whose rows mix both. In non-ANSI mode each compiled
expression is wrapped in ``cbp_lax(expr)`` (:data:`LAX_FN`), which evaluates it under that mode, and
each view translator runs under its plan's mode (:func:`per_plan`).

    >>> ansi()
    True
    >>> with semantics(False):
    ...     wrap64(2**63), ansi()
    (-9223372036854775808, False)
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import hashlib
import json
import sys
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["ANSI_KEY", "LAX_FN", "ansi", "semantics", "enter", "leave", "session_ansi", "pipeline_ansi"]
__all__ += ["recorded", "per_plan", "wrap64", "wrap_bits", "int_result"]

#: The Spark setting a view's mode follows.
ANSI_KEY = "spark.sql.ansi.enabled"
#: The internal function of a compiled expression evaluated in non-ANSI mode: ``cbp_lax(expr)``.
LAX_FN = "cbp_lax"
_ANSI: contextvars.ContextVar[bool] = contextvars.ContextVar("cbp_view_ansi", default=True)
_LOW, _HIGH = -(2**63), 2**63


def ansi() -> bool:
    """Whether views are compiled and evaluated here with Spark's ANSI semantics (the default)."""
    return _ANSI.get()


@contextlib.contextmanager
def semantics(ansi: bool) -> Iterator[None]:
    """Compile or evaluate views in the block with ANSI (``True``) or non-ANSI semantics."""
    token = _ANSI.set(ansi)
    try:
        yield
    finally:
        _ANSI.reset(token)


def enter(ansi: bool) -> contextvars.Token[bool]:
    """Evaluate with ``ansi`` semantics until :func:`leave` (the fast form of :func:`semantics`)."""
    return _ANSI.set(ansi)


def leave(token: contextvars.Token[bool]) -> None:
    """Back to the semantics before :func:`enter`."""
    _ANSI.reset(token)


def _parse(value: Any) -> bool:
    return str(value).strip().lower() != "false"


def session_ansi(spark: Any = None) -> bool:
    """``spark.sql.ansi.enabled`` of ``spark`` (a session given to the Python API), else of
    ``CBP_SPARK_CONF`` (the settings the session cbp starts gets), else Spark 4's default: true.

    >>> session_ansi()
    True
    """
    if spark is not None:
        try:
            return _parse(spark.conf.get(ANSI_KEY, "true"))
        except Exception:  # noqa: BLE001 - a session that cannot answer: as the settings say
            pass
    from .. import settings

    value = "true"
    for item in settings.current().spark_conf.split(";"):  # key=value;... (a bad item: the session says so)
        key, _, text = item.partition("=")
        value = text if key.strip() == ANSI_KEY else value
    return _parse(value)


def pipeline_ansi(spark: Any = None) -> bool | None:
    """The mode of the session a :class:`cbp.Pipeline` runs on, when it is known before it runs: the
    session given, else this process's active classic session (the one cbp would use); None: as
    ``CBP_SPARK_CONF`` says (:func:`session_ansi`)."""
    if spark is None:
        from .. import settings

        module = sys.modules.get("pyspark.sql")
        if settings.current().remote or module is None:
            return None
        spark = module.SparkSession.getActiveSession()
        if spark is None:
            return None
    return session_ansi(spark)


def recorded(raw: dict[str, Any]) -> dict[str, Any]:
    """A generated stage's raw YAML shape with the mode in its plan (``params['cbp_view']['ansi']``, only
    when non-ANSI: an ANSI view's plan is as before), its plan id hashed again."""
    plan = (raw.get("params") or {}).get("cbp_view")
    if ansi() or not isinstance(plan, dict):
        return raw
    plan = {k: v for k, v in plan.items() if k != "id"} | {"ansi": False}
    plan["id"] = hashlib.sha1(json.dumps(plan, sort_keys=True).encode()).hexdigest()[:16]
    return {**raw, "params": {**raw["params"], "cbp_view": plan}}


def per_plan(fn: Callable[..., None]) -> Callable[..., None]:
    """A view translator run under its plan's mode (``out.params['cbp_view']``)."""

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> None:
        out = kwargs["out"] if "out" in kwargs else args[-1]  # (cbp passes it by name; a test may not)
        if out.params["cbp_view"].get("ansi", True):
            return fn(*args, **kwargs)
        token = _ANSI.set(False)
        try:
            return fn(*args, **kwargs)
        finally:
            _ANSI.reset(token)

    return run


def wrap64(v: int) -> int:
    """``v`` wrapped to a signed 64-bit int, as Java's ``long`` arithmetic wraps."""
    return (v - _LOW) % 2**64 + _LOW


def wrap_bits(v: int, bits: int) -> int:
    """``v`` wrapped to a signed int of ``bits`` bits (Java's narrowing of a ``long``)."""
    low = -(2 ** (bits - 1))
    return (v - low) % 2**bits + low


def int_result(v: int) -> int:
    """An int arithmetic result: past 64 bits it wraps in non-ANSI mode (ANSI: left for
    :func:`cbp.views.vtypes.conform` to fail with ``view-overflow``)."""
    if _LOW <= v < _HIGH or _ANSI.get():
        return v
    return wrap64(v)
