"""Spark's own Delta connector (delta-spark) over cbp's tables, and cbp's tables for Spark users.

cbp writes with delta-rs; these tests read the same tables with delta-spark and delta-rs, time
travel included, read a table Spark wrote with delta-rs, and check ``cbp sql`` / ``Pipeline.sql``
against ``cbp state`` / ``cbp output`` and a from-scratch count. They need the jars of
``bash scripts/jars`` and skip without them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from conftest import FLOWS, ROOT
from deltalake import DeltaTable

import cbp
from cbp.cli import main
from cbp.engine.driver import job
from cbp.engine.driver.deltaread import latest_state, read_delta
from cbp.engine.driver.session import has_delta, require_delta, s3a_conf
from cbp.errors import CbpError
from cbp.sql import sql_error
from cbp.storage import LAYOUT

YAML = FLOWS / "url_count.yaml"
FEEDS = [
    [{"url": "a"}, {"url": "b"}, {"url": "a"}],
    [{"url": "c"}, {"url": "a"}],
    [{"url": "b"}, {"url": "d"}, {"url": "d"}, {"url": "é/ü"}],
    [{"url": "a"}],
]
# A counter that drops a key's state when it reaches 3: tombstones and several files per partition.
DROPPING = """
pipeline: dropper
flows:
  words: {external: true, schema: {w: string}}
stages:
  count:
    translator: MOD:count
    partitions: 2
    inputs: [{flow: words, route_by: w}]
    state: {schema: {w: string, n: int}}
"""
DROPPING_MODULE = """
def count(key, state, words, out):
    prev = next(state, None)
    n = sum(1 for _ in words) + (prev["n"] if prev else 0)
    if n < 3:
        out.state.write({"w": key, "n": n})
"""


@pytest.fixture(scope="module")
def dspark(spark):
    if not has_delta(spark):
        if os.environ.get("CBP_JARS_DIR"):  # pointed elsewhere on purpose (see the last test)
            pytest.skip("needs the delta-spark jars in CBP_JARS_DIR (bash scripts/jars)")
        pytest.fail(
            "Spark's Delta connector is not loaded: scripts/setup puts its jars in state/jars (bash scripts/jars)"
        )
    return spark


@pytest.fixture(scope="module")
def url_home(dspark, tmp_path_factory):
    """url_count after each of FEEDS was fed and run (direct mode, compacting after 2 files)."""
    home = str(tmp_path_factory.mktemp("url") / "home")
    p = cbp.load(YAML, home=home, spark=dspark)
    p.parts.tuning.max_state_files = 2
    for inc in FEEDS:
        p.feed("urls", inc)
        p.run()
    return home


def rows(table: pa.Table | list[dict], cols: list[str]) -> list[tuple]:
    recs = table.to_pylist() if isinstance(table, pa.Table) else table
    return sorted(tuple(r[c] for c in cols) for r in recs)


def cli(capsys, *args: str) -> tuple[int, list[dict]]:
    code = main([str(a) for a in args])
    out = capsys.readouterr().out
    return code, [json.loads(line) for line in out.splitlines() if line.strip()]


def scratch(n: int) -> list[dict]:
    """The from-scratch url_count state after the first ``n`` feeds."""
    c = Counter(r["url"] for inc in FEEDS[:n] for r in inc)
    return sorted(
        ({"url": u, "count": k} for u, k in c.items()), key=lambda r: json.dumps(r["url"], ensure_ascii=False)
    )


# ------------------------------------------------------------ both readers, both ways
def test_cbp_tables_read_alike_by_spark_and_delta_rs(dspark, url_home):
    """Every version of every table cbp wrote (delta-rs) reads the same through delta-spark: the same columns,
    the same rows. A table's versions, each read by time travel, are collected in one Spark job (their union,
    each row tagged with its version): one job a version took 20-25% more of the driver JVM's CPU."""
    from pyspark.sql import functions as F

    for rel in (LAYOUT.state("url_count"), LAYOUT.flow("urls"), LAYOUT.flow("counts")):
        uri = f"{url_home}/{rel}"
        newest = DeltaTable(uri).version()
        assert newest >= len(FEEDS)
        mine = {v: pa.table(DeltaTable(uri, version=v).to_pyarrow_table()) for v in range(newest + 1)}
        frames = {v: read_delta(dspark, uri, v) for v in mine}
        for v, frame in frames.items():
            assert sorted(frame.columns) == sorted(mine[v].column_names), (rel, v)
        tagged = [frame.withColumn("_version", F.lit(v)) for v, frame in frames.items()]
        union = tagged[0]
        for frame in tagged[1:]:
            union = union.unionByName(frame, allowMissingColumns=True)
        theirs = union.toPandas().to_dict("records")
        for v, table in mine.items():
            cols = table.column_names
            assert rows([r for r in theirs if r["_version"] == v], cols) == rows(table, cols), (rel, v)


def test_state_files_read_by_spark_with_a_filter_on_a_dictionary_column(dspark, tmp_path):
    """A state file (LZ4, ``STATE_CODEC``) whose column is dictionary-encoded with thousands of values:
    Spark's reader decodes its dictionary page when a filter is pushed down to that column, and
    aircompressor's LZ4 fails on pyarrow's LZ4_RAW dictionary pages: that column is written zstd."""
    import pyarrow.parquet as pq

    from cbp.engine.task.bipindex import STATE_CODEC
    from cbp.engine.task.sinks import ParquetSink
    from cbp.storage.home import Home

    n = 8192
    rows = pa.table({"_key": [f"k{i}" for i in range(n)], "n": [(i * 7919) % 2000 for i in range(n)]})
    sink = ParquetSink(Home(tmp_path / "home"), "state/_part=0", "e1", rows.schema, 0, 8192, STATE_CODEC)
    sink.write(rows)
    add = sink.close()
    path = tmp_path / "home" / add["rel"]
    meta = pq.ParquetFile(path).metadata.row_group(0)
    codecs = {meta.column(i).path_in_schema: meta.column(i).compression for i in range(meta.num_columns)}
    assert codecs["_key"] == "LZ4" and codecs["n"] == "ZSTD", codecs
    got = dspark.read.parquet(str(path)).where("n = 7 OR n = 1999").count()
    assert got == sum(1 for v in rows["n"].to_pylist() if v in (7, 1999)) > 0


def test_state_semantics_with_tombstones(dspark, make_pipeline, tmp_path):
    """latest_state in Spark == cbp's latest_rows (newest epoch per key, no tombstones), each epoch."""
    p = cbp.load(make_pipeline(DROPPING, DROPPING_MODULE), home=str(tmp_path / "h"), spark=dspark)
    p.parts.tuning.max_state_files = 3
    feeds = [["x", "y"], ["x"], ["x", "z"], ["y", "y"], ["x"], ["q"]]
    state: dict[str, int] = {}
    expected: list[list[tuple]] = []  # after each epoch
    for words in feeds:
        p.feed("words", [{"w": w} for w in words])
        p.run()
        for w, k in Counter(words).items():  # from scratch: a key that reaches 3 is dropped, then starts again
            n = k + state.pop(w, 0)
            if n < 3:
                state[w] = n
        expected.append(sorted(state.items()))
        assert rows(p.state("count"), ["w", "n"]) == expected[-1]
        latest = p.parts.reads.state_version("count")  # the latest version is the epoch's, read by Spark below
        assert latest == p.parts.reads.state_version("count", len(expected))
    # Spark's read of each epoch's state version, by time travel: the version that was the latest after that
    # epoch (one delta-spark snapshot an epoch, not a second one of the same version while the loop ran)
    assert p.epochs("count") == len(feeds)
    for e, want in enumerate(expected, start=1):
        assert rows(p.state_df("count", e).toPandas().to_dict("records"), ["w", "n"]) == want
        assert rows(p.state("count", e), ["w", "n"]) == want


def test_spark_written_table_read_by_delta_rs(dspark, tmp_path):
    """A Delta table written by Spark's connector reads the same through delta-rs, time travel too."""
    uri = str(tmp_path / "sparktable")
    dspark.createDataFrame([("a", 1), ("b", 2)], "k STRING, n BIGINT").write.format("delta").save(uri)
    dspark.createDataFrame([("c", 3)], "k STRING, n BIGINT").write.format("delta").mode("append").save(uri)
    dspark.createDataFrame([("d", 4)], "k STRING, n BIGINT").write.format("delta").mode("overwrite").save(uri)
    expected = {0: [("a", 1), ("b", 2)], 1: [("a", 1), ("b", 2), ("c", 3)], 2: [("d", 4)]}
    assert DeltaTable(uri).version() == 2
    for v, want in expected.items():
        assert rows(pa.table(DeltaTable(uri, version=v).to_pyarrow_table()), ["k", "n"]) == want
        assert rows(read_delta(dspark, uri, v).toPandas().to_dict("records"), ["k", "n"]) == want


# ------------------------------------------------------------ cbp sql
def test_cbp_sql_equals_cbp_state_and_scratch(dspark, url_home, capsys):
    code, state = cli(capsys, "state", YAML, "url_count", "--home", url_home)
    assert code == 0 and state == scratch(len(FEEDS))
    code, sql = cli(capsys, "sql", YAML, "SELECT * FROM url_count", "--home", url_home)
    assert code == 0 and sql == state  # the same records in the same order (by key)
    for n in range(1, len(FEEDS) + 1):
        code, by_epoch = cli(capsys, "sql", YAML, "SELECT * FROM url_count", "--home", url_home, "--epoch", n)
        assert code == 0
        _, state_n = cli(capsys, "state", YAML, "url_count", "--home", url_home, "--epoch", n)
        assert by_epoch == state_n == scratch(n)
        _, named = cli(capsys, "sql", YAML, "SELECT * FROM url_count", "--home", url_home, "--epoch", f"url_count={n}")
        assert named == state_n


def test_cbp_sql_flows_equal_cbp_output(dspark, url_home, capsys):
    for flow in ("urls", "counts"):
        _, out = cli(capsys, "output", YAML, flow, "--home", url_home)
        code, sql = cli(capsys, "sql", YAML, f"SELECT * FROM {flow}", "--home", url_home)
        out = [{**r, "_diff": r.get("_diff", 1)} for r in out]  # a view's _diff column is 1 where cbp output omits it
        assert code == 0 and sorted(map(json.dumps, sql)) == sorted(map(json.dumps, out))
    for n in range(1, len(FEEDS) + 1):  # a pinned stage's output flow: what that epoch wrote
        _, out = cli(capsys, "output", YAML, "counts", "--home", url_home, "--epoch", n)
        _, sql = cli(capsys, "sql", YAML, "SELECT url, count FROM counts", "--home", url_home, "--epoch", n)
        assert sorted(map(json.dumps, sql)) == sorted(map(json.dumps, out))
    code, agg = cli(capsys, "sql", YAML, "SELECT count(*) AS n, sum(count) AS total FROM url_count", "--home", url_home)
    assert agg == [{"n": len(scratch(len(FEEDS))), "total": sum(len(f) for f in FEEDS)}]


def test_retractions_on_a_home_of_an_earlier_release_reach_sql_and_output(dspark, tmp_path, capsys):
    """A flow table written before signed records gets its _diff column on the first signed
    write, so cbp output, cbp sql and Spark's own Delta reader all see the retraction."""
    import shutil

    home = tmp_path / "old"
    shutil.copytree(Path(__file__).parent / "fixtures" / "home-v1" / "url_count", home)
    p = cbp.load(YAML, home=str(home), spark=dspark)
    before = p.output("urls")
    p.feed("urls", [{"url": "a", "_diff": -1}])
    raw = dspark.read.format("delta").load(
        str(home / "flows" / "urls")
    )  # Spark's own reader, before the run collects the feed
    assert "_diff" in raw.columns and raw.where("_diff = -1").count() == 1
    p.run()
    assert p.output("urls") == before + [{"url": "a", "_diff": -1}]
    code, sql = cli(
        capsys, "sql", YAML, "SELECT url, sum(_diff) AS n FROM urls GROUP BY url ORDER BY url", "--home", str(home)
    )
    scratch_counts = Counter(r["url"] for r in before)
    scratch_counts["a"] -= 1
    assert code == 0 and sql == [{"url": u, "n": n} for u, n in sorted(scratch_counts.items())]
    assert {r["url"]: r["count"] for r in p.state("url_count")} == {u: n for u, n in scratch_counts.items() if n}


def test_the_jar_cache_is_found_in_the_repository_without_a_setting(monkeypatch):
    """Spark's Delta connector is loaded from ``state/jars`` of the repository (scripts/jars puts it
    there) when ``CBP_JARS_DIR`` is not set, wherever the session module lives."""
    from cbp.engine.driver import session

    monkeypatch.delenv("CBP_JARS_DIR", raising=False)
    assert Path(session._jars_dir()) == Path(__file__).resolve().parents[1] / "state" / "jars"


def test_version_as_of_is_an_epoch(dspark, url_home, capsys):
    """``VIEW VERSION AS OF N`` reads the view as ``--epoch N`` does (a stage's state after its epoch
    N, a flow's records of epoch N or feed N), also several epochs of one view in one query."""
    for n in range(1, len(FEEDS) + 1):
        code, state = cli(capsys, "sql", YAML, f"SELECT * FROM url_count VERSION AS OF {n}", "--home", url_home)
        assert code == 0 and state == scratch(n)
        for flow in ("urls", "counts"):  # what epoch n wrote / feed n landed, as 'cbp output FLOW --epoch N'
            _, out = cli(capsys, "output", YAML, flow, "--home", url_home, "--epoch", n)
            _, travel = cli(capsys, "sql", YAML, f"SELECT * FROM {flow} VERSION AS OF {n}", "--home", url_home)
            out = [{**r, "_diff": r.get("_diff", 1)} for r in out]
            assert sorted(map(json.dumps, travel)) == sorted(map(json.dumps, out)) != []
            if flow == "urls":  # feed n's records, from scratch
                assert sorted(r["url"] for r in travel) == sorted(r["url"] for r in FEEDS[n - 1])
    q = (
        "SELECT b.url, b.count - coalesce(a.count, 0) AS grew FROM url_count VERSION AS OF 2 b "
        "LEFT JOIN url_count VERSION AS OF 1 a USING (url) ORDER BY b.url"
    )
    before, after = {r["url"]: r["count"] for r in scratch(1)}, scratch(2)
    want = [{"url": r["url"], "grew": r["count"] - before.get(r["url"], 0)} for r in after]
    assert cli(capsys, "sql", YAML, q, "--home", url_home) == (0, want)


def test_pipeline_sql_api(dspark, url_home):
    p = cbp.load(YAML, home=url_home, spark=dspark)
    df = p.sql("SELECT s.url, s.count FROM url_count s JOIN urls u ON s.url = u.url WHERE s.count > 1")
    assert {r["url"] for r in df.collect()} == {r["url"] for r in scratch(len(FEEDS)) if r["count"] > 1}
    assert [r.asDict() for r in p.state_df("url_count", 2).collect()] == scratch(2)
    assert p.flow_df("counts", epoch=1).count() == 2
    assert p.sql("SELECT * FROM url_count", epoch={"url_count": 1}).count() == len(scratch(1))


@pytest.mark.parametrize(
    "query,args,code,exit_code",
    [
        ("SELEC * FROM url_count", [], "bad-sql", 2),
        ("SELECT nope FROM url_count", [], "bad-sql", 2),
        ("SELECT * FROM no_such_view", [], "sql-unknown-view", 2),
        ("SELECT * FROM url_count VERSION AS OF 99", [], "unknown-epoch", 2),
        ("SELECT * FROM url_count TIMESTAMP AS OF '2026-01-01'", [], "sql-time-travel", 2),
        ("SELECT * FROM url_count", ["--epoch", "nostage=1"], "unknown-stage", 2),
        ("SELECT * FROM url_count", ["--epoch", "99"], "unknown-epoch", 2),
        ("SELECT * FROM url_count", ["--epoch", "x"], "usage", 2),
        ("INSERT INTO urls VALUES ('x')", [], "sql-not-query", 2),
        ("DROP VIEW urls", [], "sql-not-query", 2),
        ("SELECT cast('x' AS INT)", [], "bad-sql", 2),
        ("SELECT raise_error('boom') FROM urls", [], "bad-sql", 2),
        ("WITH x AS (SELECT 1) INSERT INTO urls SELECT * FROM urls", [], "sql-not-query", 2),
        (
            "WITH x AS (SELECT 1) INSERT OVERWRITE DIRECTORY '/tmp/cbp-sql-out' USING parquet SELECT * FROM x",
            [],
            "sql-not-query",
            2,
        ),
        ("SELECT java_method('java.lang.System', 'exit', 3)", [], "sql-not-allowed", 2),
        ("SELECT IDENTIFIER('ref' || 'lect')('java.util.UUID', 'randomUUID')", [], "sql-not-allowed", 2),
        ("SELECT * FROM urls WHERE url IN (SELECT value FROM text.`/etc/passwd`)", [], "sql-not-allowed", 2),
        ("SELECT (SELECT count(*) FROM json.`/etc/passwd`) AS n", [], "sql-not-allowed", 2),
        ("SELECT * FROM read_files('/etc/passwd')", [], "sql-not-allowed", 2),
    ],
)
def test_sql_errors_have_codes(dspark, url_home, capsys, query, args, code, exit_code):
    assert main(["sql", str(YAML), query, "--home", url_home, *args]) == exit_code
    err = capsys.readouterr().err
    assert "Traceback" not in err and "Py4J" not in err and "SQLQueryContextLogger" not in err
    p = cbp.load(YAML, home=url_home, spark=dspark)
    if query.startswith(
        ("SELECT cast", "SELECT raise_error")
    ):  # fails only when it runs: a DataFrame raises Spark's error, which the CLI maps
        with pytest.raises(Exception) as raw:
            p.sql(query).collect()
        assert sql_error(raw.value).code == code
        return
    with pytest.raises(CbpError) as e:
        p.sql(query, args[1] if args else None)
    assert e.value.code == code


def test_sql_refuses_a_write_behind_a_cte_and_nothing_changes(dspark, url_home, capsys):
    """A DELETE behind ``WITH`` is a DeleteFromTable under the top node: refused before Spark runs it."""
    state = Path(url_home) / "stages" / "url_count" / "state"
    log_before = sorted(os.listdir(state / "_delta_log"))
    before = cli(capsys, "state", YAML, "url_count", "--home", url_home)[1]
    for q in (
        f"WITH x AS (SELECT 1) DELETE FROM delta.`{state}`",
        f"DELETE FROM delta.`{state}` WHERE true",
        f"WITH x AS (SELECT 1) MERGE INTO delta.`{state}` t USING x ON false WHEN NOT MATCHED THEN INSERT *",
        f"DESCRIBE delta.`{state}`",
    ):
        assert main(["sql", str(YAML), q, "--home", url_home]) == 2
        assert "Traceback" not in capsys.readouterr().err
    assert sorted(os.listdir(state / "_delta_log")) == log_before
    assert cli(capsys, "state", YAML, "url_count", "--home", url_home)[1] == before
    ok = cli(
        capsys,
        "sql",
        YAML,
        "WITH c AS (SELECT url, count FROM url_count) SELECT count(*) AS n FROM c WHERE EXISTS (SELECT 1 FROM urls u "
        "WHERE u.url = c.url)",
        "--home",
        url_home,
    )
    assert ok == (0, [{"n": len(before)}])


def test_sql_table_format(dspark, url_home, capsys):
    assert (
        main(
            [
                "sql",
                str(YAML),
                "SELECT url, count FROM url_count ORDER BY url LIMIT 2",
                "--home",
                url_home,
                "--format",
                "table",
            ]
        )
        == 0
    )
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["url", "count"] and lines[-1] == "(2 rows)"


# ------------------------------------------------------------ black-box mode
def test_blackbox_reads_the_state_versions_files(dspark, tmp_path, monkeypatch):
    """A black-box epoch reads the state at its version as cbp's own list of the version's files (not
    through delta-spark, whose log replay is two more Spark jobs an epoch): the files delta-spark reads
    at that version, the state from scratch, and what delta-spark sees."""
    reads, real = [], job._state_rows

    def state_rows(spark, schema, state, keyed=False):
        reads.append((state.uri, state.version, state.files()))
        return real(spark, schema, state, keyed)

    monkeypatch.setattr(job, "_state_rows", state_rows)
    p = cbp.load(YAML, home=str(tmp_path / "bb"), mode="blackbox", spark=dspark)
    for inc in FEEDS:
        p.feed("urls", inc)
        p.run()
    assert p.state("url_count") == scratch(len(FEEDS))
    assert [v for _, v, _ in reads] == [p.parts.reads.state_version("url_count", e) for e in range(1, len(FEEDS))]
    for uri, version, files in reads:
        spark_files = read_delta(dspark, uri, version).inputFiles()
        assert sorted(Path(f.removeprefix("file:")).resolve() for f in spark_files) == sorted(
            Path(f.removeprefix("file:")).resolve() for f in files
        )
    assert rows(latest_state(read_delta(dspark, reads[-1][0])).toPandas().to_dict("records"), ["url", "count"]) == rows(
        scratch(len(FEEDS)), ["url", "count"]
    )


# ------------------------------------------------------------ session settings
def test_require_delta_names_setup():
    class NoDelta:
        class conf:
            @staticmethod
            def get(key, default=None):
                return default

    with pytest.raises(CbpError) as e:
        require_delta(NoDelta())
    assert e.value.code == "no-delta-jars" and "scripts/setup" in str(e.value)
    p = cbp.load(YAML, home="/nonexistent/cbp-home", spark=NoDelta())
    for call in (lambda: p.sql("SELECT 1"), lambda: p.state_df("url_count"), lambda: p.flow_df("urls")):
        with pytest.raises(CbpError) as e:
            call()
        assert e.value.code == "no-delta-jars"


_WITHOUT_JARS = """
import sys
from cbp.cli import main
yaml, feed, home = sys.argv[1:]
codes = [
    main(["feed", yaml, "urls", feed, "--home", home]),
    main(["run", yaml, "--home", home, "--quiet"]),
    main(["sql", yaml, "SELECT * FROM url_count", "--home", home]),
]
print("EXIT", *codes)
"""


@pytest.mark.classic(reason="a classic driver started without the jar cache (on Connect the server has Delta or not)")
def test_cli_without_jars(tmp_path):
    """Without the jars (CBP_JARS_DIR elsewhere), cbp sql fails cleanly; the rest works. In a process
    of its own, whose Spark starts without them (this session's has them). That class path has no JVM class
    archive (scripts/setup records the one with the jars): without CBP_JVM_ARCHIVE=0 this driver would record
    one as it exits, on every clean clone, for no later driver (the test: 47.6 CPU s recording, 18.7 without)."""
    env = {**os.environ, "CBP_JARS_DIR": str(tmp_path / "no-jars"), "PYTHONPATH": str(ROOT), "CBP_JVM_ARCHIVE": "0"}
    args = [str(YAML), str(_jsonl(tmp_path, FEEDS[0])), str(tmp_path / "h")]
    r = subprocess.run(
        [sys.executable, "-c", _WITHOUT_JARS, *args], env=env, capture_output=True, text=True, timeout=600
    )
    assert "EXIT 0 0 5" in r.stdout, r.stdout[-2000:] + r.stderr[-3000:]
    assert "scripts/setup" in r.stderr


def _jsonl(tmp_path, records: list[dict]):
    path = tmp_path / "feed.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_s3a_conf_from_aws_environment():
    env = {
        "AWS_ENDPOINT_URL": "https://s3.example:9000",
        "AWS_ACCESS_KEY_ID": "k",
        "AWS_SECRET_ACCESS_KEY": "s",
        "AWS_REGION": "r",
    }
    c = s3a_conf(env)
    assert c["spark.hadoop.fs.s3a.endpoint"] == "https://s3.example:9000"
    assert c["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "true"
    assert c["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert (
        c["spark.hadoop.fs.s3a.access.key"],
        c["spark.hadoop.fs.s3a.secret.key"],
        c["spark.hadoop.fs.s3a.endpoint.region"],
    ) == ("k", "s", "r")
    assert c["spark.hadoop.fs.s3.impl"] == "org.apache.hadoop.fs.s3a.S3AFileSystem"
    assert s3a_conf({"AWS_PROFILE": "x"}) == {}


@pytest.mark.classic(
    reason="sets S3A on the running session's Hadoop configuration (sparkContext._jsc): no JVM on Connect"
)
def test_s3_table_through_s3a(dspark, monkeypatch):
    """hadoop-aws and the AWS SDK bundle load: a table delta-rs wrote to an S3 server (moto) reads
    through ``s3://`` (mapped to S3A) with time travel, and one Spark appends reads in delta-rs."""
    moto_server = pytest.importorskip("moto.server", reason="needs moto's S3 server (pip install 'moto[server]')")
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    srv = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    srv.start()
    env = {
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_REGION": "us-east-1",
    }
    hadoop = dspark.sparkContext._jsc.hadoopConfiguration()
    try:
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        for k, v in s3a_conf(env).items():  # what get_spark sets at start, set on the running session
            hadoop.set(k[len("spark.hadoop.") :], v)
        import boto3
        from deltalake import write_deltalake

        boto3.client("s3").create_bucket(Bucket="cbp")
        so = {"AWS_ALLOW_HTTP": "true", "AWS_S3_ALLOW_UNSAFE_RENAME": "true"}
        write_deltalake("s3://cbp/t", pa.table({"k": ["a", "b"], "n": [1, 2]}), storage_options=so)
        write_deltalake("s3://cbp/t", pa.table({"k": ["c"], "n": [3]}), mode="append", storage_options=so)
        assert sorted(r.k for r in read_delta(dspark, "s3://cbp/t", 0).collect()) == ["a", "b"]
        assert sorted(r.k for r in read_delta(dspark, "s3://cbp/t").collect()) == ["a", "b", "c"]
        dspark.createDataFrame([("d", 4)], "k STRING, n BIGINT").write.format("delta").mode("append").save("s3://cbp/t")
        assert sorted(DeltaTable("s3://cbp/t", storage_options=so).to_pyarrow_table()["k"].to_pylist()) == [
            "a",
            "b",
            "c",
            "d",
        ]
    finally:
        for k in s3a_conf(env):
            hadoop.unset(k[len("spark.hadoop.") :])
        srv.stop()


COLLIDING = """
pipeline: coll
flows:
  flow_x: {external: true, schema: {url: string}}
  x:      {schema: {url: string, count: int}}
  URLS:   {schema: {url: string, count: int}}
  urls:   {schema: {url: string}}
stages:
  x:
    translator: MOD:tr
    partitions: 2
    inputs: [{flow: flow_x, route_by: url}]
    state: {schema: {url: string, count: int}}
    outputs: [x, URLS, urls]
"""
COLLIDING_MODULE = """
def tr(key, state, flow_x, out):
    prev = next(state, None)
    n = sum(1 for _ in flow_x) + (prev["count"] if prev else 0)
    out.state.write({"url": key, "count": n})
    out.x.write({"url": key, "count": n})
    out.URLS.write({"url": key, "count": n})
    out.urls.write({"url": key})
"""


def test_views_whose_names_collide_are_refused_not_mixed_up(dspark, make_pipeline, tmp_path):
    """Flow 'x' of stateful stage 'x' is the view flow_x, as is the flow 'flow_x'; 'URLS' and 'urls'
    are one name to Spark: a query naming either is refused, the others still work."""
    p = cbp.load(make_pipeline(COLLIDING, COLLIDING_MODULE), home=str(tmp_path / "home"), spark=dspark)
    p.feed("flow_x", [{"url": "a"}, {"url": "a"}, {"url": "b"}])
    p.run()
    for query in ("SELECT * FROM flow_x", "SELECT * FROM urls", "SELECT * FROM `URLS`"):
        with pytest.raises(CbpError) as e:
            p.sql(query)
        assert e.value.code == "sql-ambiguous", query
    assert sorted(tuple(r) for r in p.sql("SELECT url, count FROM x").collect()) == [("a", 2), ("b", 1)]
