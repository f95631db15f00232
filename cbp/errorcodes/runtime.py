"""The codes of the running system: the home, Spark, another run holding the home, and Delta tables read as
sources."""

from __future__ import annotations

from .entry import INP, RS, B, Code, S, _c

SECTIONS: list[tuple[str, list[Code]]] = [
    (
        "The home, Spark and the runtime",
        [
            _c(
                "runtime",
                RS,
                5,
                "a Spark job or a Delta table failed (the generic code of `RuntimeStateError`)",
                "read the message",
            ),
            _c(
                "io",
                RS,
                5,
                "reading or writing the home failed (disk full, object store unreachable)",
                "fix the storage and run again: epochs are atomic",
            ),
            _c(
                "home-unreachable",
                RS,
                5,
                "an `s3://` home whose endpoint takes no connection (refused, unresolvable, "
                "timed out); the message names the endpoint",
                "start the object store, or correct `AWS_ENDPOINT_URL`",
            ),
            _c(
                "home-corrupt",
                RS,
                5,
                "the home's files are not what cbp wrote",
                "restore the home from a copy, or start a new one",
            ),
            _c(
                "damaged-home",
                RS,
                5,
                "a snapshot or table of the home is missing or damaged",
                "restore the home, or start a new one",
            ),
            _c(
                "home-format",
                RS,
                5,
                "the home was written by another version of cbp",
                "use that version, or a new home",
            ),
            _c(
                "bad-setting",
                RS,
                5,
                "a `CBP_*` environment variable cbp cannot read (a number that is not one)",
                "fix or unset it: see [settings](settings.md)",
            ),
            _c("no-java", RS, 5, "Java 17 is missing", "install Java"),
            _c(
                "no-delta-jars",
                RS,
                5,
                "Spark's Delta connector jars were not resolved",
                "run `bash scripts/setup` (needs Maven)",
            ),
            _c(
                "connect-session-closed",
                RS,
                5,
                "the Spark Connect session named by `;session_id=` in the URL was closed on the server",
                "take a new session id, or leave it out",
            ),
            _c("spark-conf", RS, 5, "`CBP_SPARK_CONF` is not `key=value;...`", "fix the variable"),
            _c(
                "lease-config",
                RS,
                5,
                "object-store lease settings cbp cannot use",
                "see [cluster and S3](../howto/cluster-s3.md)",
            ),
            _c("unsupported-store", RS, 5, "a URI scheme cbp does not speak", "use a local path or `s3://`"),
            _c(
                "needs-local-home",
                RS,
                5,
                "Airflow DAGs given an `s3://` homes root",
                "see [Airflow](../howto/airflow.md)",
            ),
            _c("sql-failed", RS, 5, "a query failed while it ran", "the message carries Spark's reason"),
            _c("bad-config", RS, 5, "the Airflow DAGs' configuration", "see [Airflow](../howto/airflow.md)"),
            _c("dag-id-collision", RS, 5, "two pipelines with one DAG id", "rename one"),
            _c("duplicate-pipeline", RS, 5, "two YAML files define one pipeline name", "rename one"),
            _c(
                "unknown-pipeline",
                RS,
                5,
                "a DAG names a pipeline no YAML defines",
                "check the name and the flows directory",
            ),
            _c("env-file", RS, 5, "an environment file that cannot be read", "fix the file"),
            _c(
                "bad-crawler-state",
                RS,
                5,
                "the crawler's stored position is damaged",
                "start the crawl again in a new home",
            ),
            _c(
                "follower-failed",
                RS,
                5,
                "the follower the Airflow DAG started (`cbp run --follow`) exited at its start",
                "read the follower's log named in the message",
            ),
        ],
    ),
    (
        "Another run",
        [
            _c(
                "busy",
                B,
                6,
                "another `cbp run` or crawler holds the home (the message names it)",
                "wait for it, or stop it",
            ),
            _c(
                "lease-lost",
                B,
                6,
                "on an object store, this process's lease ran out and another took over",
                "nothing was committed; run again",
            ),
        ],
    ),
    (
        "Delta tables as sources (`cbp sync`)",
        [
            _c(
                "source-missing",
                INP,
                3,
                "the source table cannot be opened as a Delta table (at that version)",
                "check the URI and the AWS_* settings",
            ),
            _c(
                "source-no-cdf",
                INP,
                3,
                "a version was written without change data feed, so cbp cannot tell what it "
                "changed (also a warning on a first sync of such a table)",
                "`ALTER TABLE ... SET TBLPROPERTIES (delta.enableChangeDataFeed = true)`, then re-land once: "
                "`cbp sync FLOW.yaml --reland FLOW`",
            ),
            _c(
                "source-deletion-vectors",
                INP,
                3,
                "the source table has deletion vectors (`delta.enableDeletionVectors`, Spark's default for new "
                "tables on some platforms) and cbp's Delta reader (delta-rs) cannot read its rows as of a "
                "version: a first sync, a re-land or a view built from the table's whole contents; following "
                "its change data feed works",
                "`ALTER TABLE ... DROP FEATURE deletionVectors` in Spark (it purges them), then sync again",
            ),
            _c(
                "source-reader-feature",
                INP,
                3,
                "the source table uses a Delta reader feature that cbp's Delta reader (delta-rs) cannot read, "
                "neither its rows nor its change data: `typeWidening` (`delta.enableTypeWidening`, a column's "
                "type widened in place), ...; named in the message",
                "drop the feature in Spark (`ALTER TABLE ... DROP FEATURE typeWidening` rewrites the files "
                "written before a type change), then sync again",
            ),
            _c(
                "source-cdf-missing",
                INP,
                3,
                "a version's change data was vacuumed",
                "land the table anew in a new home",
            ),
            _c(
                "source-schema",
                (INP, S),
                (3, 2),
                "the table's schema no longer fits the flow (exit 3); or, for a flow without `schema:`, a column "
                "of a type cbp cannot carry (a struct, a map, a timestamp without a zone ...; exit 2, named)",
                "change the flow's schema, or the table; give the flow a `schema:` of the columns it reads",
            ),
            _c(
                "source-version",
                INP,
                3,
                "the table's newest version is older than what was landed: it was re-created",
                "land it in a new home",
            ),
            _c(
                "source-changed",
                INP,
                3,
                "the flow's `source:` names another table than the one it landed",
                "land the new table in a new home or under a flow of its own",
            ),
            _c("source-flow", INP, 3, "`cbp feed` on a flow fed by its source table", "use `cbp sync` (or `cbp run`)"),
            _c(
                "not-source", INP, 3, "`cbp sync` named a flow without `source:`", "name a source flow, or none for all"
            ),
        ],
    ),
]
