"""The SparkSession cbp runs on: local Spark by default, any master through ``CBP_SPARK_MASTER``,
any further Spark settings through ``CBP_SPARK_CONF`` (``key=value;key=value``), or a Spark Connect
server through ``CBP_REMOTE`` / ``SPARK_REMOTE`` / ``cbp --remote`` (no JVM in this process:
:func:`connect_spark`; :func:`is_connect` tells the two kinds of session apart).

When ``bash scripts/jars`` has resolved Spark's Delta connector (``state/jars/manifest.txt``, or
``CBP_JARS_DIR``), the session loads it (the jars, Delta's SQL extension and catalog) and
hadoop-aws; ``s3://`` and ``s3a://`` paths then reach S3 with the ``AWS_*`` variables a user sets.

Example::

    spark = get_spark()
    spark_conf("spark.executor.pyspark.memory=1g; spark.sql.shuffle.partitions = 4")
    # {'spark.executor.pyspark.memory': '1g', 'spark.sql.shuffle.partitions': '4'}
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ... import settings
from ...errors import RuntimeStateError
from . import taskmemory
from .jvmcache import abandon, driver_java_options, finish_at_exit, refuse
from .jvmlog import launch, verbose

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "get_spark",
    "is_connect",
    "connect_spark",
    "CONNECT_CONF",
    "spark_conf",
    "delta_jars",
    "delta_conf",
    "s3a_conf",
    "has_delta",
    "require_delta",
]

_LOG4J = os.path.join(os.path.dirname(os.path.abspath(__file__)), "log4j2.properties")

_JAVA_HINT = (
    "cbp runs on Apache Spark, which needs Java 17 or newer, and no 'java' was found on PATH or in JAVA_HOME. "
    "Install it (Debian/Ubuntu: 'sudo apt-get install -y openjdk-17-jre-headless'; macOS: 'brew install openjdk@17') "
    "and try again."
)


#: Session settings cbp gives a Connect session it opens (runtime SQL settings a client may set; a
#: server that refuses one keeps its own): those of :func:`get_spark` that a task's results depend on.
CONNECT_CONF = {
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.maxRecordsPerBatch": "20000",
    "spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled": "false",
}


def is_connect(spark: Any) -> bool:
    """Whether ``spark`` is a Spark Connect session (no ``sparkContext``, RDDs or JVM), by its class:
    pyspark's ``is_remote()`` is one flag per process, and a classic session may live beside.

    >>> is_connect(object())
    False
    """
    return type(spark).__module__.startswith("pyspark.sql.connect")


def connect_spark(url: str) -> SparkSession:
    """The process's Spark Connect session to ``url`` (``sc://HOST:PORT``, optionally ``/;session_id=UUID``),
    opened on first use and then kept (a long-running process holds one session on the server). Without
    a ``session_id`` in ``url``, the session this user's cbp commands share on that server
    (:mod:`cbp.engine.driver.connectsession`; one Python daemon on the server for all of them), renewed
    once if the server closed it. A closed session that ``url`` names: code ``connect-session-closed``.

    Example::

        connect_spark("sc://127.0.0.1:15002").range(3).count()
        # 3
    """
    from pyspark.sql import SparkSession

    from .connectsession import names_session, renewed_url, shared_url

    _import_connect()
    active = SparkSession.getActiveSession()
    if active is not None and is_connect(active) and _OPENED.get(url) == getattr(active, "session_id", None):
        return active
    named = shared_url(url)
    spark = SparkSession.builder.remote(named).getOrCreate()
    try:
        _open(spark, named)
    except RuntimeStateError:
        if named == url:  # the user named the session: theirs to replace
            raise
        _release(spark)  # no longer this process's default session (pyspark's own calls use that one)
        named = renewed_url(url)  # the shared session was closed on the server: a new one, kept
        spark = _open(SparkSession.builder.remote(named).getOrCreate(), named)
    if settings.current().connect_session == "process" and not names_session(url):
        atexit.register(_release, spark)
    _OPENED[url] = str(getattr(spark, "session_id", ""))
    return spark


def _import_connect() -> None:
    """Import ``pyspark.sql.connect`` in a process whose ``__main__`` has no file and no spec (an xdist
    worker, an embedded interpreter): there pyspark's import check takes itself for pyspark's own
    doctests and imports its test helpers, which on a ``pyspark-client`` (no Spark installation) exit
    the process (``Could not find valid SPARK_HOME``). The check runs once, at that import: ``__main__``
    is given a ``__file__`` for its duration."""
    main = sys.modules.get("__main__")
    if "pyspark.sql.connect" in sys.modules or main is None:
        return
    bare = getattr(main, "__spec__", None) is None and not hasattr(main, "__file__") and not hasattr(sys, "ps1")
    if bare:
        main.__file__ = "<cbp>"
    try:
        import pyspark.sql.connect  # noqa: F401
    finally:
        if bare:
            del main.__file__


#: URL as given -> the session id opened for it in this process.
_OPENED: dict[str, str] = {}


#: Settings cbp asks of a Connect session (:func:`cbp.engine.driver.dfjobs.connect_conf`: its parallelism, whether
#: its server runs in local mode; whether it has Delta's SQL extension), asked with cbp's own when it opens.
ASKED_CONF = ("spark.default.parallelism", "spark.master", "spark.sql.extensions")
#: (Connect session id, setting) -> its value (None: not set) as :func:`_open` found or set it.
_SEEN_CONF: dict[tuple[str, str], str | None] = {}


def seen_conf(spark: SparkSession, key: str) -> tuple[bool, str | None]:
    """Whether the Connect session's setting ``key`` is known without asking the server (asked or set when
    the session was opened here: :data:`ASKED_CONF`, :data:`CONNECT_CONF`), and its value."""
    k = (str(getattr(spark, "session_id", "")), key)
    return (k in _SEEN_CONF), _SEEN_CONF.get(k)


def _open(spark: SparkSession, url: str) -> SparkSession:
    """``spark`` with cbp's session settings (:data:`CONNECT_CONF`); a closed session: code
    ``connect-session-closed``. One round trip to read them and :data:`ASKED_CONF`, one more to set those that
    differ (it was a round trip per setting, and one per setting a small epoch asked later)."""
    wanted = {**CONNECT_CONF, **taskmemory.spark_conf()}
    keys = [*wanted, *ASKED_CONF]
    try:
        have = dict(zip(keys, spark.client.get_config_with_defaults(*((k, None) for k in keys)), strict=True))
    except Exception as e:  # noqa: BLE001 - a server that refuses to say: each setting on its own
        _closed(e, url)
        have = {}
    todo = {k: v for k, v in wanted.items() if k not in have or have[k] != v}
    if todo and have:
        try:
            _set_all(spark, todo)
            have.update(todo)
            todo = {}
        except Exception as e:  # noqa: BLE001 - a managed server may refuse a setting: one at a time
            _closed(e, url)
    for key, value in todo.items():
        try:
            if spark.conf.get(key, None) != value:
                spark.conf.set(key, value)
            have[key] = value
        except Exception as e:  # noqa: BLE001 - a managed server may refuse a setting; its own value stays
            _closed(e, url)
            have.pop(key, None)
    sid = str(getattr(spark, "session_id", ""))
    _SEEN_CONF.update({(sid, k): v for k, v in have.items()})
    return spark


def _set_all(spark: SparkSession, pairs: dict[str, str]) -> None:
    """Set the Connect session's settings ``pairs`` in one round trip."""
    from pyspark.sql.connect import proto

    kv = [proto.KeyValue(key=k, value=v) for k, v in pairs.items()]
    spark.client.config(proto.ConfigRequest.Operation(set=proto.ConfigRequest.Set(pairs=kv)))


def _closed(e: Exception, url: str) -> None:
    """Raise ``connect-session-closed`` if ``e`` says the session was closed on the server."""
    if "SESSION_CLOSED" in str(e):  # a ;session_id= of a session released (spark.stop()) or expired
        raise RuntimeStateError(
            f"the Spark Connect session named by {url} was closed on the server (released or idle too "
            "long) and cannot be opened again: take a new session id (;session_id=UUID) or leave it out",
            code="connect-session-closed",
        ) from None


def _release(spark: SparkSession) -> None:
    """Release a process's own session at exit (``CBP_CONNECT_SESSION=process``)."""
    try:
        spark.stop()
    except Exception:  # noqa: BLE001 - the server already gone
        pass


def spark_conf(text: str) -> dict[str, str]:
    """Spark settings from ``key=value`` pairs separated by ``;`` (the form of ``CBP_SPARK_CONF``)."""
    conf = {}
    for item in text.split(";"):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise RuntimeStateError(
                f"CBP_SPARK_CONF: {item.strip()!r} is not key=value (settings are separated by ';')", code="spark-conf"
            )
        conf[key.strip()] = value.strip()
    return conf


def _jars_dir() -> str:
    """Where ``scripts/jars`` puts the jar cache: ``CBP_JARS_DIR``, else ``state/jars`` of the repository."""
    explicit = settings.current().jars_dir
    if explicit:
        return explicit
    repo = Path(__file__).resolve().parents[3]  # cbp/engine/driver/session.py -> the repository
    return str(repo / "state" / "jars")


def delta_jars(directory: str | None = None) -> list[str] | None:
    """The jar cache's jars (absolute paths), or ``None`` when it is missing or incomplete.

    >>> delta_jars("/nonexistent") is None
    True
    """
    directory = directory or _jars_dir()
    try:
        with open(os.path.join(directory, "manifest.txt"), encoding="utf-8") as f:
            names = [line.strip() for line in f if line.strip()]
    except OSError:
        return None
    paths = [os.path.join(os.path.abspath(directory), n) for n in names]
    if not paths or not all(os.path.isfile(p) for p in paths):
        return None
    return paths


def delta_conf(jars: list[str] | None, local: bool = False, on_workers: bool = False) -> dict[str, str]:
    """Spark settings that load Spark's Delta connector from ``jars`` (none without jars).

    On a cluster the jars go to ``spark.jars`` (Spark ships them to the executors) unless
    ``on_workers`` (``CBP_JARS_ON_WORKERS=1``, set by ``scripts/cluster``'s env.sh) says the
    workers have them at the same paths: then on the executors' class path too. With a ``local``
    master they go on the driver's class path, because Spark would otherwise copy them (670 MiB,
    mostly the AWS SDK bundle) into every session's temporary directory.

        >>> delta_conf(["/j/delta-spark.jar"])["spark.sql.extensions"]
        'io.delta.sql.DeltaSparkSessionExtension'
        >>> delta_conf(["/j/a.jar", "/j/b.jar"], local=True)["spark.driver.extraClassPath"]
        '/j/a.jar:/j/b.jar'
        >>> delta_conf(None)
        {}
    """
    if not jars:
        return {}
    path = os.pathsep.join(jars)
    if local:
        where = {"spark.driver.extraClassPath": path}
    elif on_workers:
        where = {"spark.driver.extraClassPath": path, "spark.executor.extraClassPath": path}
    else:
        where = {"spark.jars": ",".join(jars)}
    return {
        **where,
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        # Delta replays a table's log in a Spark job of 50 tasks by default; cbp's logs are small
        # (a commit per epoch, checkpoints), and the first query over a home took 3x longer with 50.
        # One task: every version of url_count's three tables (19 time-travel reads, 4 jobs each) in
        # 58-66 s against 112-143 s with 4 (86-109 s with 2) on a loaded 2-core machine
        "spark.databricks.delta.snapshotPartitions": "1",
    }


def s3a_conf(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Spark settings for S3 from the variables an AWS user sets (only those that are set).

    ``s3://`` is mapped to S3A, so a home written ``s3://bucket/path`` reaches Spark as written.

        >>> c = s3a_conf({"AWS_ENDPOINT_URL": "http://127.0.0.1:9000", "AWS_REGION": "eu-west-1"})
        >>> c["spark.hadoop.fs.s3a.endpoint"], c["spark.hadoop.fs.s3a.connection.ssl.enabled"]
        ('http://127.0.0.1:9000', 'false')
        >>> s3a_conf({})
        {}
    """
    from ...storage.objectstore import ObjectStoreSettings

    found: Mapping[str, str] = os.environ if env is None else env  # AWS_* (not cbp's settings)
    if not any(found.get(k) for k in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_REGION", "AWS_DEFAULT_REGION")):
        return {}
    conf = ObjectStoreSettings.from_env(found).spark_s3a_conf()  # the same settings as pyarrow's and delta-rs's
    conf["spark.hadoop.fs.AbstractFileSystem.s3.impl"] = "org.apache.hadoop.fs.s3a.S3A"
    return conf


def has_delta(spark: SparkSession) -> bool:
    """Whether ``spark`` has Spark's Delta connector: a classic session created with it (``delta_conf``),
    or a Connect server that has it (asked once per session: :func:`_server_has_delta`)."""
    if is_connect(spark):
        return _server_has_delta(spark)
    return _delta_extension(spark)


def _delta_extension(spark: Any) -> bool:
    """Whether the session's ``spark.sql.extensions`` names Delta's SQL extension (on Connect as read when the
    session was opened, :data:`ASKED_CONF`)."""
    seen, value = seen_conf(spark, "spark.sql.extensions")
    return "DeltaSparkSessionExtension" in ((value if seen else spark.conf.get("spark.sql.extensions", "")) or "")


#: Connect session id -> whether its server has Delta (asked once per session).
_SERVER_DELTA: dict[str, bool] = {}


def _server_has_delta(spark: Any) -> bool:
    """Whether a Connect session's server reads Delta, asked once per session id (each question is a
    round trip): its ``spark.sql.extensions`` names Delta's extension, or (a managed platform may have
    Delta built in) a Delta read of a path that does not exist is analysed by a server that knows the
    ``delta`` source: it fails for the path, not for the source."""
    sid = str(getattr(spark, "session_id", id(spark)))
    if sid in _SERVER_DELTA:
        return _SERVER_DELTA[sid]
    found = _delta_extension(spark)
    if not found:
        try:
            found = bool(spark.read.format("delta").load("/nonexistent/cbp-delta-probe").columns) or True
        except Exception as e:  # noqa: BLE001 - a path that is not a Delta table: the server has the source
            text = str(e)
            found = "DATA_SOURCE_NOT_FOUND" not in text and "Failed to find the data source" not in text
    _SERVER_DELTA[sid] = found
    return found


def require_delta(spark: SparkSession) -> None:
    """Raise ``RuntimeStateError`` (code ``no-delta-jars``) unless ``spark`` has the Delta connector
    (on Spark Connect: unless its server has it)."""
    if not has_delta(spark):
        if is_connect(spark):
            raise RuntimeStateError(
                "the Spark Connect server has no Delta connector (delta-spark): start it with Delta's jars, "
                "its SQL extension and catalog (scripts/connect does), then try again.",
                code="no-delta-jars",
            )
        where = _jars_dir()
        raise RuntimeStateError(
            f"Spark's Delta connector (delta-spark) is not loaded: no complete jar cache in {where} "
            "when this process started Spark. Run 'bash scripts/setup' (or 'bash scripts/jars'; it needs Maven "
            "and Maven Central), then start again.",
            code="no-delta-jars",
            path=where,
        )


def executor_archive(
    archive: str, recorded: bool, master: str, on_workers: bool, conf: Mapping[str, str]
) -> dict[str, str]:
    """The executors' JVM options with the driver's class archive (``archive``, its options) when they can map it:
    an archive already recorded, a cluster whose workers have the jars at the driver's paths (``CBP_JARS_ON_WORKERS``,
    as ``scripts/cluster``'s workers on this machine): an executor's class path is then the driver's, so the
    classes both load come from the archive (a JVM that finds it missing or not matching ignores it).

        >>> executor_archive("-XX:SharedArchiveFile=/c/k.jsa", True, "spark://h:7077", True, {})
        {'spark.executor.extraJavaOptions': '-XX:SharedArchiveFile=/c/k.jsa'}
        >>> executor_archive("-XX:SharedArchiveFile=/c/k.jsa", True, "spark://h:7077", True,
        ...                  {"spark.executor.extraJavaOptions": "-XX:TieredStopAtLevel=1"})
        {'spark.executor.extraJavaOptions': '-XX:SharedArchiveFile=/c/k.jsa -XX:TieredStopAtLevel=1'}
        >>> executor_archive("-XX:SharedArchiveFile=/c/k.jsa", True, "local[2]", True, {})
        {}
    """
    if not archive or not recorded or not on_workers or master.startswith("local"):
        return {}
    opts = " ".join(o for o in (archive, conf.get("spark.executor.extraJavaOptions", "")) if o)
    return {"spark.executor.extraJavaOptions": opts}


def _start(builder: Any, archive: str, recording: tuple[str, str, str] | None, class_path: str) -> Any:
    """``builder.getOrCreate()``; the JVM started with the class archive's options ``archive``
    (recording it when ``recording``). A JVM that does not start with them (a JDK without its own
    archive refuses to record) is started again without, and the archive is not asked for again."""
    from pyspark import SparkContext

    try:
        spark = launch(builder)  # Spark's and the JVM's lines only if verbose (cbp.engine.driver.jvmlog)
    except Exception:
        if recording is not None:
            abandon(recording)
        if not archive or SparkContext._gateway is not None:
            raise
        plain = " ".join(
            o for o in (f"-Dlog4j2.configurationFile={_LOG4J}", settings.current().driver_java_options) if o
        )
        spark = launch(builder.config("spark.driver.extraJavaOptions", plain))
        refuse(class_path, "a driver JVM did not start with the archive's options and did without")
        return spark
    except BaseException:
        if recording is not None:
            abandon(recording)
        raise
    if recording is not None:
        finish_at_exit(spark, recording)
    return spark


def get_spark(master: str | None = None, conf: dict[str, str] | None = None) -> SparkSession:
    """Return the process's SparkSession, creating it with cbp's settings on first use.

    ``master`` (or ``CBP_SPARK_MASTER``) defaults to ``local[*,2]``: local Spark on every core,
    retrying a failed task once, as a cluster would (a lost Python worker, say). Adaptive query execution is
    switched off: a stage's shuffle must keep exactly its partition count, because partition
    ``p`` of the shuffle is the task that owns state partition ``p``. ``CBP_SPARK_CONF`` and then
    ``conf`` add or override settings (e.g. ``spark.executor.pyspark.memory``, the address-space
    limit of each Python worker) when the session is created. With the jar cache, the session
    has Spark's Delta connector (``delta_conf``); with ``AWS_*`` variables, S3A (``s3a_conf``).
    A new driver JVM starts from the class archive of :mod:`cbp.engine.driver.jvmcache` (or records it).
    With ``CBP_REMOTE`` (or ``SPARK_REMOTE``) set, the session is a Spark Connect one (:func:`connect_spark`).
    """
    remote = settings.current().remote
    if remote:
        return connect_spark(remote)
    java_home = os.environ.get("JAVA_HOME")
    if not shutil.which("java") and not (java_home and os.path.exists(os.path.join(java_home, "bin", "java"))):
        raise RuntimeStateError(_JAVA_HINT, code="no-java")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    env = settings.current()
    master = master or env.spark_master
    builder = (
        SparkSession.builder.master(master)
        .appName("cbp")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.driver.memory", env.driver_memory)
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "20000")
        # A file's "open cost" is 4 MB by default, so a fed file below ~4 MB (a million URLs
        # compress to 3.3 MB) is one map task on one core: at 1 MB it splits by row groups
        .config("spark.sql.files.openCostInBytes", str(1 << 20))
        .config("spark.python.worker.reuse", "true")
        # workers forked by a daemon that imported cbp's task side once (a fresh worker: ~1 CPU s less)
        .config("spark.python.daemon.module", "cbp.engine.task.daemon")
        # Spark keeps a pool of Python workers per set of worker environment variables, and its SQL
        # runners (mapInArrow) add one that its RDD runner (mapPartitions) does not: two pools, each
        # worker with its own state and index caches (twice the memory the settings allow), and a
        # partition cached by a large epoch's worker never found by a small epoch's. Without the
        # simplified traceback both kinds of job share one pool. cbp reports task errors itself.
        .config("spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
    )
    extra = {
        **delta_conf(delta_jars(), local=master.startswith("local"), on_workers=env.jars_on_workers),
        **s3a_conf(),
        **taskmemory.spark_conf(),  # CBP_TASK_MEMORY_MB: Arrow batches a task can hold
        **spark_conf(env.spark_conf),
        **(conf or {}),
    }
    archive, recording, class_path = "", None, extra.get("spark.driver.extraClassPath", "")
    if (
        "spark.driver.extraJavaOptions" not in extra and SparkContext._gateway is None
    ):  # a new driver JVM: cbp's options
        archive, recording = driver_java_options(class_path)
        extra["spark.driver.extraJavaOptions"] = " ".join(
            o for o in (f"-Dlog4j2.configurationFile={_LOG4J}", archive, env.driver_java_options) if o
        )
        extra.update(executor_archive(archive, recording is None, master, env.jars_on_workers, extra))
    for key, value in extra.items():
        builder = builder.config(key, value)
    spark: SparkSession = _start(builder, archive, recording, class_path)
    spark.sparkContext.setLogLevel(env.spark_log_level or ("WARN" if verbose() else "ERROR"))
    return spark
