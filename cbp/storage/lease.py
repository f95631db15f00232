"""Leases: locks for homes on S3, made of create-if-absent writes (``PutObject`` with ``If-None-Match: *``).

A lease ``name`` of a home is a numbered sequence of small JSON records::

    <home>/_cbp/leases/<name>/000000000001.json    {"holder": ..., "expires": ..., "released": false, "info": {...}}
    <home>/_cbp/leases/<name>/000000000002.json    ...

The highest record is the truth. A process *acquires* the lease by creating record ``n + 1``
when record ``n`` is released or expired (or there is none); the store lets exactly one create
succeed, so of two racers one wins and the other sees the winner's record. The holder *renews* by
creating the next record itself before its record expires (a thread, every ``renew`` seconds):
nobody else writes while the lease is live, so a renewal is never lost to a thief unless the
holder stalled past its expiry, in which case its next renewal fails and it learns it lost the
lease (:attr:`Lease.lost`). *Release* creates a released record. A holder that is killed stops
renewing, and its lease is taken over once it has expired. Old records are deleted behind the
highest ones. Expiry is judged by wall clock: the hosts sharing a home need synchronized clocks
(well within ``ttl``).

``ttl`` (default 30 s, ``CBP_LEASE_TTL``) and ``renew`` (default ttl/3, ``CBP_LEASE_RENEW``) are
seconds.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import settings as cbp_settings
from ..errors import RuntimeStateError
from .layout import LAYOUT
from .objectstore import ObjectStoreSettings, settings

__all__ = ["Lease", "LeaseRecord", "S3Objects", "default_ttl"]

KEEP = 3  # records kept behind the highest one (a reader that listed just before a prune still finds its record)
PRUNE_EVERY = 8  # prune when the sequence number is a multiple of this (a prune is a listing and some deletes)
_CLIENTS: dict[Any, Any] = {}
_CLIENTS_GUARD = threading.Lock()


def _client(store: ObjectStoreSettings | None = None) -> Any:
    """This process's boto3 S3 client for ``store`` (default: the environment's settings; creating one costs ~0.5 s)."""
    s = store if store is not None else settings()
    with _CLIENTS_GUARD:
        client = _CLIENTS.get(s)
        if client is None:
            import boto3
            from botocore.config import Config

            cfg = Config(
                s3={"addressing_style": "path"} if s.endpoint else {}, retries={"max_attempts": 3, "mode": "standard"}
            )
            client = _CLIENTS[s] = boto3.session.Session().client(
                "s3",
                endpoint_url=s.endpoint,
                region_name=s.region,
                aws_access_key_id=s.access_key,
                aws_secret_access_key=s.secret_key,
                aws_session_token=s.session_token,
                config=cfg,
            )
    return client


def default_ttl() -> tuple[float, float]:
    """(ttl, renew) from ``CBP_LEASE_TTL`` / ``CBP_LEASE_RENEW``."""
    env = cbp_settings.current()
    ttl = env.lease_ttl
    renew = env.lease_renew or ttl / 3
    if not 0 < renew < ttl:
        raise RuntimeStateError(
            f"CBP_LEASE_RENEW ({renew}) must be positive and below CBP_LEASE_TTL ({ttl})", code="lease-config"
        )
    return ttl, renew


class S3Objects:
    """The few S3 operations a lease needs, through boto3 (which sends ``If-None-Match``)."""

    def __init__(self, location: str, store: ObjectStoreSettings | None = None) -> None:
        bucket_key = location.split("://", 1)[1].strip("/")
        self.bucket, _, self.prefix = bucket_key.partition("/")
        self._client: Any = None
        self._store = store  # the settings a task's plan carried (None: this process's)

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = _client(self._store)
        return self._client

    def key(self, rel: str) -> str:
        return f"{self.prefix}/{rel}" if self.prefix else rel

    def _failed(self, what: str, rel: str, e: Exception) -> RuntimeStateError:
        where = f"s3://{self.bucket}/{self.key(rel)}"
        return RuntimeStateError(
            f"cannot {what} {where}: {e}; is the bucket there, and are AWS_ENDPOINT_URL and the credentials right?",
            code="io",
            path=where,
        )

    def list(self, rel_dir: str) -> list[str]:
        """Names of the objects directly under ``rel_dir``."""
        prefix = self.key(rel_dir).rstrip("/") + "/"
        names: list[str] = []
        try:
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
                names += [
                    o["Key"][len(prefix) :] for o in page.get("Contents", []) if "/" not in o["Key"][len(prefix) :]
                ]
        except Exception as e:  # botocore's errors: unreachable endpoint, no bucket, bad credentials
            raise self._failed("list", rel_dir, e) from e
        return names

    def read(self, rel: str) -> bytes | None:
        try:
            data: bytes = self.client.get_object(Bucket=self.bucket, Key=self.key(rel))["Body"].read()
            return data
        except self.client.exceptions.NoSuchKey:
            return None
        except Exception as e:
            raise self._failed("read", rel, e) from e

    def exists(self, rel: str) -> bool:
        """Whether the object is there (one HEAD; pyarrow would also list, to look for a directory)."""
        from botocore.exceptions import ClientError

        try:
            self.client.head_object(Bucket=self.bucket, Key=self.key(rel))
            return True
        except ClientError as e:
            if e.response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 404:
                return False
            raise self._failed("look up", rel, e) from e
        except Exception as e:
            raise self._failed("look up", rel, e) from e

    def create(self, rel: str, data: bytes) -> bool:
        """Create the object if it does not exist; False if it does (or a concurrent create won)."""
        from botocore.exceptions import ClientError

        try:
            self.client.put_object(Bucket=self.bucket, Key=self.key(rel), Body=data, IfNoneMatch="*")
            return True
        except ClientError as e:
            status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if status in (409, 412) or e.response.get("Error", {}).get("Code") in (
                "PreconditionFailed",
                "ConditionalRequestConflict",
            ):
                return False
            raise self._failed("create", rel, e) from e
        except Exception as e:
            raise self._failed("create", rel, e) from e

    def delete(self, rel: str) -> None:
        try:
            self.client.delete_object(Bucket=self.bucket, Key=self.key(rel))
        except Exception as e:
            raise self._failed("delete", rel, e) from e


@dataclass(frozen=True)
class LeaseRecord:
    """One record of a lease: who holds it until when, or that it was released."""

    seq: int
    holder: str
    nonce: str
    expires: float
    released: bool
    info: dict[str, Any]

    def live(self, now: float | None = None) -> bool:
        return not self.released and self.expires > (time.time() if now is None else now)

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "seq": self.seq,
                "holder": self.holder,
                "nonce": self.nonce,
                "expires": self.expires,
                "released": self.released,
                "info": self.info,
            },
            sort_keys=True,
        ).encode()

    @classmethod
    def from_json(cls, data: bytes) -> LeaseRecord:
        d = json.loads(data)
        return cls(
            int(d["seq"]),
            str(d["holder"]),
            str(d["nonce"]),
            float(d["expires"]),
            bool(d["released"]),
            dict(d.get("info") or {}),
        )


class Lease:
    """A named lease of one home (see the module docstring); one holder at a time across hosts."""

    def __init__(
        self,
        store: S3Objects,
        name: str,
        info: dict[str, Any] | None = None,
        *,
        ttl: float | None = None,
        renew: float | None = None,
    ) -> None:
        dttl, drenew = default_ttl()
        self.store, self.dir = store, LAYOUT.lease_dir(name)
        self.name = name
        self.info = dict(info or {})
        self.ttl = float(ttl if ttl is not None else dttl)
        self.renew_every = float(renew if renew is not None else (self.ttl / 3 if ttl is not None else drenew))
        self.token = uuid.uuid4().hex
        self.seq = 0
        self.lost = False
        self.expires = 0.0  # when this holder's newest record expires (wall clock)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._io = threading.Lock()

    # ------------------------------------------------------------------ reading
    def _rel(self, seq: int) -> str:
        return f"{self.dir}/{seq:012d}.json"

    def _seqs(self) -> list[int]:
        return sorted(int(n[:-5]) for n in self.store.list(self.dir) if n.endswith(".json") and n[:-5].isdigit())

    def current(self) -> LeaseRecord | None:
        """The highest record (None if the lease was never taken)."""
        for _ in range(5):  # a record deleted by a prune between list and read: list again
            seqs = self._seqs()
            if not seqs:
                return None
            data = self.store.read(self._rel(seqs[-1]))
            if data is not None:
                try:
                    return LeaseRecord.from_json(data)
                except (ValueError, KeyError, TypeError) as e:
                    raise RuntimeStateError(
                        f"lease record {self._rel(seqs[-1])} is not a lease record: {e}", code="home-corrupt"
                    ) from e
        raise RuntimeStateError(f"the lease {self.dir} keeps changing under this reader", code="io")

    # ------------------------------------------------------------------ writing
    def _create(self, seq: int, released: bool = False) -> bool:
        rec = LeaseRecord(seq, self.token, uuid.uuid4().hex, time.time() + self.ttl, released, self.info)
        made = self.store.create(self._rel(seq), rec.to_json())
        if not made:
            data = self.store.read(self._rel(seq))  # a retried request whose first attempt did succeed?
            made = data is not None and LeaseRecord.from_json(data).nonce == rec.nonce
        if made:
            self.expires = rec.expires
        return made

    def try_acquire(self) -> tuple[bool, LeaseRecord | None]:
        """Take the lease if it is free or expired: (True, the expired record taken over, if any),
        or (False, the live holder's record)."""
        while True:
            top = self.current()
            if top is not None and top.live() and top.holder != self.token:
                return False, top
            seq = (top.seq if top is not None else 0) + 1
            with self._io:
                if self._create(seq):
                    self.seq, self.lost = seq, False
                    self._prune()
                    self._start_renewing()
                    return True, (top if top is not None and not top.released and top.holder != self.token else None)

    def acquire(
        self, waiting: Callable[[LeaseRecord], None] | None = None, poll: float | None = None
    ) -> LeaseRecord | None:
        """Take the lease, waiting while someone else holds it (``waiting`` is called once);
        return the expired record taken over, if any."""
        told = False
        while True:
            ok, rec = self.try_acquire()
            if ok:
                return rec
            if not told and waiting is not None and rec is not None:
                waiting(rec)
                told = True
            time.sleep(poll if poll is not None else min(1.0, self.renew_every))

    def renew(self) -> bool:
        """Extend the lease (the holder only); False (and :attr:`lost`) if someone took it over."""
        with self._io:
            if self.seq == 0 or self.lost:
                return False
            if self._create(self.seq + 1):
                self.seq += 1
                self._prune()
                return True
            self.lost = True
        print(
            f"cbp: lost the lease {self.name} of {self.store.bucket}/{self.store.prefix}: it expired before it was "
            "renewed (was this process stalled?) and another process took it over",
            file=sys.stderr,
            flush=True,
        )
        return False

    def remaining(self) -> float:
        """Seconds this holder's lease has left by its own records (0 when not held or lost): nobody
        else can take the lease before then, however its renewals fare."""
        if self.seq == 0 or self.lost:
            return 0.0
        return max(0.0, self.expires - time.time())

    def release(self) -> None:
        """Give the lease up (a released record), stop renewing."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        self._thread = None
        with self._io:
            if self.seq and not self.lost and self._create(self.seq + 1, released=True):
                self.seq += 1
                self._prune()
            self.seq = 0

    def _prune(self) -> None:
        if self.seq % PRUNE_EVERY:
            return
        try:
            for s in self._seqs():
                if s < self.seq - KEEP:
                    self.store.delete(self._rel(s))
        except Exception as e:  # old records are only clutter: never fail a lock over them
            print(f"cbp: could not prune old records of the lease {self.dir}: {e}", file=sys.stderr)

    def _start_renewing(self) -> None:
        self._stop.clear()
        if self._thread is not None and self._thread.is_alive():
            return
        self._thread = threading.Thread(target=self._renew_loop, name=f"cbp-lease-{self.name}", daemon=True)
        self._thread.start()

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.renew_every):
            try:
                if not self.renew():
                    return
            except Exception as e:  # the store is unreachable for now: try again, the lease may still be ours
                print(f"cbp: cannot renew the lease {self.dir}: {e}", file=sys.stderr, flush=True)
