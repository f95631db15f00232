"""The codes of a call made wrongly (the command line, the Python API) and of the input it is handed: records, and
the user code a stage runs."""

from __future__ import annotations

from .entry import INP, UC, Code, U, _c

SECTIONS: list[tuple[str, list[Code]]] = [
    (
        "The command line and the Python API",
        [
            _c("usage", U, 2, "a command given wrongly", "`cbp COMMAND --help`"),
            _c(
                "bad-option",
                U,
                2,
                "an option out of range (or an unknown `mode`)",
                "the message gives the allowed values",
            ),
            _c("bad-tuning", U, 2, "a tuning value out of range", "the message gives the allowed range"),
            _c("exists", U, 2, "`cbp init`: files already there", "choose another directory"),
            _c(
                "bad-home",
                U,
                2,
                "a `--home` cbp cannot use (not a local directory or `s3://` URI, another pipeline's home), or one "
                "that "
                "looks like a mistyped URL (`s3:/b`, `s3:b`, `s3//b`, `gs:b`: it would be a local directory of that "
                "name)",
                "give a directory or an `s3://BUCKET/PREFIX` (a local directory with a colon: `./s3:/b`)",
            ),
            _c("bad-feed-id", INP, 3, "a feed id that is not a plain string", "give a short plain string"),
            _c("unknown-epoch", U, 2, "an `--epoch` that has not happened", "`cbp status` shows the epochs"),
            _c("no-state", U, 2, "a stage without state was asked for its state", "ask for its output flows instead"),
            _c(
                "bad-sql",
                U,
                2,
                "`cbp sql`: a query that does not parse (line and column given)",
                "query the pipeline's views by name",
            ),
            _c(
                "sql-unknown-view",
                U,
                2,
                "`cbp sql`: a table name that is no view of the pipeline (refused before Spark starts)",
                "the message lists the views: each stateful stage, each flow",
            ),
            _c(
                "sql-time-travel",
                U,
                2,
                "`cbp sql`: `TIMESTAMP AS OF`, or `VERSION AS OF` something other than a whole number",
                "cbp's views travel by epoch: `VIEW VERSION AS OF N`, or `--epoch N`",
            ),
            _c(
                "unknown-view",
                U,
                2,
                "`cbp explain`: a name that is no SQL view of the pipeline",
                "the message lists the views",
            ),
            _c("sql-not-query", U, 2, "`cbp sql`: a statement that is not a query", "give a SELECT"),
            _c(
                "sql-not-allowed",
                U,
                2,
                "`cbp sql`: a query that reads files or calls what it may not",
                "query the views by name",
            ),
            _c("sql-ambiguous", U, 2, "`cbp sql`: a name two views share", "the message names them"),
            _c("no-corpus", U, 2, "`cbp crawl`: a `--corpus` that is not a directory", "fix the crawler's arguments"),
            _c(
                "bad-host",
                U,
                2,
                "`cbp crawl`: a host that cannot be used, or two corpora of one host",
                "give each corpus its own host",
            ),
            _c(
                "bad-seed",
                U,
                2,
                "`cbp crawl`: a seed URL that cannot be used",
                "give an `http://HOST/PATH` of a corpus",
            ),
            _c(
                "bad-flow",
                U,
                2,
                "`cbp crawl`: a queue or pages flow of the wrong fields, or the wrong one external",
                "check the flows' names and schemas",
            ),
        ],
    ),
    (
        "Input records",
        [
            _c(
                "bad-record",
                INP,
                3,
                "a record does not fit the flow's schema",
                "fix the record; nothing of the feed landed",
            ),
            _c(
                "bad-diff",
                (INP, UC),
                (3, 4),
                "a record's `_diff` is not a nonzero whole number within int64 (fed: exit 3; "
                "written by a batch translator: exit 4)",
                "give `_diff` as a nonzero int (+1 adds, -1 retracts)",
            ),
            _c(
                "duplicate-feed",
                INP,
                3,
                "`cbp feed --id X` of records equal to a feed landed without an id that a stage "
                "has not read yet: most likely the same delivery retried (without `--id` it is a warning, and both "
                "land)",
                "nothing landed; if the records are new after all, feed them with `--force` (Python `force=True`); "
                "`cbp unfeed` withdraws the earlier feed",
            ),
            _c(
                "retraction-refused",
                (INP, UC),
                (3, 4),
                "a record whose `_diff` is not +1 (a retraction, or several "
                "copies) is bound for a stage input that does not say `signed: true`; at feed or sync time (exit 3) "
                "nothing "
                "of the feed landed; at the epoch, for a flow a stage writes (exit 4), nothing of the epoch was "
                "committed",
                "make the stage's translator sum `_diff` (not count records), then add `signed: true` to the stage or "
                "that input ([retractions](../howto/retractions.md)); feed again or run again",
            ),
            _c(
                "keyed-diff",
                INP,
                3,
                "a keyed flow's feed has a `_diff` other than +1 (upsert) or -1 (delete)",
                "send each event once, as an upsert or a delete",
            ),
            _c(
                "retract-missing",
                INP,
                3,
                "a keyed flow's feed deletes a key that has no row",
                "the message names flow, key and feed; nothing of the feed landed",
            ),
            _c(
                "negative-multiplicity",
                INP,
                3,
                "`cbp output --consolidated` (or a backfill's `cbp plan`, as a refused "
                "line): a record retracted more often than added",
                "find the feed that retracts it (the message names it)",
            ),
        ],
    ),
    (
        "Your code",
        [
            _c(
                "user-code",
                UC,
                4,
                "a translator, RouteBy, FrameBy or runnable raised, or wrote a record that does not fit",
                "the message names stage, epoch and key; fix it and run again: the epoch was not committed",
            ),
            _c(
                "view-overflow",
                UC,
                4,
                "a SQL view's decimal value does not fit its type, or an int its 64 bits (Spark's ANSI mode fails "
                "the query too)",
                "the message names the view; widen the inputs' decimal type or fix the data: the epoch was not "
                "committed",
            ),
            _c(
                "view-cast",
                UC,
                4,
                "a SQL view's CAST (or a string compared with a number or date, or read by to_date) met a value "
                "Spark's ANSI mode cannot convert: malformed, or out of the type's range (Spark fails the query too)",
                "the message names the view and the row; fix the data, or write TRY_CAST (NULL instead): the epoch "
                "was not committed",
            ),
            _c(
                "timeout",
                UC,
                4,
                "an epoch ran past `--epoch-timeout` or the stage's `timeout`",
                "find what is slow, or raise the limit",
            ),
            _c(
                "worker-died",
                UC,
                4,
                "a Python worker died (out of memory, `os._exit`)",
                "a translator's `os._exit` is caught: the message names stage, epoch, task partition, key and your "
                "line; "
                "a worker killed otherwise is named by stage and epoch",
            ),
            _c(
                "route-target",
                UC,
                4,
                "records sent to a key or flow that cannot take them",
                "check where the translator writes",
            ),
            _c(
                "not-storable",
                UC,
                4,
                "a runnable's state, a frame state or a framing key cbp cannot keep (not JSON, too large)",
                "keep large data in the stage's state; the message says which",
            ),
            _c(
                "batch-output",
                UC,
                4,
                "a `batch: true` translator returned something that is not a mapping of tables",
                "see [Vectorised translate](../guide/batch.md)",
            ),
            _c(
                "batch-schema",
                UC,
                4,
                "a batch translator's table does not fit the flow's schema",
                "the message names the row",
            ),
            _c(
                "batch-key",
                UC,
                4,
                "a batch translator's `removed` keys that cannot be read",
                "see the guide's `removed`",
            ),
            _c("batch-duplicate-key", UC, 4, "a batch translator's state table has a key twice", "one row per key"),
            _c(
                "migrate-failed",
                UC,
                4,
                "a `migrate:` function raised or returned a record that does not fit, or two stored rows "
                "of a key would share a row key; nothing changed",
                "fix the function (the message names the row or record)",
            ),
        ],
    ),
]
