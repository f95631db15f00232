"""The inbox of the Airflow DAGs takes complete files only, and keeps every landed file.

A file still being written (``cp``, ``scp``, ``curl -o``) is neither announced by the watcher nor
landed until it was unchanged for ``inbox_settle_seconds``; hidden and temporary names are never
taken (write under one, then rename: atomic). A file landed under the name of an earlier one is
kept beside it in ``landed/``.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from conftest import FLOWS, WORD_COUNT

pytest.importorskip("airflow", reason="needs apache-airflow (pip install -e '.[airflow]')")

TRIVIAL = "def count(key, state, words, out):\n    pass\n"


def _age(f: Path, seconds: float) -> None:
    """Make ``f`` look last written ``seconds`` ago."""
    t = time.time() - seconds
    os.utime(f, (t, t))


def _setup(tmp_path: Path, make_pipeline) -> tuple[str, str, Path, Path]:
    yaml = str(make_pipeline(WORD_COUNT, TRIVIAL))
    home, inbox = str(tmp_path / "home"), tmp_path / "inbox"
    d = inbox / "words"
    d.mkdir(parents=True)
    return yaml, home, inbox, d


def test_a_file_being_written_is_not_landed_until_it_settles(tmp_path, make_pipeline):
    import cbp
    from cbp.airflow.dagfactory import land_inbox
    from cbp.airflow.triggers import IncrementLanded

    yaml, home, inbox, d = _setup(tmp_path, make_pipeline)
    watcher = IncrementLanded(home, "words", inbox=str(d), settle=30)
    f = d / "day1.jsonl"
    with open(f, "w") as fh:  # a producer copying 1000 records, half way through
        for i in range(500):
            fh.write(json.dumps({"w": f"w{i}"}) + "\n")
        fh.flush()
        assert watcher.check() is None
        assert land_inbox(yaml, home, str(inbox), ["words"], settle=30) == {"landed": {}, "rejected": {}}
        _age(f, 60)  # even a pause of the writer longer than the settle time ...
        for i in range(500, 1000):
            fh.write(json.dumps({"w": f"w{i}"}) + "\n")
        fh.flush()
    assert watcher.check() is None  # ... is followed by writes that make the file new again
    assert land_inbox(yaml, home, str(inbox), ["words"], settle=30) == {"landed": {}, "rejected": {}}
    assert os.listdir(d) == ["day1.jsonl"]
    _age(f, 31)  # unchanged for the settle time: complete
    assert watcher.check()["inbox_files"] == ["day1.jsonl"]
    assert land_inbox(yaml, home, str(inbox), ["words"], settle=30)["landed"] == {"words": ["day1.jsonl"]}
    assert len(cbp.load(yaml, home=home).output("words")) == 1000
    assert watcher.check() is None


def test_hidden_and_temporary_names_are_never_taken_and_a_rename_lands_at_once(tmp_path, make_pipeline):
    import cbp
    from cbp.airflow.dagfactory import land_inbox
    from cbp.airflow.triggers import IncrementLanded, inbox_files

    yaml, home, inbox, d = _setup(tmp_path, make_pipeline)
    names = [
        ".day.jsonl",
        "_day.jsonl",
        "day.jsonl.tmp",
        "day.jsonl.part",
        "day.jsonl.crdownload",
        "day.jsonl._COPYING_",
        "day.jsonl.filepart",
        "_temporary.parquet",
        ".day.parquet",
    ]
    for n in names:
        (d / n).write_text('{"w": "x"}\n')
        _age(d / n, 3600)
    assert inbox_files(str(d), settle=0) == []
    watcher = IncrementLanded(home, "words", inbox=str(d), settle=30)
    assert watcher.check() is None
    assert land_inbox(yaml, home, str(inbox), ["words"], settle=30) == {"landed": {}, "rejected": {}}
    (d / ".day.jsonl").rename(d / "day.jsonl")  # written under a dot name, then renamed in: complete, however recent
    assert watcher.check()["inbox_files"] == ["day.jsonl"]
    assert land_inbox(yaml, home, str(inbox), ["words"], settle=30)["landed"] == {"words": ["day.jsonl"]}
    assert cbp.load(yaml, home=home).output("words") == [{"w": "x"}]
    assert sorted(os.listdir(d)) == sorted(["landed", *names[1:]])


def test_a_file_landed_under_an_earlier_name_is_kept_beside_it(tmp_path, make_pipeline):
    import cbp
    from cbp.airflow.dagfactory import land_inbox

    yaml, home, inbox, d = _setup(tmp_path, make_pipeline)
    for day in ("x", "y", "z"):
        (d / "daily.jsonl").write_text(json.dumps({"w": day}) + "\n")
        assert land_inbox(yaml, home, str(inbox), ["words"], settle=0)["landed"] == {"words": ["daily.jsonl"]}
    landed = d / "landed"
    assert sorted(os.listdir(landed)) == ["daily.1.jsonl", "daily.2.jsonl", "daily.jsonl"]
    assert [json.loads((landed / n).read_text())["w"] for n in ("daily.jsonl", "daily.1.jsonl", "daily.2.jsonl")] == [
        "x",
        "y",
        "z",
    ]
    assert sorted(r["w"] for r in cbp.load(yaml, home=home).output("words")) == ["x", "y", "z"]
    # the same file again (a retried task that died before moving it): landed once, kept once
    (d / "daily.jsonl").write_text((landed / "daily.jsonl").read_text())
    assert land_inbox(yaml, home, str(inbox), ["words"], settle=0)["landed"] == {"words": ["daily.jsonl"]}
    assert sorted(os.listdir(landed)) == ["daily.1.jsonl", "daily.2.jsonl", "daily.jsonl"]
    assert len(cbp.load(yaml, home=home).output("words")) == 3


def test_the_configured_settle_time_reaches_the_watcher_and_the_land_task(tmp_path, monkeypatch):
    import cbp.airflow.dagfactory as factory

    cfg = tmp_path / "cbp.yaml"
    cfg.write_text(f"flows: {FLOWS}\nhomes: {tmp_path}/state\ninbox: {tmp_path}/inbox\ninbox_settle_seconds: 12.5\n")
    dag = factory.make_dags(str(cfg))["cbp_url_count"]
    trigger = next(iter(dag.timetable.asset_condition.objects)).watchers[0].trigger
    assert trigger.settle == 12.5 and trigger.serialize()[1]["settle"] == 12.5
    seen = {}
    monkeypatch.setattr(factory, "land_inbox", lambda *a, **k: seen.update(k) or {})
    dag.task_dict["land_inbox"].python_callable()
    assert seen["settle"] == 12.5
