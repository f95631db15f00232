"""One set of object-store settings for everything that touches a home on S3 (or an S3-compatible server).

The settings come from the environment variables a Spark or AWS user already sets:
``AWS_ENDPOINT_URL`` (e.g. ``http://127.0.0.1:9000`` for MinIO), ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_REGION`` (or ``AWS_DEFAULT_REGION``) and
``AWS_ALLOW_HTTP`` (inferred from an ``http://`` endpoint). From them come

- pyarrow's :class:`~pyarrow.fs.S3FileSystem` (:func:`filesystem`), used by :class:`~cbp.storage.Home`
  on the driver and, after unpickling, in Spark's Python workers: a pickled Home carries the
  driver's settings (:meth:`ObjectStoreSettings.for_home`), so a task's filesystem comes from its
  plan, not from the executor's environment (nor from ``SparkContext.environment``, which Spark
  Connect does not have);
- delta-rs ``storage_options`` (:func:`storage_options`) for every Delta table call, with
  ``conditional_put=etag``: commits are created with ``If-None-Match``, so concurrent writers
  never overwrite each other's commit (no unsafe rename, no DynamoDB);
- the Spark ``s3a`` settings (:func:`spark_s3a_conf`) for a SparkSession that reads the home's
  tables with Spark itself (delta-spark; it needs ``hadoop-aws`` on the classpath).

    >>> s = ObjectStoreSettings.from_env({"AWS_ENDPOINT_URL": "http://127.0.0.1:9000", "AWS_ACCESS_KEY_ID": "k",
    ...                                   "AWS_SECRET_ACCESS_KEY": "s", "AWS_REGION": "eu-west-1"})
    >>> s.allow_http, s.endpoint_host
    (True, '127.0.0.1:9000')
    >>> s.delta_options()["conditional_put"], s.delta_options()["AWS_ALLOW_HTTP"]
    ('etag', 'true')
    >>> s.spark_s3a_conf()["spark.hadoop.fs.s3a.connection.ssl.enabled"]
    'false'
    >>> is_object_store("s3://bucket/x"), is_object_store("/tmp/x"), is_object_store("file:///tmp/x")
    (True, False, False)
"""

from __future__ import annotations

import atexit
import gc
import os
import threading
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any
from urllib.parse import urlparse

import pyarrow.fs as pafs

__all__ = [
    "ObjectStoreSettings",
    "settings",
    "is_object_store",
    "is_s3",
    "filesystem",
    "storage_options",
    "spark_s3a_conf",
    "ENV_VARS",
    "unreachable",
]

S3_SCHEMES = ("s3", "s3a")
ENV_VARS = (
    "AWS_ENDPOINT_URL",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_ALLOW_HTTP",
)
"""The environment variables the settings are read from."""


def _truthy(value: str | None) -> bool | None:
    if value is None or value.strip() == "":
        return None
    return value.strip().lower() in ("1", "true", "yes", "on")


@dataclass(frozen=True)
class ObjectStoreSettings:
    """Endpoint, credentials and region of the S3 service a home lives on (all optional); frozen,
    so a task plan can carry them. The secret key and session token never show in its repr.

        >>> s = ObjectStoreSettings(endpoint="http://h:9000", access_key="k", secret_key="s3cret")
        >>> "s3cret" in repr(s), repr(s).split(", ")[1:3]
        (False, ["access_key='k'", 'secret_key=***'])
    """

    endpoint: str | None = None
    access_key: str | None = None
    secret_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    region: str | None = None
    allow_http: bool = False

    def __repr__(self) -> str:
        hidden = {"secret_key": self.secret_key, "session_token": self.session_token}
        shown = [f"{f.name}={'***' if hidden.get(f.name) else repr(getattr(self, f.name))}" for f in fields(self)]
        return f"ObjectStoreSettings({', '.join(shown)})"

    @classmethod
    def for_home(cls, location: str) -> ObjectStoreSettings | None:
        """What a pickled Home on ``location`` carries to the tasks: this process's settings for an
        ``s3://`` home, None for any other (nothing to carry, no secret in a local home's plan).

            >>> ObjectStoreSettings.for_home("/tmp/h") is None
            True
        """
        return settings() if is_s3(location) else None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ObjectStoreSettings:
        """The settings from ``env`` (default: the process environment)."""
        env = os.environ if env is None else env
        endpoint = (env.get("AWS_ENDPOINT_URL") or "").strip().rstrip("/") or None
        http = _truthy(env.get("AWS_ALLOW_HTTP"))
        if http is None:
            http = bool(endpoint and endpoint.lower().startswith("http://"))
        return cls(
            endpoint=endpoint,
            access_key=env.get("AWS_ACCESS_KEY_ID") or None,
            secret_key=env.get("AWS_SECRET_ACCESS_KEY") or None,
            session_token=env.get("AWS_SESSION_TOKEN") or None,
            region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or None,
            allow_http=http,
        )

    @property
    def endpoint_host(self) -> str | None:
        """``host:port`` of the endpoint (what pyarrow's ``endpoint_override`` wants)."""
        if not self.endpoint:
            return None
        u = urlparse(self.endpoint if "://" in self.endpoint else f"https://{self.endpoint}")
        return u.netloc + u.path.rstrip("/")

    @property
    def scheme(self) -> str:
        if self.endpoint and self.endpoint.lower().startswith("http://"):
            return "http"
        return "https"

    def pyarrow_fs(self) -> pafs.S3FileSystem:
        """pyarrow's S3 filesystem with these settings (path-style when an endpoint is given)."""
        kw: dict[str, object] = {}
        if self.access_key and self.secret_key:
            kw.update(access_key=self.access_key, secret_key=self.secret_key)
            if self.session_token:
                kw["session_token"] = self.session_token
        if self.region:
            kw["region"] = self.region
        if self.endpoint_host:
            kw.update(endpoint_override=self.endpoint_host, scheme=self.scheme, force_virtual_addressing=False)
        # A delayed open lets a small file be one PUT instead of a multipart upload's three requests.
        return pafs.S3FileSystem(allow_delayed_open=True, **kw)

    def delta_options(self) -> dict[str, str]:
        """delta-rs ``storage_options``: credentials, endpoint and safe concurrent commits (conditional put)."""
        opts = {"conditional_put": "etag"}
        for key, value in (
            ("AWS_ENDPOINT_URL", self.endpoint),
            ("AWS_ACCESS_KEY_ID", self.access_key),
            ("AWS_SECRET_ACCESS_KEY", self.secret_key),
            ("AWS_SESSION_TOKEN", self.session_token),
            ("AWS_REGION", self.region),
        ):
            if value:
                opts[key] = value
        if self.allow_http:
            opts["AWS_ALLOW_HTTP"] = "true"
        if self.endpoint:
            opts["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] = "false"
        return opts

    def spark_s3a_conf(self) -> dict[str, str]:
        """Spark settings for reading and writing ``s3://`` and ``s3a://`` paths through Hadoop's S3A."""
        p = "spark.hadoop.fs.s3a."
        conf = {
            "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
            "spark.hadoop.fs.s3a.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        }
        if self.endpoint:
            conf[p + "endpoint"] = self.endpoint
            conf[p + "path.style.access"] = "true"
            conf[p + "connection.ssl.enabled"] = "false" if self.allow_http else "true"
        if self.region:
            conf[p + "endpoint.region"] = self.region
        if self.access_key and self.secret_key:
            conf[p + "access.key"] = self.access_key
            conf[p + "secret.key"] = self.secret_key
            if self.session_token:
                conf[p + "session.token"] = self.session_token
                conf[p + "aws.credentials.provider"] = "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
            else:
                conf[p + "aws.credentials.provider"] = "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
        return conf


def settings() -> ObjectStoreSettings:
    """The settings of this process's environment."""
    return ObjectStoreSettings.from_env()


def is_object_store(location: str) -> bool:
    """Whether a home location is a URI of a remote store (not a path, not ``file://``)."""
    return "://" in location and not location.lower().startswith("file://")


def is_s3(location: str) -> bool:
    """Whether a location is an ``s3://`` or ``s3a://`` URI."""
    return location.split("://", 1)[0].lower() in S3_SCHEMES if "://" in location else False


_FS_CACHE: dict[ObjectStoreSettings, pafs.FileSystem] = {}
_FS_GUARD = threading.Lock()
_USERS: weakref.WeakSet[Any] = weakref.WeakSet()


def filesystem(
    location: str, user: Any = None, store: ObjectStoreSettings | None = None
) -> tuple[pafs.FileSystem, str]:
    """The pyarrow filesystem of a location and the path inside it (S3 from ``store``, the settings a
    task's plan carries, else from :func:`settings`).

    ``user`` (an object with an ``_fs`` attribute, e.g. a Home) lets go of the filesystem when the
    process exits, before pyarrow shuts its S3 client down: an S3 filesystem destroyed after that
    aborts the interpreter ("terminate called without an active exception").
    """
    if not is_s3(location):
        local: tuple[pafs.FileSystem, str] = pafs.FileSystem.from_uri(location)
        return local
    s = store if store is not None else settings()
    with _FS_GUARD:
        fs = _FS_CACHE.get(s)
        if fs is None:
            if not _FS_CACHE:
                atexit.register(_release)  # registered after pyarrow's own finaliser, so it runs first
            fs = _FS_CACHE[s] = s.pyarrow_fs()
        if user is not None:
            _USERS.add(user)
    return fs, location.split("://", 1)[1].rstrip("/")


def _release() -> None:
    """Drop every S3 filesystem this process made, at exit, before pyarrow finalizes S3."""
    with _FS_GUARD:
        _FS_CACHE.clear()
        for user in list(_USERS):
            user._fs = None
    gc.collect()


def storage_options(location: str, store: ObjectStoreSettings | None = None) -> dict[str, str] | None:
    """delta-rs ``storage_options`` for a table URI (None for local tables and non-S3 stores);
    S3 settings from ``store``, else from :func:`settings`."""
    if not is_s3(location):
        return None
    return (store if store is not None else settings()).delta_options()


def spark_s3a_conf() -> dict[str, str]:
    """Spark ``s3a`` settings from the environment, for whoever builds the SparkSession."""
    return settings().spark_s3a_conf()


#: How pyarrow's S3 client (curl) and botocore say that no connection could be made.
_NO_CONNECTION = (
    "NETWORK_CONNECTION",
    "Could not connect",
    "Connection refused",
    "Failed to connect",
    "Could not resolve host",
    "Connect timeout",
    "Could not connect to the endpoint URL",
)


def unreachable(location: str, exc: BaseException) -> Exception | None:
    """``home-unreachable`` (a :class:`~cbp.errors.RuntimeStateError` naming the endpoint) when
    ``exc`` says the object store of an ``s3://`` home could not be connected to; else None."""
    from ..errors import RuntimeStateError

    text = str(exc)
    if not is_s3(location) or not any(m in text for m in _NO_CONNECTION):
        return None
    s = settings()
    endpoint = (
        f"the endpoint {s.endpoint} (AWS_ENDPOINT_URL)"
        if s.endpoint
        else "AWS's S3 endpoint (no AWS_ENDPOINT_URL is set)"
    )
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), type(exc).__name__)
    return RuntimeStateError(
        f"the home {location} cannot be reached: {endpoint} takes no connection ({first}); "
        "is the object store running, and AWS_ENDPOINT_URL right?",
        code="home-unreachable",
        path=location,
    )
