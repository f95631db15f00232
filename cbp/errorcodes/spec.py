"""The codes of a pipeline YAML cbp refuses: syntax, keys, flows, stages and schemas."""

from __future__ import annotations

from .entry import INP, Code, S, U, _c

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
            _c(
                "bad-frame-by",
                S,
                2,
                "a `frame_by` field of a type framing cannot key by (`date`, `timestamp`, `decimal`, `binary`)",
                "frame by a function (`module:function`) that returns, e.g., the value's ISO text",
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
        "SQL views (`views:`)",
        [
            _c(
                "view-syntax",
                S,
                2,
                "a view's SQL that does not parse (Spark dialect), or is more than one statement",
                "fix the SQL at the line and column given (counted in the view's SQL)",
            ),
            _c(
                "view-unknown",
                S,
                2,
                "a view reads a flow or column the pipeline does not have, an ambiguous column, or a column "
                "neither grouped nor aggregated",
                "the message lists the flows or columns there are",
            ),
            _c(
                "view-unsupported",
                S,
                2,
                "a SQL construct views do not compile yet (outer or non-equi joins, subqueries, windows, "
                "ORDER BY/LIMIT, CAST, non-deterministic functions, ...)",
                "see [SQL views](../howto/sql-views.md) for what is supported; the message names the construct "
                "and its line and column",
            ),
        ],
    ),
]
