"""The codes of changing a pipeline that holds data: plan, upgrade, rewind, unfeed."""

from __future__ import annotations

from .entry import RS, Code, U, _c

SECTIONS: list[tuple[str, list[Code]]] = [
    (
        "Changing a pipeline: plan, upgrade, rewind, unfeed",
        [
            _c(
                "pipeline-changed",
                U,
                2,
                "the YAML, or a newer cbp's compilation of it, changed stored data since the home recorded it",
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
                "add it back with `backfill: true` (rebuilt from its inputs' whole contents, while the home holds "
                "them: "
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
                "rewind-expired",
                RS,
                5,
                "`cbp rewind` to an epoch older than the home's retention keeps (history and logs trimmed)",
                "rewind to the oldest epoch reachable (the message names it) or later; `cbp history` starts there",
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
