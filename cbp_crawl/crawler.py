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

Example::

    import cbp
    p = cbp.load("flows/crawl_queue.yaml", home="state/crawl")
    c = Crawler(p, [Corpus("bench/data/python3.11-doc")], max_pages=100)
    c.round(seeds=["http://python3.11-doc/usr/share/doc/python3.11/html/index.html"]).line()
    # 'crawl round 1: 0 new in queue, fetched 1 of 1 (0 failed); 0 left in the frontier'
    p.run()

The crawler's position (rounds done, queue epochs consumed, frontier, fetched and failed URLs,
and a log of the rounds: which queue epochs each one had read, what it landed as which feed) is
``<home>/_crawler/state.json``. A round first records what it will fetch, then lands the
pages with the feed id ``crawl:<round>``: a round killed half way is redone identically by the
next call and lands once.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from cbp import BusyError, RuntimeStateError, UsageError
from cbp.spec.schema import RecordError
from cbp.storage.lease import Lease

from .crawlstate import _well_formed, upgrade_state
from .fetch import MAX_PAGE_BYTES, MAX_URL_CHARS, REASONS, Corpus, Fetched, _reason_of, _split, decode_html
from .links import normalize_url
from .rounds import CrawlRound, _diff, _score
from .schedule import Revisits, due_revisits, host_of, pick
from .stats import freshness

if TYPE_CHECKING:
    from cbp import Pipeline

__all__ = ["Corpus", "Crawler", "CrawlRound", "Fetched", "decode_html", "MAX_PAGE_BYTES", "MAX_URL_CHARS", "REASONS"]

_STATE = "_crawler/state.json"
SEED_SCORE = 1e300  # seeds are fetched before any queued URL


class Crawler:
    """Runs crawl rounds for a crawl-queue pipeline (see the module docstring).

    ``queue`` is the flow the crawler reads (URL and score records), ``pages`` the external flow
    it lands pages on; ``max_pages`` caps the pages fetched per round.
    """

    def __init__(
        self,
        pipeline: Pipeline,
        corpora: Iterable[Corpus],
        *,
        max_pages: int = 1000,
        queue: str = "crawl_queue",
        pages: str = "pages",
        max_bytes: int = MAX_PAGE_BYTES,
        policy: Revisits | None = None,
        clock: Callable[[], float] = time.time,
        measure_freshness: bool = False,
    ) -> None:
        self.p = pipeline
        self.policy = policy or Revisits()
        self.clock = clock
        self.measure_freshness = measure_freshness
        self.corpora: dict[str, Corpus] = {}
        for c in corpora:
            if c.site in self.corpora:
                raise UsageError(
                    f"two corpus directories stand for {c.site}: {self.corpora[c.site].root} and {c.root}; "
                    "give one of them another host (--host NAME)",
                    code="bad-host",
                )
            self.corpora[c.site] = c
        if max_pages < 1:
            raise UsageError(f"max_pages must be at least 1, got {max_pages}", code="bad-option")
        self.max_pages = max_pages
        self.max_bytes = max_bytes
        spec = pipeline.spec
        for name, want, role in ((queue, ("url", "score"), "queue"), (pages, ("url", "html"), "pages")):
            if name not in spec.flows:
                raise UsageError(
                    f"{spec.name}: the crawler's {role} flow '{name}' is not a flow of the pipeline "
                    f"({', '.join(spec.flows)})",
                    code="unknown-flow",
                )
            missing = [f for f in want if f not in spec.flows[name].schema.fields]
            if missing:
                raise UsageError(
                    f"{spec.name}: flow '{name}' lacks the field(s) {', '.join(missing)} "
                    f"the crawler's {role} flow needs",
                    code="bad-flow",
                )
        if spec.flows[pages].producer is not None:
            raise UsageError(
                f"{spec.name}: flow '{pages}' is produced by stage '{spec.flows[pages].producer}'; "
                "the crawler lands on an external flow",
                code="bad-flow",
            )
        if spec.flows[queue].producer is None:
            raise UsageError(
                f"{spec.name}: flow '{queue}' is external; the crawler reads a flow a stage produces", code="bad-flow"
            )
        self.queue, self.pages = queue, pages
        self._page_fields = set(spec.flows[pages].schema.fields)
        self.producer = spec.flows[queue].producer

    # ------------------------------------------------------------------ state
    def state(self) -> dict[str, Any]:
        """The crawler's position: rounds, queue epochs consumed, frontier, fetched and failed URLs."""
        st: dict[str, Any] | ValueError | None
        try:
            st = self.p.home.read_json(_STATE)
        except ValueError as e:  # not JSON, not UTF-8
            st = e
        if st is None:
            return {
                "round": 0,
                "cursor": 0,
                "frontier": {},
                "fetched": [],
                "failed": {},
                "doing": None,
                "rounds": [],
                "pages": {},
            }
        if isinstance(st, ValueError) or not _well_formed(st):
            why = str(st)[:80] if isinstance(st, ValueError) else "not the fields a crawler writes"
            raise RuntimeStateError(
                f"the crawler's position {self.p.home.uri(_STATE)} is damaged ({why}); restore it from a "
                "backup, or delete it to crawl again from round 1 with new seeds (feed ids crawl:N would "
                "repeat: use a new home then)",
                code="bad-crawler-state",
                path=self.p.home.uri(_STATE),
            )
        return upgrade_state(st, float(self.clock()), self.policy)

    def _save(self, st: dict[str, Any]) -> None:
        self.p.home.write_json(_STATE, st)

    @contextmanager
    def _lock(self) -> Iterator[None]:
        local = self.p.home.local_dir()
        if local is None:  # a home on S3: a lease (see cbp.storage.lease)
            lease = Lease(self.p.home.lease_store("the crawler's lock"), "crawler", self.p.home.holder_info())
            if not lease.try_acquire()[0]:
                raise BusyError(
                    f"another crawler is working on {self.p.home.location}; run one crawler per home", code="busy"
                )
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
                raise BusyError(
                    f"another crawler is working on {self.p.home.location}; run one crawler per home", code="busy"
                ) from None
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

    def _corpus_of(self, url: str) -> Corpus | None:
        """The corpus that holds the URL's site (also one it names with a port or user info, which it
        refuses); raises for a non-URL."""
        scheme, netloc, _ = _split(url)
        host = netloc.lower()
        return self.corpora.get(f"{scheme}://{host}") or next(
            (
                c
                for c in self.corpora.values()
                if c.scheme == scheme and c.host in (host.rpartition("@")[2], host.rpartition(":")[0])
            ),
            None,
        )

    def _outside(self, url: str) -> bool:
        """Whether no corpus holds the URL's site: "outside the corpus" without a fetch (and without using a pick)."""
        try:
            return self._corpus_of(url) is None
        except Exception:  # noqa: BLE001 -- not a URL: fetched, to fail with its own reason
            return False

    def fetch(self, url: str) -> Fetched:
        """Fetch one URL from the corpus that holds its site; never raises (reasons: :data:`REASONS`)."""
        try:
            corpus = self._corpus_of(url)
            if corpus is None:
                return Fetched(url, reason="outside the corpus")
            return corpus.fetch(url, self.max_bytes)  # says why a port or user info is refused
        except Exception as e:  # noqa: BLE001 -- one URL never stops the crawler
            return Fetched(url, reason=_reason_of(e))

    def _plan(self, st: dict[str, Any], seeds: Iterable[str]) -> dict[str, Any]:
        """What round ``st['round'] + 1`` will fetch (its write-ahead record)."""
        k = st["round"] + 1
        done = set(st["fetched"]) | set(st["failed"])
        frontier: dict[str, float] = dict(st["frontier"])
        seeded: list[str] = []
        for s in seeds:  # a seed is the user's: a bad one is a usage error, before anything is written
            try:
                u = normalize_url(s) if isinstance(s, str) else None
            except ValueError:  # e.g. a lone surrogate
                u = None
            if u is None:
                raise UsageError(f"seed {s!r} is not an http(s) URL", code="bad-seed")
            if (
                u not in st["fetched"]
            ):  # a seed given again is fetched again if it failed (a wrong --host, a missing corpus)
                st["failed"].pop(u, None)
                frontier[u] = SEED_SCORE
        records, newest = self.new_queue_records(st["cursor"])
        retracted = 0
        for r in records:  # a queued URL is never an error: at worst it is fetched and fails with a reason
            u, score = r.get("url"), _score(r.get("score"))
            if not isinstance(u, str):
                continue
            if _diff(r) < 0:  # the queue took it back (its score fell below the threshold)
                if u in frontier and frontier[u] != SEED_SCORE:
                    del frontier[u]
                    retracted += 1
            elif u not in done and (u not in frontier or score > frontier[u]):
                frontier[u] = score
        outside = sorted(u for u in frontier if self._outside(u))  # other sites: failed at once, no pick used
        for u in outside:
            del frontier[u]
        seeded = [u for u in frontier if frontier[u] == SEED_SCORE]
        new = sorted((u for u in frontier if frontier[u] != SEED_SCORE), key=lambda u: (-frontier[u], u))
        now = float(self.clock())
        picks, revisits = pick(sorted(seeded), due_revisits(st["pages"], now), new, self.max_pages, self.policy)
        for u in picks:
            frontier.pop(u, None)
        return {
            "round": k,
            "cursor": newest,
            "picks": picks,
            "queued": len(records),
            "frontier": frontier,
            "revisits": revisits,
            "now": now,
            "feeds": self.p.feeds(self.pages),
            "retracted": retracted,
            "outside": outside,
        }

    def _fetch_new(
        self, u: str, st: dict[str, Any], rep: CrawlRound, landed: dict[str, dict[str, Any]], moved: list[str]
    ) -> None:
        """Fetch a URL not crawled before."""
        schema = self.p.spec.flow(self.pages).schema
        try:
            f = self.fetch(u)
            if f.html is not None:
                schema.validate(
                    self._record(f.url, 200, f.html, f.digest, 0.0)
                )  # a page the flow would refuse fails alone, not the round
        except Exception as e:  # noqa: BLE001 -- fetch never raises; if it did, this pick fails, not the round
            f = Fetched(u, reason=_reason_of(e) if not isinstance(e, RecordError) else f"failed: {type(e).__name__}")
        if f.html is None:
            rep.failed[u] = f.reason or "failed"
        elif f.url in landed or (f.url != u and (f.url in st["fetched"] or f.url in st["pages"])):
            moved.append(u)  # http://h/dir when http://h/dir/ was fetched already
        else:
            landed[f.url] = {"f": f, "status": 200, "kind": "new"}
            rep.landed.append(f.url)
            if f.url != u:
                moved.append(u)
            if f.truncated:
                rep.truncated.append(f.url)

    def _revisit(
        self, u: str, entry: dict[str, Any], landed: dict[str, dict[str, Any]], outcome: dict[str, str]
    ) -> None:
        """Fetch a crawled page again (conditionally: its stamp plays Last-Modified)."""
        stamp = tuple(entry["stamp"]) if entry.get("status") == 200 and entry.get("stamp") else None
        try:
            f = self._corpus_fetch(u, stamp)
            if f.html is not None:
                self.p.spec.flow(self.pages).schema.validate(self._record(u, 200, f.html, f.digest, 0.0))
        except Exception as e:  # noqa: BLE001
            f = Fetched(u, reason=_reason_of(e) if not isinstance(e, RecordError) else f"failed: {type(e).__name__}")
        if f.not_modified or (f.html is not None and entry.get("status") == 200 and f.digest == entry.get("digest")):
            outcome[u] = "unchanged"
            landed[u] = {"f": f, "status": 304, "kind": "unchanged"}
        elif f.html is not None:
            outcome[u] = "changed" if entry.get("status") == 200 else "back"
            landed[u] = {"f": f, "status": 200, "kind": outcome[u]}
        elif str(f.reason).startswith(("unreadable: changing", "failed: ")):
            outcome[u] = "retry"  # transient: neither a version nor a miss
        else:
            outcome[u] = "missed" if entry.get("status") == 200 else "still gone"

    def _corpus_fetch(self, url: str, unless: tuple[int, int, int] | None) -> Fetched:
        f = self.fetch(url) if unless is None else None
        if f is not None:
            return f
        try:
            scheme, netloc, _ = _split(url)
            corpus = self.corpora.get(f"{scheme}://{netloc.lower()}")
            return (
                corpus.fetch(url, self.max_bytes, unless=unless)
                if corpus
                else Fetched(url, reason="outside the corpus")
            )
        except Exception as e:  # noqa: BLE001
            return Fetched(url, reason=_reason_of(e))

    def _record(self, url: str, status: int, html: str | None, digest: str | None, now: float) -> dict[str, Any]:
        """A ``pages`` record with the fields the flow has."""
        rec = {"url": url, "status": status, "html": html, "digest": digest, "fetched": now}
        return {k: v for k, v in rec.items() if k in self._page_fields}

    def _outages(self, doing: dict[str, Any], st: dict[str, Any], outcome: dict[str, str]) -> set[str]:
        """Hosts whose revisited live pages all vanished this round (suspected outages: held back)."""
        by_host: dict[str, list[str]] = {}
        for u in doing.get("revisits", ()):
            if st["pages"][u].get("status") == 200:
                by_host.setdefault(host_of(u), []).append(outcome.get(u, ""))
        held = set()
        outages = st.setdefault("outages", {})
        for h, seen in by_host.items():
            corpus = next((c for c in self.corpora.values() if c.host == h), None)
            root_gone = corpus is not None and not (os.path.isdir(corpus.root) and any(os.scandir(corpus.root)))
            if seen and all(o == "missed" for o in seen) and (len(seen) >= 2 or root_gone):
                outages[h] = outages.get(h, 0) + 1
                if outages[h] <= self.policy.outage_rounds:
                    held.add(h)
            else:
                outages.pop(h, None)
        return held

    def round(self, seeds: Iterable[str] = ()) -> CrawlRound:
        """Run one crawl round (``seeds`` join the frontier first); lands at most one increment.

        New URLs land as status 200; due revisits land only what changed: a new version (200),
        a page gone (404, after ``gone_after`` misses) or back; an unchanged page lands nothing.
        """
        with self._lock():
            st = self.state()
            redone = st["doing"] is not None
            if not redone:
                st["doing"] = self._plan(st, seeds)
                self._save(st)  # write-ahead: a killed round is redone with exactly these picks
            doing = st["doing"]
            now = float(doing.get("now", self.clock()))
            revisits = set(doing.get("revisits", ()))
            rep = CrawlRound(doing["round"], queued=doing["queued"], picked=list(doing["picks"]), redone=redone)
            landed: dict[str, dict[str, Any]] = {}
            moved: list[str] = []  # picks landed under another URL (a directory's, with its "/")
            outcome: dict[str, str] = {}
            for u in doing.get("outside", ()):
                rep.failed[u] = "outside the corpus"
            for u in doing["picks"]:
                if u in revisits and u in st["pages"]:
                    self._revisit(u, st["pages"][u], landed, outcome)
                else:
                    self._fetch_new(u, st, rep, landed, moved)
            held = self._outages(doing, st, outcome)
            records = self._versions(st, landed, outcome, held, now, rep)
            if redone and "feeds" in doing and self.p.feeds(self.pages) > doing["feeds"]:
                self._as_landed(st, doing)  # landed by the killed try: the schedule follows what landed
            elif records:
                rep.increments = self.p.feed(self.pages, records, feed_id=f"crawl:{doing['round']}")
            st["round"], st["cursor"], st["frontier"] = doing["round"], doing["cursor"], doing["frontier"]
            st["fetched"] = st["fetched"] + [u for u in rep.landed if u not in st["fetched"]] + moved
            st["failed"] = {**st["failed"], **rep.failed}
            st["doing"] = None
            rep.frontier = len(st["frontier"])
            rep.records = len(records)
            rep.retracted = int(doing.get("retracted", 0))
            st.setdefault("rounds", []).append(
                {
                    "round": rep.round,
                    "cursor": doing["cursor"],
                    "queued": rep.queued,
                    "picked": len(rep.picked),
                    "landed": len(records),
                    "failed": len(rep.failed),
                    "frontier": rep.frontier,
                    "feed": (self.p.feeds(self.pages) if records else None),
                    "at": time.strftime("%Y-%m-%dT%H:%M:%S"),
                    "now": now,
                    **{k: len(v) for k, v in rep.counts().items()},
                    "held_hosts": sorted(held),
                    "queue_retracted": rep.retracted,
                }
            )
            if self.measure_freshness:
                st["rounds"][-1]["freshness"] = freshness(self, st["pages"])
            self._save(st)
            return rep

    def _versions(
        self,
        st: dict[str, Any],
        landed: dict[str, dict[str, Any]],
        outcome: dict[str, str],
        held: set[str],
        now: float,
        rep: CrawlRound,
    ) -> list[dict[str, Any]]:
        """The round's ``pages`` records, and each URL's schedule after the round (in ``st['pages']``)."""
        pol, pages, records = self.policy, st["pages"], []
        for u, got in landed.items():
            f = got["f"]
            if got["kind"] == "new":
                pages[u] = pol.new_entry(now, f.digest, f.stamp)
                records.append(self._record(u, 200, f.html, f.digest, now))
                rep.fetched.append(u)
            elif got["kind"] == "unchanged":
                pages[u] = {
                    **pol.revisited(pages[u], now, changed=False),
                    "stamp": list(f.stamp) if f.stamp else pages[u].get("stamp"),
                }
                rep.unchanged.append(u)
            else:
                pages[u] = {
                    **pol.revisited(pages[u], now, changed=True),
                    "status": 200,
                    "digest": f.digest,
                    "stamp": list(f.stamp) if f.stamp else None,
                }
                records.append(self._record(u, 200, f.html, f.digest, now))
                (rep.changed if got["kind"] == "changed" else rep.back).append(u)
                rep.landed.append(u)
        for u, o in outcome.items():
            if o == "missed" and host_of(u) in held:
                pages[u] = {**pages[u], "next": now + pol.revisit_min, "last": now}
                rep.held.append(u)
            elif o in ("missed", "still gone"):
                gone = (
                    o == "missed" and pages[u].get("misses", 0) + 1 >= pol.gone_after and "status" in self._page_fields
                )
                pages[u] = pol.missed(pages[u], now, gone=gone)
                if gone:
                    records.append(self._record(u, 404, None, None, now))
                    rep.gone.append(u)
            elif o == "retry":
                pages[u] = {**pages[u], "next": now + pol.revisit_min}
        rep.revisited = [u for u in outcome]
        return records

    def _as_landed(self, st: dict[str, Any], doing: dict[str, Any]) -> None:
        """A redone round whose feed the killed try had landed: the schedule takes the digests that landed."""
        for r in self.p.output(self.pages, epoch=doing["feeds"] + 1):
            e = st["pages"].get(r.get("url"))
            if e is not None:
                e["status"] = r.get("status") or 200
                e["digest"] = r.get("digest")
                e["stamp"] = None  # read it again next time: the digest decides

    def pending(self) -> int:
        """URLs waiting: the frontier plus queue records not consumed yet."""
        st = self.state()
        records, _ = self.new_queue_records(st["cursor"])
        done = set(st["fetched"]) | set(st["failed"])
        waiting = set(st["frontier"])
        for r in records:  # in order: a retraction (_diff -1) takes a URL back out
            if _diff(r) < 0:
                waiting.discard(r.get("url"))
            elif r.get("url") not in done:
                waiting.add(r.get("url"))
        return len(waiting)
