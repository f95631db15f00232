"""The crawler of the crawl-queue loop (paper 001 §1.1): queue in, pages out.

One *round* reads the ``crawl_queue`` records it has not consumed yet, "fetches" the best of
them (at most ``max_pages``, highest score first) from a local corpus that stands for the web,
and lands the fetched pages as the next increment of ``pages``. URLs it cannot fetch (outside
the corpus, missing, not HTML, not a corpus path at all) are recorded with the reason (a stable
prefix from :data:`REASONS`) and never tried again; no URL, however hostile, makes a round fail.

A corpus is a directory (e.g. an unpacked Debian documentation package) whose files are the
URLs ``http://<host>/<path>``, ``host`` defaulting to the directory's name. Links that leave
the corpus keep their real URLs and are simply unfetchable. Nothing outside the directory is
ever opened, whatever the URL or the symbolic links in the directory (see :class:`Corpus`).

    >>> import cbp
    >>> p = cbp.load("flows/crawl_queue.yaml", home="state/crawl")                   # doctest: +SKIP
    >>> c = Crawler(p, [Corpus("bench/data/python3.11-doc")], max_pages=100)          # doctest: +SKIP
    >>> c.round(seeds=["http://python3.11-doc/usr/share/doc/python3.11/html/index.html"]).line()  # doctest: +SKIP
    'crawl round 1: 0 new in queue, fetched 1 of 1 (0 failed); 0 left in the frontier'
    >>> p.run()                                                                       # doctest: +SKIP

The crawler's position (rounds done, queue epochs consumed, frontier, fetched and failed URLs,
and a log of the rounds: which queue epochs each one had read, what it landed as which feed) is
``<home>/_crawler/state.json``. A round first records what it will fetch, then lands the
pages with the feed id ``crawl:<round>``: a round killed half way is redone identically by the
next call and lands once.
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Iterator

from ..errors import RuntimeStateError, UsageError
from ..spec.schema import RecordError
from ..storage.lease import Lease
from .fetch import MAX_PAGE_BYTES, MAX_URL_CHARS, REASONS, Corpus, Fetched, _reason_of, _split, decode_html
from .links import normalize_url

if TYPE_CHECKING:
    from ..pipeline import Pipeline

__all__ = ["Corpus", "Crawler", "CrawlRound", "Fetched", "decode_html", "MAX_PAGE_BYTES", "MAX_URL_CHARS", "REASONS"]

_STATE = "_crawler/state.json"
_STATE_FIELDS = {"round": int, "cursor": int, "frontier": dict, "fetched": list, "failed": dict}  # and "doing": a dict or None
SEED_SCORE = 1e300  # seeds are fetched before any queued URL


def _well_formed(st: Any) -> bool:
    """Whether ``st`` has the fields, types and ranges a crawler writes (nothing else is resumed from).

        >>> _well_formed({"round": 1, "cursor": 2, "frontier": {"http://h/": 1.5}, "fetched": ["http://h/a"], "failed": {}, "doing": None})
        True
        >>> _well_formed({"round": 1, "cursor": -5, "frontier": {}, "fetched": [[2]], "failed": {}, "doing": {}})
        False
    """
    def count(v: Any) -> bool:
        return type(v) is int and v >= 0

    def scores(v: Any) -> bool:
        return isinstance(v, dict) and all(isinstance(u, str) and type(x) in (int, float) for u, x in v.items())

    def urls(v: Any) -> bool:
        return isinstance(v, list) and all(isinstance(u, str) for u in v)

    if not (isinstance(st, dict) and all(type(st.get(k)) is t for k, t in _STATE_FIELDS.items()) and isinstance(st.get("rounds", []), list)):
        return False
    if not (count(st["round"]) and count(st["cursor"]) and scores(st["frontier"]) and urls(st["fetched"])
            and all(isinstance(u, str) and isinstance(r, str) for u, r in st["failed"].items())):
        return False
    doing = st.get("doing")
    return doing is None or (isinstance(doing, dict) and count(doing.get("round")) and doing["round"] == st["round"] + 1
                             and count(doing.get("cursor")) and urls(doing.get("picks"))
                             and count(doing.get("queued")) and scores(doing.get("frontier")))


def _score(value: Any) -> float:
    """A queue record's score as a number (one that is not a number ranks last: -inf)."""
    try:
        score = float(value)
    except (TypeError, ValueError):
        return float("-inf")
    return score if score == score else float("-inf")


@dataclass
class CrawlRound:
    """One round: what was new in the queue, what was fetched and landed, what failed."""

    round: int
    queued: int = 0
    picked: list[str] = field(default_factory=list)
    landed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    truncated: list[str] = field(default_factory=list)
    frontier: int = 0
    increments: list[int] = field(default_factory=list)
    redone: bool = False

    def line(self) -> str:
        """One line for a log."""
        extra = f", {len(self.truncated)} truncated" if self.truncated else ""
        again = " (redone after an interruption)" if self.redone else ""
        return (f"crawl round {self.round}{again}: {self.queued} new in queue, fetched {len(self.landed)} of {len(self.picked)} "
                f"({len(self.failed)} failed{extra}); {self.frontier} left in the frontier")


class Crawler:
    """Runs crawl rounds for a crawl-queue pipeline (see the module docstring).

    ``queue`` is the flow the crawler reads (URL and score records), ``pages`` the external flow
    it lands pages on; ``max_pages`` caps the pages fetched per round.
    """

    def __init__(self, pipeline: "Pipeline", corpora: Iterable[Corpus], *, max_pages: int = 1000, queue: str = "crawl_queue",
                 pages: str = "pages", max_bytes: int = MAX_PAGE_BYTES) -> None:
        self.p = pipeline
        self.corpora: dict[str, Corpus] = {}
        for c in corpora:
            if c.site in self.corpora:
                raise UsageError(f"two corpus directories stand for {c.site}: {self.corpora[c.site].root} and {c.root}; "
                                 "give one of them another host (--host NAME)", code="bad-host")
            self.corpora[c.site] = c
        if max_pages < 1:
            raise UsageError(f"max_pages must be at least 1, got {max_pages}", code="bad-option")
        self.max_pages = max_pages
        self.max_bytes = max_bytes
        spec = pipeline.spec
        for name, want, role in ((queue, ("url", "score"), "queue"), (pages, ("url", "html"), "pages")):
            if name not in spec.flows:
                raise UsageError(f"{spec.name}: the crawler's {role} flow '{name}' is not a flow of the pipeline ({', '.join(spec.flows)})", code="unknown-flow")
            missing = [f for f in want if f not in spec.flows[name].schema.fields]
            if missing:
                raise UsageError(f"{spec.name}: flow '{name}' lacks the field(s) {', '.join(missing)} the crawler's {role} flow needs", code="bad-flow")
        if spec.flows[pages].producer is not None:
            raise UsageError(f"{spec.name}: flow '{pages}' is produced by stage '{spec.flows[pages].producer}'; the crawler lands on an external flow", code="bad-flow")
        if spec.flows[queue].producer is None:
            raise UsageError(f"{spec.name}: flow '{queue}' is external; the crawler reads a flow a stage produces", code="bad-flow")
        self.queue, self.pages = queue, pages
        self.producer = spec.flows[queue].producer

    # ------------------------------------------------------------------ state
    def state(self) -> dict[str, Any]:
        """The crawler's position: rounds, queue epochs consumed, frontier, fetched and failed URLs."""
        try:
            st = self.p.home.read_json(_STATE)
        except ValueError as e:  # not JSON, not UTF-8
            st = e
        if st is None:
            return {"round": 0, "cursor": 0, "frontier": {}, "fetched": [], "failed": {}, "doing": None, "rounds": []}
        if not _well_formed(st):
            raise RuntimeStateError(f"the crawler's position {self.p.home.uri(_STATE)} is damaged ({str(st)[:80] if isinstance(st, ValueError) else 'not the fields a crawler writes'}); "
                                    "restore it from a backup, or delete it to crawl again from round 1 with new seeds (feed ids crawl:N would repeat: "
                                    "use a new home then)", code="bad-crawler-state", path=self.p.home.uri(_STATE))
        return st

    def _save(self, st: dict[str, Any]) -> None:
        self.p.home.write_json(_STATE, st)

    @contextmanager
    def _lock(self) -> Iterator[None]:
        local = self.p.home.local_dir()
        if local is None:  # a home on S3: a lease (see cbp.storage.lease)
            lease = Lease(self.p.home.lease_store("the crawler's lock"), "crawler", self.p.home.holder_info())
            if not lease.try_acquire()[0]:
                raise UsageError(f"another crawler is working on {self.p.home.location}; run one crawler per home", code="busy")
            try:
                yield
            finally:
                lease.release()
            return
        import fcntl

        os.makedirs(os.path.join(local, "_crawler"), exist_ok=True)
        fd = os.open(os.path.join(local, "_crawler", "lock"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise UsageError(f"another crawler is working on {self.p.home.location}; run one crawler per home", code="busy") from None
            yield
        finally:
            os.close(fd)

    # ------------------------------------------------------------------ a round
    def new_queue_records(self, cursor: int) -> tuple[list[dict[str, Any]], int]:
        """Queue records of the producer's epochs after ``cursor``, and the newest epoch."""
        newest = int(self.p.status()["stages"][self.producer]["epochs"])
        out: list[dict[str, Any]] = []
        for e in range(cursor + 1, newest + 1):
            out += self.p.output(self.queue, epoch=e)
        return out, newest

    def fetch(self, url: str) -> Fetched:
        """Fetch one URL from the corpus that holds its site; never raises (reasons: :data:`REASONS`)."""
        try:
            scheme, netloc, _ = _split(url)
            host = netloc.lower()
            corpus = self.corpora.get(f"{scheme}://{host}") or next(
                (c for c in self.corpora.values() if c.scheme == scheme and c.host in (host.rpartition("@")[2], host.rpartition(":")[0])), None)
            if corpus is None:
                return Fetched(url, reason="outside the corpus")
            return corpus.fetch(url, self.max_bytes)  # says why a port or user info is refused
        except Exception as e:  # noqa: BLE001 -- one URL never stops the crawler
            return Fetched(url, reason=_reason_of(e))

    def round(self, seeds: Iterable[str] = ()) -> CrawlRound:
        """Run one crawl round (``seeds`` join the frontier first); lands at most one increment."""
        with self._lock():
            st = self.state()
            redone = st["doing"] is not None
            if not redone:
                k = st["round"] + 1
                done = set(st["fetched"]) | set(st["failed"])
                frontier: dict[str, float] = dict(st["frontier"])
                for s in seeds:  # a seed is the user's: a bad one is a usage error, before anything is written
                    try:
                        u = normalize_url(s) if isinstance(s, str) else None
                    except ValueError:  # e.g. a lone surrogate
                        u = None
                    if u is None:
                        raise UsageError(f"seed {s!r} is not an http(s) URL", code="bad-seed")
                    if u not in st["fetched"]:  # a seed given again is fetched again if it failed (a wrong --host, a missing corpus)
                        st["failed"].pop(u, None)
                        frontier[u] = SEED_SCORE
                records, newest = self.new_queue_records(st["cursor"])
                for r in records:  # a queued URL is never an error: at worst it is fetched and fails with a reason
                    u, score = r.get("url"), _score(r.get("score"))
                    if isinstance(u, str) and u not in done and (u not in frontier or score > frontier[u]):
                        frontier[u] = score
                picks = sorted(frontier, key=lambda u: (-frontier[u], u))[: self.max_pages]
                for u in picks:
                    del frontier[u]
                st["doing"] = {"round": k, "cursor": newest, "picks": picks, "queued": len(records),
                               "frontier": frontier}
                self._save(st)  # write-ahead: a killed round is redone with exactly these picks
            doing = st["doing"]
            rep = CrawlRound(doing["round"], queued=doing["queued"], picked=list(doing["picks"]), redone=redone)
            pages = []
            moved: list[str] = []  # picks landed under another URL (a directory's, with its "/")
            schema = self.p.spec.flow(self.pages).schema
            for u in doing["picks"]:
                try:
                    f = self.fetch(u)
                    if f.html is not None:
                        schema.validate({"url": u, "html": f.html})  # a page the flow would refuse fails alone, not the round
                except Exception as e:  # noqa: BLE001 -- fetch never raises; if it did, this pick fails, not the round
                    f = Fetched(u, reason=_reason_of(e) if not isinstance(e, RecordError) else f"failed: {type(e).__name__}")
                if f.html is None:
                    rep.failed[u] = f.reason or "failed"
                elif f.url in rep.landed or (f.url != u and f.url in st["fetched"]):
                    moved.append(u)  # http://h/dir when http://h/dir/ was fetched already
                else:
                    pages.append({"url": f.url, "html": f.html})
                    rep.landed.append(f.url)
                    if f.url != u:
                        moved.append(u)
                    if f.truncated:
                        rep.truncated.append(f.url)
            if pages:
                rep.increments = self.p.feed(self.pages, pages, feed_id=f"crawl:{doing['round']}")
            st["round"] = doing["round"]
            st["cursor"] = doing["cursor"]
            st["frontier"] = doing["frontier"]
            st["fetched"] = st["fetched"] + rep.landed + moved
            st["failed"] = {**st["failed"], **rep.failed}
            st["doing"] = None
            rep.frontier = len(st["frontier"])
            st.setdefault("rounds", []).append({"round": rep.round, "cursor": doing["cursor"], "queued": rep.queued, "picked": len(rep.picked),
                                                "landed": len(rep.landed), "failed": len(rep.failed), "frontier": rep.frontier,
                                                "feed": (self.p.feeds(self.pages) if rep.landed else None),
                                                "at": time.strftime("%Y-%m-%dT%H:%M:%S")})
            self._save(st)
            return rep

    def pending(self) -> int:
        """URLs waiting: the frontier plus queue records not consumed yet."""
        st = self.state()
        records, _ = self.new_queue_records(st["cursor"])
        done = set(st["fetched"]) | set(st["failed"])
        return len(set(st["frontier"]) | {r["url"] for r in records if r["url"] not in done})
