"""A moto S3 server on loopback for tests of homes on S3 (shared by tests/test_s3_home.py and others).

``from moto_s3 import BUCKET, s3_server`` gives a test module the fixture ``s3``: one server per module
on 127.0.0.1 and a free port, the bucket ``cbp-test``, and the AWS_* variables of this process
(and so of its ``cbp`` subprocesses; Spark's Python workers get the settings in their task
plans) pointing at it while the module's tests run.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import free_port

boto3 = pytest.importorskip("boto3", reason="needs boto3 (pip install -e '.[dev]')")
pytest.importorskip("moto.server", reason="needs moto's S3 server (pip install 'moto[server]')")
MOTO = [sys.executable, "-m", "moto.server"]  # this interpreter's moto, not another one on PATH

BUCKET = "cbp-test"
ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1"}

__all__ = ["BUCKET", "ENV", "s3_server"]


@pytest.fixture(scope="module", name="s3")
def s3_server() -> Iterator[Any]:
    """A moto S3 server with the bucket ``cbp-test``; the process environment points at it."""
    port = free_port()
    proc = subprocess.Popen(
        [*MOTO, "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    endpoint = f"http://127.0.0.1:{port}"
    saved = {k: os.environ.get(k) for k in [*ENV, "AWS_ENDPOINT_URL"]}
    os.environ.update(ENV, AWS_ENDPOINT_URL=endpoint)
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    deadline = time.time() + 30
    while True:
        try:
            client.create_bucket(Bucket=BUCKET)
            break
        except Exception:
            if time.time() > deadline or proc.poll() is not None:
                proc.kill()
                raise
            time.sleep(0.2)
    yield client
    proc.terminate()
    proc.wait(10)
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
