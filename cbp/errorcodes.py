"""The catalog of cbp's error codes: for each code, the error class(es) it is raised with, the exit
code ``cbp`` ends with, what it means and what to do. ``docs/reference/error-codes.md`` is generated
from it (``python -m cbp.errorcodes > docs/reference/error-codes.md``; a test compares the two), and
``tests/test_error_catalog.py`` checks it against every raise site in ``cbp/``, both ways.

Adding a code is one :class:`Code` entry in :data:`SECTIONS`.

    >>> entry("busy").classes[0].__name__, entry("busy").exits
    ('BusyError', (6,))
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Union

from .errors import BusyError, CbpError, InputError, RuntimeStateError, SpecError, UsageError, UserCodeError

__all__ = ["Code", "Reported", "SECTIONS", "REPORTED", "entry", "markdown"]

_Classes = Union[type[CbpError], tuple[type[CbpError], ...]]
_Exits = Union[int, tuple[int, ...]]


@dataclass(frozen=True)
class Code:
    """One error code: raised as ``classes`` (in that order, ``cbp`` exits with ``exits``)."""

    code: str
    classes: tuple[type[CbpError], ...]
    exits: tuple[int, ...]
    meaning: str
    hint: str


def _c(code: str, classes: _Classes, exits: _Exits, meaning: str, hint: str) -> Code:
    """A :class:`Code` entry; one class and exit code may be given bare."""
    cls = classes if isinstance(classes, tuple) else (classes,)
    ex = exits if isinstance(exits, tuple) else (exits,)
    return Code(code, cls, ex, meaning, hint)


@dataclass(frozen=True)
class Reported:
    """A code cbp reports without raising it (a warning, a refused plan line, a rejected inbox file)."""

    code: str
    where: str
    meaning: str
    hint: str


S, U, INP, UC, RS, B = SpecError, UsageError, InputError, UserCodeError, RuntimeStateError, BusyError

#: The codes, by subject (a section of the page each).
SECTIONS: list[tuple[str, list[Code]]] = [
    (
        "The pipeline YAML",
        [
            _c(
                "invalid-spec",
                S,
                2,
                "a key is missing, unknown or of the wrong type",
                "compare with [YAML keys](yaml-keys.md)",
            ),
            _c("yaml", S, 2, "the file is not valid YAML", "fix the syntax at the line given"),
            _c(
                "yaml-too-big",
                S,
                2,
                "the file is larger than cbp reads",
                "a pipeline file is small: is it the right file?",
            ),
            _c("yaml-too-deep", S, 2, "mappings or sequences nested too deep", "write the YAML out plainly"),
            _c("yaml-recursive", S, 2, "an alias inside the node it refers to", "write the YAML out plainly"),
            _c("duplicate-key", S, 2, "a key appears twice in one mapping", "remove the repetition"),
            _c(
                "unreadable",
                (S, INP),
                (2, 3),
                "a file that cannot be read: the YAML (exit 2), or a file fed (exit 3)",
                "check the path and permissions; a file handed to `feed` must be opened in binary mode",
            ),
            _c(
                "bad-name",
                (S, U),
                (2, 2),
                "a pipeline, flow or stage name (or `cbp init`'s) that is not a plain identifier",
                "letters, digits and `_`, at most 100 characters",
            ),
            _c(
                "unknown-flow",
                (S, U),
                (2, 2),
                "a flow the pipeline does not have (in the YAML, or `cbp crawl`'s flows)",
                "the message lists the flows it has",
            ),
            _c("unknown-stage", S, 2, "a stage the pipeline does not have", "the message lists the stages it has"),
            _c("unknown-field", S, 2, "a field the schema does not have", "the message lists the fields it has"),
            _c("no-stages", S, 2, "a pipeline without stages", "add one"),
            _c("no-input", S, 2, "a stage without inputs", "every stage reads at least one flow"),
            _c(
                "no-producer",
                S,
                2,
                "a flow nobody writes that is not external",
                "make it `external: true`, or write it",
            ),
            _c("two-producers", S, 2, "a flow two stages write", "give each flow exactly one source"),
            _c("external-produced", S, 2, "an external flow a stage also writes", "give each flow exactly one source"),
            _c("duplicate-input", S, 2, "a stage lists an input flow twice", "remove the repetition"),
            _c("empty-schema", S, 2, "a schema without fields", "give it fields"),
            _c(
                "bad-type",
                S,
                2,
                "a field type cbp does not know, or a default that does not fit its type",
                "see the types in [YAML keys](yaml-keys.md)",
            ),
            _c(
                "type-mismatch",
                S,
                2,
                "two schemas of one flow that disagree",
                "make the stage's input schema a subset of the flow's",
            ),
            _c("reserved-name", S, 2, "a name cbp reserves (`state`, a field starting with `_`)", "rename it"),
            _c(
                "bad-import",
                S,
                2,
                "a `module:function` that does not import",
                "the module is looked up beside the YAML first",
            ),
            _c(
                "bad-signature",
                S,
                2,
                "a function that cannot be called as cbp calls it",
                "check the function's parameters",
            ),
            _c("bad-order-by", S, 2, "an input's `order_by` that cannot work", "the message says what is expected"),
            _c("bad-params", S, 2, "a stage's or the pipeline's `params` that is not a mapping", "give a mapping"),
            _c(
                "route-required",
                S,
                2,
                "a stage with state whose inputs have no `route_by`",
                "give each input a `route_by`",
            ),
            _c("frame-mismatch", S, 2, "inputs of one stage framed differently", "the message says what is expected"),
            _c(
                "broadcast-nowhere",
                S,
                2,
                "every input is routed to ALL, so no key is ever called",
                "route one input by key, or make the state grouping outer",
            ),
            _c(
                "batch-needs-keys",
                S,
                2,
                "`batch: true` on a stage without keys",
                "give its inputs a `route_by`, or drop `batch`",
            ),
            _c("migrate-without-state", S, 2, "`migrate:` on a stage without state", "remove it"),
            _c(
                "bad-row-key",
                S,
                2,
                "a stage's `state: {row_key: ...}` names no field, a field twice, a field not in the state "
                "schema or a nullable/non-scalar one",
                "give non-null `string`, `int` or `bool` fields of the state schema",
            ),
            _c(
                "not-external",
                (S, INP),
                (2, 3),
                "`source:`/`key:` on a flow that is not external (exit 2); a feed to a "
                "flow that is not external (exit 3)",
                "feed only external flows",
            ),
            _c("source-framed", S, 2, "a source or keyed flow with a `frame_by`", "remove the `frame_by`"),
            _c("bad-source", S, 2, "a `source:` that is not a local path, `file:` URI or `s3://` URI", "fix the URI"),
            _c("no-key", S, 2, "a `source:` flow without `key:`", "give the fields that identify a row"),
            _c(
                "bad-key",
                S,
                2,
                "a `key:` that lists no field, a field twice, or one not a string, int or bool",
                "name the scalar fields that identify a row",
            ),
            _c(
                "bad-sequence",
                S,
                2,
                "a `sequence_by` that is not a required orderable field outside the key",
                "name such a field of the schema",
            ),
            _c(
                "bad-delete-when",
                S,
                2,
                "a `delete_when` that is not a `bool` field outside the key",
                "name such a field",
            ),
        ],
    ),
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
                "a `--home` cbp cannot use (not a local directory or `s3://` URI, another pipeline's home), or one that "
                "looks like a mistyped URL (`s3:/b`, `s3:b`, `s3//b`, `gs:b`: it would be a local directory of that name)",
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
                "has not read yet: most likely the same delivery retried (without `--id` it is a warning, and both land)",
                "nothing landed; if the records are new after all, feed them with `--force` (Python `force=True`); "
                "`cbp unfeed` withdraws the earlier feed",
            ),
            _c(
                "retraction-refused",
                (INP, UC),
                (3, 4),
                "a record whose `_diff` is not +1 (a retraction, or several "
                "copies) is bound for a stage input that does not say `signed: true`; at feed or sync time (exit 3) nothing "
                "of the feed landed; at the epoch, for a flow a stage writes (exit 4), nothing of the epoch was committed",
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
                "a translator's `os._exit` is caught: the message names stage, epoch, task partition, key and your line; "
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
            _c("no-java", RS, 5, "Java 17 is missing", "install Java"),
            _c(
                "no-delta-jars",
                RS,
                5,
                "Spark's Delta connector jars were not resolved",
                "run `bash scripts/setup` (needs Maven)",
            ),
            _c("spark-conf", RS, 5, "`CBP_SPARK_CONF` is not `key=value;...`", "fix the variable"),
            _c(
                "bad-setting",
                RS,
                5,
                "a `CBP_*` environment variable cbp cannot read (a number that is not one)",
                "fix or unset it: see [settings](settings.md)",
            ),
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
                "source-cdf-missing",
                INP,
                3,
                "a version's change data was vacuumed",
                "land the table anew in a new home",
            ),
            _c(
                "source-schema",
                INP,
                3,
                "the table's schema no longer fits the flow",
                "change the flow's schema, or the table",
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
    (
        "Changing a pipeline: plan, upgrade, rewind, unfeed",
        [
            _c(
                "pipeline-changed",
                U,
                2,
                "the YAML changed stored data since the home recorded it",
                "`cbp plan` shows the changes; `cbp upgrade` applies them, or restore the previous YAML",
            ),
            _c(
                "plan-refused",
                U,
                2,
                "`cbp upgrade`: a change cbp cannot make (each refused line gives its own code, below)",
                "follow the line's advice",
            ),
            _c(
                "not-archived",
                U,
                2,
                "`--restore-archived`/`--discard-archived` named a stage not added back",
                "check `cbp status` for the archived stages",
            ),
            _c(
                "archive-increments-collected",
                U,
                2,
                "the archived stage missed increments that were garbage-collected",
                "add it back with `backfill: true` (rebuilt from its inputs' whole contents, while the home holds them: "
                "`cbp plan` says) or with `--discard-archived STAGE` (empty)",
            ),
            _c(
                "backfill-unavailable",
                U,
                2,
                "a stage with `backfill: true` needs its inputs' whole contents and the home "
                "no longer holds some (a table version's log cleaned up, increment files vacuumed or deleted, or "
                "increments stored before a flow's `migrate:`); a refused plan line, or raised by `cbp upgrade` if "
                "the home changed since the plan",
                "add the stage without `backfill: true` (it starts empty), or restore the files from a backup",
            ),
            _c(
                "archive-gone",
                U,
                2,
                "files of the archived state are gone (vacuumed)",
                "add the stage back empty or with `backfill: true`",
            ),
            _c(
                "upgrade-failed",
                RS,
                5,
                "the Spark job rewriting a stage's state failed; nothing changed",
                "run `cbp upgrade` again",
            ),
            _c(
                "rewind-needs-stage",
                U,
                2,
                "`cbp rewind --to-epoch N` on several stages without `--stage`",
                "say whose epoch: `--stage S`, or `--to-epoch 0`",
            ),
            _c(
                "rewind-across-upgrade",
                U,
                2,
                "`cbp rewind` to before an upgrade that changed stored data",
                "rewind to an epoch after the upgrade, or to 0",
            ),
            _c(
                "rewind-unavailable",
                RS,
                5,
                "the epoch was committed by a cbp that kept no snapshot",
                "rewind to a later epoch, or to 0",
            ),
            _c(
                "rewind-vacuumed",
                RS,
                5,
                "a table version the rewind needs was cleaned up",
                "rewind to a later epoch; nothing changed",
            ),
            _c("not-produced", U, 2, "`undone_output` of an external flow", "name a flow a stage writes"),
            _c(
                "unknown-feed",
                U,
                2,
                "`cbp unfeed` of a feed number the flow never had",
                "`cbp history` lists the feeds",
            ),
            _c(
                "feed-read",
                U,
                2,
                "`cbp unfeed` of a feed a stage has already read",
                "rewind to before it, or feed retractions",
            ),
            _c("feed-keyed", U, 2, "`cbp unfeed` on a keyed or Delta-source flow", "feed the opposite change instead"),
            _c("feed-shared", U, 2, "the feed's increment is framed together with other feeds", "rewind, or retract"),
        ],
    ),
]

#: Codes reported without being raised.
REPORTED: list[Reported] = [
    Reported(
        "unreached-cycle", "`cbp validate` warning", "stages in a cycle nothing feeds", "feed the cycle, or remove it"
    ),
    Reported(
        "waits-on-dead-stage",
        "`cbp validate` warning",
        "a stage waits on one that can never run",
        "see the stages named",
    ),
    Reported(
        "unsigned-reader",
        "`cbp validate` warning",
        "a Delta source, a keyed flow, or the output of a `signed: true` stage feeds an input that is not "
        "signed, so its first retraction will be refused",
        "as for `retraction-refused`, before it happens",
    ),
    Reported(
        "self-loop-all",
        "`cbp validate` warning",
        "a stage that only feeds itself with `runnable: all`",
        "use `runnable: any`",
    ),
    Reported(
        "schema-refused",
        "refused plan line",
        "a schema change that is not adding a nullable/defaulted field, dropping one or widening",
        "give the stage (or the flow) a `migrate: module:function`, or restore the previous type",
    ),
    Reported(
        "keyed-refused",
        "refused plan line",
        "a keyed flow's `key:` or schema changed while it holds data",
        "restore the previous definition, or land the data under a new flow",
    ),
    Reported(
        "reframed",
        "refused plan line",
        "a flow's `frame_by` added or removed while it holds increments",
        "restore the previous `frame_by`, or give the flow a new name",
    ),
    Reported(
        "archived-stage",
        "refused plan line",
        "a removed stage was added back and the plan needs to know how it starts",
        "`--restore-archived STAGE`, `backfill: true`, or `--discard-archived STAGE`",
    ),
    Reported(
        "not-a-regular-file",
        "rejected inbox file",
        "an inbox file that is a link or a device",
        "land regular files only",
    ),
    Reported(
        "bad-inbox",
        "inbox flow not landed",
        "an inbox directory that is a link or not a directory",
        "make it a directory",
    ),
]


def entry(code: str) -> Code:
    """The catalog entry of ``code`` (KeyError if there is none)."""
    for _, codes in SECTIONS:
        for c in codes:
            if c.code == code:
                return c
    raise KeyError(code)


_INTRO = """# Error codes

Every error cbp reports has a stable code, printed as `cbp COMMAND: error [CODE]: message` (and in
Python as the `code` attribute of the `cbp.errors` exception). The message names the file, stage,
flow or record; the code is what scripts and tests should match. Nothing is landed or committed
by a command that fails with one of them. The exit code follows the error's class: 2 a mistake in
the YAML or the command (`SpecError`, `UsageError`), 3 bad input records (`InputError`), 4 user
code failed (`UserCodeError`), 5 a runtime or storage problem (`RuntimeStateError`, and an
`OSError` cbp did not expect), 6 another run holds the home (`BusyError`); 130 interrupted.

The mistakes of a pipeline YAML are reported together: every one that does not follow from another
(a stage reading an unknown flow is not also checked against that flow's schema), one a line, each
with its file, line, stage or flow and code; the `SpecError`'s `code` is the first one's and its
`problems` lists every `(code, message)`.

This page is generated from the catalog in `cbp/errorcodes.py`, which `tests/test_error_catalog.py`
checks against every place cbp raises a code; after changing the catalog, regenerate it with
`python -m cbp.errorcodes > docs/reference/error-codes.md`.
"""


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown() -> str:
    """The error-code page."""
    out = [_INTRO]
    for title, codes in SECTIONS:
        out += [f"## {title}", "", "| code | raised as | exit | what it means | what to do |", "|---|---|---|---|---|"]
        for c in codes:
            classes = ", ".join(f"`{k.__name__}`" for k in c.classes)
            exits = ", ".join(str(e) for e in c.exits)
            out.append(f"| `{c.code}` | {classes} | {exits} | {_cell(c.meaning)} | {_cell(c.hint)} |")
        out.append("")
    out += [
        "## Reported, not raised",
        "",
        "Warnings, the lines of a refused plan (under `plan-refused`) and inbox files "
        "set aside: they carry a code but end no command by themselves.",
        "",
        "| code | where | what it means | what to do |",
        "|---|---|---|---|",
    ]
    out += [f"| `{r.code}` | {r.where} | {_cell(r.meaning)} | {_cell(r.hint)} |" for r in REPORTED]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.stdout.write(markdown())
