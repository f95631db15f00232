"""Every path and file name of a home, in one place.

Paths are relative to the home (a local directory or an object-store URI)::

    flows/<flow>/_inc=<id>/                 Delta table of the flow's increments, partitioned by _inc
    stages/<stage>/state/_part=<p>/         Delta table of state records, partitioned by _part
    stages/<stage>/index/_part=<p>/         BIPtable index files (key hash -> data file, row group): a whole
                                            file and deltas on it
    views/<view>/                           Delta table of a SQL view's current rows (no _diff, unpartitioned,
                                            a file per bucket of rows: cbp.storage.viewtable)
    _cbp/controller/<seq>.json              controller snapshots (what is live)
    _cbp/history/...                        what happened: epochs, feeds, feed ids, collected increments
    _cbp/intentions/<stage>.json            write-ahead intention of the stage epoch under way
    _cbp/pending.json                       a change being committed
    _cbp/retention.json                     how far back history and logs are kept, and the horizon reached
    _cbp/lock, _cbp/runner.lock, _cbp/runner.json   locks (local homes) and who runs
    _cbp/leases/<name>/<seq>.json           leases instead of locks (homes on S3, see cbp.storage.lease)
    _crawler/state.json                     the crawl application's position

Files a stage epoch writes start with ``e<epoch>`` (state and index) or ``s<stage>-e<epoch>``
(output increments), so an abandoned attempt's files are found and deleted. A stage epoch's
files of an output flow go to the directory of the increment it took for the flow before its
tasks ran; when the tasks frame the flow by a field, the driver learns the increments (there may
be several) afterwards, and the Delta log's partition values, not the directory, say which
increment each file is in.

    >>> LAYOUT.epoch_entry("count", 7)
    '_cbp/history/stages/count/epochs/000000000007.json'
    >>> LAYOUT.increment_dir("urls", 3), LAYOUT.output_prefix("count", 2)
    ('flows/urls/_inc=3', 'scount-e00000002')
"""

from __future__ import annotations

import hashlib

__all__ = ["Layout", "LAYOUT", "INC", "PART", "SRC", "epoch_of"]

INC = "_inc"  # partition column of a flow's table: the increment id
SRC = "_src"  # column of a framed flow: the feed or producing epoch of each record
PART = "_part"  # partition column of a state table: the state partition


class Layout:
    """Paths of a home (see the module docstring); one shared instance, :data:`LAYOUT`."""

    CONTROLLER = "_cbp/controller"
    INTENTIONS = "_cbp/intentions"
    PENDING = "_cbp/pending.json"
    LOCK = "_cbp/lock"
    RUNNER_LOCK = "_cbp/runner.lock"
    RUNNER = "_cbp/runner.json"
    LEASES = "_cbp/leases"
    HISTORY = "_cbp/history"
    RETENTION = "_cbp/retention.json"  # cbp.controller.retention
    CRAWLER = "_crawler/state.json"
    CRAWLER_LOCK = "_crawler/lock"

    # ------------------------------------------------------------ tables
    def flow(self, flow: str) -> str:
        return f"flows/{flow}"

    def increment_dir(self, flow: str, inc: int) -> str:
        return f"flows/{flow}/{INC}={inc}"

    def state(self, stage: str) -> str:
        return f"stages/{stage}/state"

    def index(self, stage: str) -> str:
        return f"stages/{stage}/index"

    def view_table(self, view: str) -> str:
        """The Delta table of SQL view ``view``'s current rows (:mod:`cbp.storage.viewtable`)."""
        return f"views/{view}"

    def bindings(self, stage: str) -> str:
        """Directory of the multicast bindings a stage epoch makes (read by the stage's next epoch)."""
        return f"stages/{stage}/bindings"

    def delta_commit(self, table: str, version: int) -> str:
        """The Delta log file of commit ``version`` of the table at ``table`` (Delta protocol naming)."""
        return f"{table}/_delta_log/{version:020d}.json"

    def delta_last_checkpoint(self, table: str) -> str:
        """The Delta log's pointer to the table's newest checkpoint (Delta protocol naming)."""
        return f"{table}/_delta_log/_last_checkpoint"

    def part_dir(self, base: str, p: int) -> str:
        return f"{base}/{PART}={p}"

    def epoch_prefix(self, epoch: int) -> str:
        """Prefix of the state and index files a stage epoch writes."""
        return f"e{epoch:08d}"

    def output_prefix(self, stage: str, epoch: int) -> str:
        """Prefix of the output-increment files a stage epoch writes."""
        return f"s{stage}-{self.epoch_prefix(epoch)}"

    def lease_dir(self, name: str) -> str:
        return f"{self.LEASES}/{name}"

    # ------------------------------------------------------------ controller records
    def snapshot(self, seq: int) -> str:
        return f"{self.CONTROLLER}/{seq:012d}.json"

    def intention(self, stage: str) -> str:
        return f"{self.INTENTIONS}/{stage}.json"

    def epoch_entry(self, stage: str, epoch: int) -> str:
        return f"{self.HISTORY}/stages/{stage}/epochs/{epoch:012d}.json"

    def feed_entry(self, flow: str, n: int) -> str:
        return f"{self.HISTORY}/flows/{flow}/feeds/{n:012d}.json"

    def feed_id_entry(self, flow: str, feed_id: str) -> str:
        digest = hashlib.sha256(feed_id.encode("utf-8", "surrogatepass")).hexdigest()[:40]
        return f"{self.HISTORY}/flows/{flow}/feed_ids/{digest}.json"

    def snapshot_copy(self, seq: int) -> str:
        """The controller snapshot a stage epoch committed, kept for ``cbp rewind`` (snapshots themselves
        are pruned)."""
        return f"{self.HISTORY}/snapshots/{seq:012d}.json"

    def rewind_entry(self, seq: int) -> str:
        """The record of the rewind committed as change ``seq``: where it went back to, the epochs it undid."""
        return f"{self.HISTORY}/rewinds/{seq:012d}.json"

    def feed_hash_entry(self, flow: str, digest: str) -> str:
        """The feeds of ``flow`` whose records hash to ``digest`` (duplicate feeds are warned about)."""
        return f"{self.HISTORY}/flows/{flow}/hashes/{digest[:40]}.json"

    def collected_dir(self, flow: str) -> str:
        return f"{self.HISTORY}/flows/{flow}/collected"

    def collected_entry(self, flow: str, inc: int) -> str:
        return f"{self.collected_dir(flow)}/{inc:012d}.json"


LAYOUT = Layout()


def epoch_of(path: str) -> int | None:
    """The stage epoch that wrote a state, index or bindings file (its name starts with
    :meth:`Layout.epoch_prefix`), or None.

        >>> epoch_of("s3://b/home/stages/s/bindings/e00000012-p00003-1f2e.parquet"), epoch_of("x.parquet")
        (12, None)
    """
    name = path.rstrip("/").rsplit("/", 1)[-1]
    return int(name[1:9]) if len(name) > 9 and name[0] == "e" and name[1:9].isdigit() else None
