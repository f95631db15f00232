"""A Delta source on S3 (the moto server of tests/moto_s3.py): the same as a local one."""

from __future__ import annotations

from moto_s3 import BUCKET, s3_server  # noqa: F401  (the module's S3 server fixture, named s3)
from test_sources import _follow


def test_s3_source_follows_its_versions(s3, spark, make_pipeline, tmp_path):  # noqa: F811
    _follow(make_pipeline, tmp_path, f"s3://{BUCKET}/sources/orders", versions=4)
