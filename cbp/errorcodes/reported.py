"""The codes cbp reports without raising them: warnings, the lines of a refused plan, inbox files set aside."""

from __future__ import annotations

from .entry import Reported

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
