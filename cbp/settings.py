"""cbp's environment settings: every ``CBP_*`` variable, read here and nowhere else, into one typed
object (docs/reference/settings.md lists them).

:func:`current` gives the settings of this process. It reads the environment when a ``CBP_*``
variable changed since the last read (tests set them; a process that does not change them reads
them once). A stage epoch's tasks do not read their own environment for what the driver knows:
the driver puts it in the task plan (:class:`cbp.engine.task.plan.TaskPlan`).

A value cbp cannot read raises :class:`~cbp.errors.RuntimeStateError` (code ``bad-setting``).

    >>> s = Settings.from_env({"CBP_COLUMNAR": "0", "CBP_STATE_CACHE_MB": "64"})
    >>> s.columnar, s.state_cache_mb, s.placement, s.spark_master
    (False, 64.0, True, 'local[*,2]')
    >>> Settings.from_env({}).small_epoch_records is None
    True
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import TypeVar

from .errors import RuntimeStateError

__all__ = ["Settings", "Variable", "VARIABLES", "current"]

T = TypeVar("T")


@dataclass(frozen=True)
class Variable:
    """One ``CBP_*`` variable: the :class:`Settings` field it sets, its default as documented, what it does."""

    name: str
    field: str
    default: str
    meaning: str


#: Every variable cbp reads, in the order of docs/reference/settings.md.
VARIABLES: tuple[Variable, ...] = (
    Variable("CBP_SPARK_MASTER", "spark_master", "`local[*,2]`", "the Spark master of the session cbp creates"),
    Variable(
        "CBP_REMOTE",
        "remote",
        "`SPARK_REMOTE`, else none",
        "a Spark Connect server's URL (`sc://HOST:PORT`): cbp opens a Connect session there instead of starting "
        "a JVM (`cbp --remote`; docs/howto/spark-connect.md)",
    ),
    Variable(
        "CBP_CONNECT_SESSION",
        "connect_session",
        "`shared`",
        "`shared`: cbp's commands share one Spark Connect session per user and server (one Python daemon "
        "on the server); `process`: a session per process, released at exit",
    ),
    Variable(
        "CBP_SPARK_CONF",
        "spark_conf",
        "empty",
        "more Spark settings, `key=value` separated by `;` (its `spark.sql.ansi.enabled` is also the SQL semantics "
        "SQL views are compiled with, see docs/howto/sql-views.md)",
    ),
    Variable("CBP_DRIVER_MEMORY", "driver_memory", "`4g`", "`spark.driver.memory` of the session cbp creates"),
    Variable(
        "CBP_DRIVER_JAVA_OPTIONS",
        "driver_java_options",
        "empty",
        "more options of the driver JVM cbp starts, after its own, and of the Spark Connect server that "
        "`scripts/connect` starts (e.g. `-XX:TieredStopAtLevel=1`: less CPU for short-lived drivers and servers "
        "such as the test suite's, slower long epochs)",
    ),
    Variable("CBP_SPARK_LOG_LEVEL", "spark_log_level", "`ERROR` (`WARN` with `CBP_VERBOSE`)", "Spark's log level"),
    Variable("CBP_VERBOSE", "verbose", "off", "set and not `0`: show Spark's and the JVM's own lines"),
    Variable("CBP_JARS_DIR", "jars_dir", "`state/jars` of the repository", "where `scripts/jars` put the jars"),
    Variable("CBP_JARS_ON_WORKERS", "jars_on_workers", "off", "`1`: the workers have the jars at the same path"),
    Variable("CBP_JVM_CACHE", "jvm_cache", "`$XDG_CACHE_HOME/cbp/jvm`", "where the driver JVM's class archives are"),
    Variable("CBP_JVM_ARCHIVE", "jvm_archive", "on", "`0`: the driver JVM starts without a class archive"),
    Variable("CBP_JVM_ROUTING", "jvm_routing", "on", "`0`: inputs are always routed by Python"),
    Variable("CBP_PLACEMENT", "placement", "on", "`0`: direct-mode tasks are not placed on a cluster"),
    Variable("CBP_COLUMNAR", "columnar", "on", "`0`: batch translators never take the columnar path"),
    Variable(
        "CBP_BULK_BUILD", "bulk_build", "on", "`0`: a view's first build runs its rows through Python (no Spark SQL)"
    ),
    Variable(
        "CBP_SHARE_STATE",
        "share_state",
        "on",
        "`0`: views do not share generated stages (each keeps its own state, as cbp before shared state "
        "compiled them: a home of that cbp runs without an upgrade; docs/howto/sql-views.md)",
    ),
    Variable(
        "CBP_SMALL_EPOCH_RECORDS",
        "small_epoch_records",
        "500 (`cbp.engine.driver.smallepoch.SMALL_RECORDS`)",
        "up to how many new records the driver routes an epoch (no shuffle); `0`: never",
    ),
    Variable(
        "CBP_DRIVER_RUN_RECORDS",
        "driver_run_records",
        "`cbp.engine.driver.smallepoch.DRIVER_RUN`",
        "up to how many envelopes a SQL view's small epoch runs in the driver itself (no Spark job; about 210 bytes "
        "of the driver's memory each for TPC-H Q1 and Q6); `0`: never",
    ),
    Variable(
        "CBP_STATE_SCAN_FRACTION",
        "state_scan_fraction",
        "the scan rule's (`cbp.engine.task.bipindex.SCAN_FRACTION`)",
        "the fraction of row groups read above which a task scans its state partition",
    ),
    Variable("CBP_STATE_CACHE_MB", "state_cache_mb", "2048", "a worker's state file cache, in MB"),
    Variable(
        "CBP_STATE_INDEX_MB",
        "state_index_mb",
        "`cbp.engine.task.indexpages.INDEX_MB`",
        "a worker's partition index pages, in MB",
    ),
    Variable(
        "CBP_TASK_MEMORY_MB",
        "task_memory_mb",
        "none (cbp's own defaults)",
        "what a task may hold in memory, in MB (may be below 1024): half for the state cache, an eighth for "
        "index pages, a quarter for a small epoch's envelopes, a sixteenth per Arrow batch "
        "(`cbp.engine.driver.taskmemory`)",
    ),
    Variable("CBP_LEASE_TTL", "lease_ttl", "30", "seconds an object-store home's lease lasts unrenewed"),
    Variable("CBP_LEASE_RENEW", "lease_renew", "a third of the TTL", "seconds between lease renewals"),
    Variable("CBP_FAULT", "fault", "none", "a fault to inject (crash tests, `cbp.faults`)"),
)


@dataclass(frozen=True)
class Settings:
    """The ``CBP_*`` settings of a process (:data:`VARIABLES`); None: not set (the user of the value
    applies its default)."""

    spark_master: str = "local[*,2]"
    remote: str | None = None
    connect_session: str = "shared"
    spark_conf: str = ""
    driver_memory: str = "4g"
    driver_java_options: str = ""
    spark_log_level: str | None = None
    verbose: bool = False
    jars_dir: str | None = None
    jars_on_workers: bool = False
    jvm_cache: str | None = None
    jvm_archive: bool = True
    jvm_routing: bool = True
    placement: bool = True
    columnar: bool = True
    bulk_build: bool = True
    share_state: bool = True
    small_epoch_records: int | None = None
    driver_run_records: int | None = None
    state_scan_fraction: float | None = None
    state_cache_mb: float | None = None
    state_index_mb: float | None = None
    task_memory_mb: float | None = None
    lease_ttl: float = 30.0
    lease_renew: float | None = None
    fault: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """The settings in ``env`` (default: this process's environment)."""
        env = os.environ if env is None else env

        def text(name: str) -> str | None:
            value = env.get(name, "").strip()
            return value or None

        def num(name: str, kind: Callable[[str], T]) -> T | None:
            value = text(name)
            if value is None:
                return None
            try:
                return kind(value)
            except ValueError:
                raise RuntimeStateError(
                    f"{name}={value!r} is not a number; fix or unset it (docs/reference/settings.md)",
                    code="bad-setting",
                ) from None

        session = text("CBP_CONNECT_SESSION") or cls.connect_session
        if session not in ("shared", "process"):
            raise RuntimeStateError(
                f"CBP_CONNECT_SESSION={session!r} is not 'shared' or 'process' (docs/reference/settings.md)",
                code="bad-setting",
            )
        return cls(
            spark_master=text("CBP_SPARK_MASTER") or cls.spark_master,
            remote=text("CBP_REMOTE") or text("SPARK_REMOTE"),
            connect_session=session,
            spark_conf=env.get("CBP_SPARK_CONF", ""),
            driver_memory=text("CBP_DRIVER_MEMORY") or cls.driver_memory,
            driver_java_options=env.get("CBP_DRIVER_JAVA_OPTIONS", "").strip(),
            spark_log_level=text("CBP_SPARK_LOG_LEVEL"),
            verbose=env.get("CBP_VERBOSE", "") not in ("", "0"),
            jars_dir=text("CBP_JARS_DIR"),
            jars_on_workers=env.get("CBP_JARS_ON_WORKERS") == "1",
            jvm_cache=text("CBP_JVM_CACHE"),
            jvm_archive=env.get("CBP_JVM_ARCHIVE", "1") != "0",
            jvm_routing=env.get("CBP_JVM_ROUTING", "1") != "0",
            placement=env.get("CBP_PLACEMENT", "1") != "0",
            columnar=env.get("CBP_COLUMNAR", "1") != "0",
            bulk_build=env.get("CBP_BULK_BUILD", "1") != "0",
            share_state=env.get("CBP_SHARE_STATE", "1") != "0",
            small_epoch_records=num("CBP_SMALL_EPOCH_RECORDS", int),
            driver_run_records=num("CBP_DRIVER_RUN_RECORDS", int),
            state_scan_fraction=num("CBP_STATE_SCAN_FRACTION", float),
            state_cache_mb=num("CBP_STATE_CACHE_MB", float),
            state_index_mb=num("CBP_STATE_INDEX_MB", float),
            task_memory_mb=num("CBP_TASK_MEMORY_MB", float),
            lease_ttl=num("CBP_LEASE_TTL", float) or cls.lease_ttl,
            lease_renew=num("CBP_LEASE_RENEW", float),
            fault=text("CBP_FAULT"),
        )


assert [v.field for v in VARIABLES] == [f.name for f in fields(Settings)], "one variable per field, in order"

#: The variables :meth:`Settings.from_env` reads, as keys of ``os.environ``'s own mapping.
_NAMES: tuple[str, ...] = (*(v.name for v in VARIABLES), "SPARK_REMOTE")
_LAST: tuple[tuple[object, ...], Settings] | None = None


def _seen() -> tuple[object, ...]:
    """The values of the variables cbp reads, as ``os.environ`` holds them (a lookup per name: ~1 µs,
    against ~40 µs to scan and decode the whole environment)."""
    data = getattr(os.environ, "_data", None)  # os._Environ's own dict (bytes on POSIX): no decoding
    encode = getattr(os.environ, "encodekey", None)
    if isinstance(data, dict) and encode is not None:
        return tuple(map(data.get, _encoded(encode)))
    return tuple(map(os.environ.get, _NAMES))


_ENCODED: tuple[object, ...] | None = None


def _encoded(encode: Callable[[str], object]) -> tuple[object, ...]:
    global _ENCODED
    if _ENCODED is None:
        _ENCODED = tuple(encode(n) for n in _NAMES)
    return _ENCODED


def current() -> Settings:
    """This process's settings: read again only when a variable cbp reads changed.

    >>> current() is current()
    True
    """
    global _LAST
    seen = _seen()
    if _LAST is None or _LAST[0] != seen:
        _LAST = (seen, Settings.from_env(os.environ))
    return _LAST[1]


def markdown() -> str:
    """docs/reference/settings.md: every variable, its default and what it does."""
    lines = [
        "# Settings",
        "",
        "<!-- generated by `python -m cbp.settings > docs/reference/settings.md`: edit cbp/settings.py -->",
        "",
        "cbp reads these environment variables, all in one place (`cbp/settings.py`, the typed object",
        "`cbp.settings.Settings`), and no other `CBP_*` variable. The driver reads them; a stage epoch's",
        "tasks get what they need of them in their plan, not from the workers' environment. A pipeline's",
        "`tuning` (state cache, index budget, scan fraction, small epochs) wins over the variable.",
        "A value that should be a number and is not is refused: code `bad-setting`",
        "([error codes](error-codes.md)).",
        "",
        "| Variable | `Settings` field | Default | What it does |",
        "| --- | --- | --- | --- |",
    ]
    lines += [f"| `{v.name}` | `{v.field}` | {v.default} | {v.meaning} |" for v in VARIABLES]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
