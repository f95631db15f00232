"""A follower and a Delta source (``source: {delta: URI}``, ``Pipeline.sync()`` of the ``sources``
work): a new version of the source table is synced and run while the follower waits. Skipped
where the pipeline has no ``sync()`` yet. The follower thread is stopped by a fixture."""

from __future__ import annotations

import threading
import time

import pyarrow as pa
import pytest

import cbp

if not hasattr(cbp.Pipeline, "sync"):
    pytest.skip("needs Delta sources (Pipeline.sync), not in this tree", allow_module_level=True)

YAML = """
pipeline: follow_orders
flows:
  orders:
    external: true
    source: {delta: "SRC"}
    schema: {order_id: int, customer: string, amount: int}
stages:
  totals:
    translator: MOD:totals
    signed: true
    partitions: 2
    inputs: [{flow: orders, route_by: customer}]
    state: {schema: {customer: string, total: int}, grouping: inner}
"""
MOD = """
def totals(customer, state, orders, out):
    prev = next(state, None)
    t = prev["total"] if prev else 0
    for o in orders:
        t += o.get("_diff", 1) * o["amount"]  # signed records where the engine passes them on
    out.state.write({"customer": customer, "total": t})
"""


def _orders(rows):
    return pa.table(
        {
            "order_id": pa.array([r[0] for r in rows], pa.int64()),
            "customer": [r[1] for r in rows],
            "amount": pa.array([r[2] for r in rows], pa.int64()),
        }
    )


@pytest.fixture
def follower_thread():
    started = []

    def start(pipe, **options):
        stop, box = threading.Event(), {}

        def target():
            try:
                box["summary"] = pipe.follow(stop=stop, **options)
            except BaseException as e:  # noqa: BLE001
                box["error"] = e

        t = threading.Thread(target=target, daemon=True)
        started.append((t, stop))
        t.start()
        return box

    yield start
    for _t, stop in started:
        stop.set()
    for t, _ in started:
        t.join(300)
    assert not any(t.is_alive() for t, _ in started)


def test_a_new_version_of_a_delta_source_is_synced_and_run(spark, make_pipeline, tmp_path, follower_thread):
    from deltalake import write_deltalake

    uri = str(tmp_path / "orders")
    write_deltalake(uri, _orders([(1, "a", 5), (2, "b", 7)]), configuration={"delta.enableChangeDataFeed": "true"})
    yaml = make_pipeline(YAML.replace("SRC", uri), MOD)
    home = str(tmp_path / "home")
    first = threading.Event()
    box = follower_thread(cbp.load(yaml, home=home), on_round=lambda reports: first.set())
    deadline = time.monotonic() + 300
    while not first.is_set() and "error" not in box and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "error" not in box, repr(box.get("error"))
    assert first.is_set()

    def totals():
        return {r["customer"]: r["total"] for r in cbp.load(yaml, home=home).state("totals")}

    deadline = time.monotonic() + 120
    while totals() != {"a": 5, "b": 7} and time.monotonic() < deadline:
        time.sleep(0.2)
    assert totals() == {"a": 5, "b": 7}
    write_deltalake(uri, _orders([(3, "a", 10)]), mode="append")  # a new version: the follower's sync lands it
    deadline = time.monotonic() + 120
    while totals() != {"a": 15, "b": 7} and time.monotonic() < deadline:
        time.sleep(0.2)
    assert totals() == {"a": 15, "b": 7} and "error" not in box
