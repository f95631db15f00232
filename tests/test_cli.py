"""The CLI contract: validate, feed, run (one line per stage epoch), state, output, status."""

from __future__ import annotations

import json
import logging
import re
import shutil

from conftest import FLOWS

from cbp.cli import main

URLS = str(FLOWS / "url_count.yaml")
SETDIFF = str(FLOWS / "set_diff.yaml")


def _project(tmp_path):
    """A project of its own: tmp_path/proj/flows/url_count.{yaml,py}; returns the YAML's path."""
    flows = tmp_path / "proj" / "flows"
    flows.mkdir(parents=True)
    for f in ("url_count.yaml", "url_count.py"):
        shutil.copy(FLOWS / f, flows / f)
    return str(flows / "url_count.yaml")


def test_cli_end_to_end(spark, tmp_path, capsys, monkeypatch):
    URLS = _project(tmp_path)
    monkeypatch.chdir(tmp_path)  # default home: state/<pipeline> in the project, not in the working directory
    (tmp_path / "d1.jsonl").write_text('{"url": "a"}\n{"url": "b"}\n\n{"url": "a"}\n')
    (tmp_path / "d2.jsonl").write_text('{"url": "b"}\n')
    assert main(["validate", URLS]) == 0
    assert "pipeline 'url_count' is valid" in capsys.readouterr().out
    assert main(["feed", URLS, "urls", "d1.jsonl"]) == 0
    capsys.readouterr()
    assert main(["status", URLS]) == 0
    out = capsys.readouterr().out
    assert "stage url_count" in out and "pending increments    1" in out
    assert main(["run", URLS, "--max-epochs", "1"]) == 0
    cap = capsys.readouterr()
    assert re.search(
        r"url_count\s+epoch\s+1\s+in\s+3\s+out\s+2 \(counts=2\)\s+state read\s+0\s+written\s+2\s+[\d.]+s", cap.out
    ), cap.out
    assert "stopped at --max-epochs 1" in cap.out and "running url_count epoch 1" in cap.err
    assert main(["feed", URLS, "urls", "d2.jsonl"]) == 0
    assert main(["run", URLS]) == 0
    assert "epoch    2" in capsys.readouterr().out
    assert (tmp_path / "proj" / "state" / "url_count" / "flows" / "counts" / "_delta_log").is_dir()
    assert not (tmp_path / "state").exists()
    assert main(["output", URLS, "counts", "--epoch", "2"]) == 0
    assert [json.loads(x) for x in capsys.readouterr().out.splitlines()] == [{"url": "b", "count": 2}]
    assert main(["output", URLS, "counts"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3
    assert main(["state", URLS, "url_count", "--epoch", "1"]) == 0
    assert [json.loads(x) for x in capsys.readouterr().out.splitlines()] == [
        {"url": "a", "count": 2},
        {"url": "b", "count": 1},
    ]
    assert main(["status", URLS, "--json"]) == 0
    st = json.loads(capsys.readouterr().out)
    assert st["stages"]["url_count"]["epochs"] == 2 and st["stages"]["url_count"]["runnable"] is False


def test_cli_feed_close(spark, tmp_path, capsys):
    home = str(tmp_path / "h")
    (tmp_path / "a.jsonl").write_text('{"url": "u", "hour": 1}\n')
    assert main(["feed", SETDIFF, "crawl_a", str(tmp_path / "a.jsonl"), "--home", home]) == 0
    assert main(["feed", SETDIFF, "crawl_a", "--close", "--home", home]) == 0
    assert "(closed)" in capsys.readouterr().out
    assert main(["feed", SETDIFF, "crawl_a", "--home", home]) == 2  # neither a file nor --close: a usage error
    assert main(["status", SETDIFF, "--home", home, "--json"]) == 0
    st = json.loads(capsys.readouterr().out)
    assert st["stages"]["set_diff"]["connectors"]["crawl_a"] == {"pending": 1, "complete": 1, "records": 1}


import pytest  # noqa: E402

import cbp  # noqa: E402
from cbp.errors import UsageError  # noqa: E402


@pytest.mark.parametrize(
    "home",
    [
        "http://127.0.0.1:1/x",
        "memory://x",
        "gs://bucket/x",
        "s3://",
        "s3:///x",
        "{tmp}/h_pct%41",
        "{tmp}/back\\slash",
        "{tmp}/new\nline",
        "{tmp}/d.jsonl",
        "{tmp}/d.jsonl/sub",
        "file://otherhost{tmp}/h",
        "file:relative/h",
        "/",
        "file:///",
        "file://localhost",
        "//",
        "/{tmp}/h",
        "{tmp}/to-root",
    ],
)
def test_a_home_cbp_cannot_keep_is_refused_before_anything_is_written(tmp_path, capsys, home):
    """Unknown schemes ended in tracebacks or retried for minutes (gs://); '%' in a local path was
    percent-decoded by delta-rs, which then opened another directory's tables."""
    home = home.format(tmp=tmp_path)
    (tmp_path / "to-root").symlink_to("/")  # a link to the root is the root
    (tmp_path / "h_pctA").mkdir()  # the directory delta-rs would have read for h_pct%41
    day = tmp_path / "d.jsonl"
    day.write_text('{"url": "http://a/"}\n')
    for argv in (["status", URLS], ["feed", URLS, "urls", str(day)], ["run", URLS]):
        assert main([*argv, "--home", home]) == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err and err.count("\n") == 1 and "error [bad-home]: " in err, err
    with pytest.raises(UsageError) as e:
        cbp.load(URLS, home=home)
    assert e.value.code == "bad-home"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.jsonl", "h_pctA", "to-root"] and not any(
        (tmp_path / "h_pctA").iterdir()
    )


@pytest.mark.parametrize("home", ["s3:/bucket/x", "s3:bucket", "s3//bucket/x", "S3A:/bucket", "gs:/bucket", "http:/x"])
def test_a_mistyped_url_is_a_bad_home_not_a_local_directory(tmp_path, capsys, monkeypatch, home):
    """``s3:/x`` (for ``s3://x``) made a local home ``./s3:/x`` and ``cbp run`` exited 0."""
    monkeypatch.chdir(tmp_path)
    day = tmp_path / "d.jsonl"
    day.write_text('{"url": "http://a/"}\n')
    for argv in (["status", URLS], ["feed", URLS, "urls", str(day)], ["run", URLS]):
        assert main([*argv, "--home", home]) == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err and "error [bad-home]: " in err and "mistyped URL" in err, err
    with pytest.raises(UsageError) as e:
        cbp.load(URLS, home=home)
    assert e.value.code == "bad-home"
    assert [p.name for p in tmp_path.iterdir()] == ["d.jsonl"]


def test_an_unreachable_s3_home_is_home_unreachable_naming_the_endpoint(tmp_path, capsys, monkeypatch):
    import socket

    from cbp.errors import RuntimeStateError

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    endpoint = f"http://127.0.0.1:{port}"
    env = {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "k",
        "AWS_SECRET_ACCESS_KEY": "s",
        "AWS_REGION": "us-east-1",
    }
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    day = tmp_path / "d.jsonl"
    day.write_text('{"url": "http://a/"}\n')
    for argv in (["status", URLS], ["feed", URLS, "urls", str(day)], ["run", URLS]):
        assert main([*argv, "--home", "s3://bucket/h"]) == 5
        err = capsys.readouterr().err
        assert "Traceback" not in err and "error [home-unreachable]: " in err and endpoint in err, err
    with pytest.raises(RuntimeStateError) as e:
        cbp.load(URLS, home="s3://bucket/h")
    assert e.value.code == "home-unreachable" and endpoint in str(e.value)


@pytest.mark.parametrize("uri", ["file://{tmp}/h", "file://localhost{tmp}/h", "file:{tmp}/h", "FILE://{tmp}/h"])
def test_a_file_uri_home_is_the_local_directory_it_names(tmp_path, capsys, monkeypatch, uri):
    monkeypatch.chdir(tmp_path)
    day = tmp_path / "d.jsonl"
    day.write_text('{"url": "http://a/"}\n')
    assert main(["feed", URLS, "urls", str(day), "--home", uri.format(tmp=tmp_path)]) == 0
    assert (tmp_path / "h" / "flows" / "urls").is_dir() and sorted(p.name for p in tmp_path.iterdir()) == [
        "d.jsonl",
        "h",
    ]


@pytest.mark.parametrize("value", ["1e300", "604801"])
def test_epoch_timeout_is_at_most_a_week(tmp_path, capsys, value):
    with pytest.raises(SystemExit) as ex:  # argparse's usage error
        main(["run", URLS, "--home", str(tmp_path / "h"), "--epoch-timeout", value])
    assert ex.value.code == 2 and "at most 604800" in capsys.readouterr().err
    with pytest.raises(UsageError) as e:
        cbp.load(URLS, home=str(tmp_path / "h")).run(epoch_timeout=float(value))
    assert e.value.code == "bad-option"


def test_json_lines_stay_one_line_per_record_whatever_the_text(spark, tmp_path, capsys):
    """U+2028 and U+2029 are line breaks to Python's ``splitlines`` and to JavaScript: escaped."""
    home = str(tmp_path / "home")
    urls = ["a\u2028b", "c\u2029d", 'é\n"x"', "plain"]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps({"url": u}) + "\n" for u in urls), encoding="utf-8")
    assert main(["feed", URLS, "urls", str(tmp_path / "d.jsonl"), "--home", home]) == 0
    assert main(["run", URLS, "--home", home]) == 0
    capsys.readouterr()
    for args in (["output", URLS, "counts"], ["state", URLS, "url_count"]):
        assert main([*args, "--home", home]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert sorted(json.loads(x)["url"] for x in lines) == sorted(urls), lines


@pytest.mark.parametrize(
    "doc",
    [
        "[]",
        '{"flows": 5, "stages": {}}',
        '{"seq": 3, "flows": {}, "stages": {"url_count": []}}',
        '{"flows": {}, "stages": {}}',
    ],
)
def test_a_controller_snapshot_of_another_shape_is_a_damaged_home_not_a_traceback(tmp_path, capsys, doc):
    home = tmp_path / "h"
    day = tmp_path / "d.jsonl"
    day.write_text('{"url": "http://a/"}\n')
    assert main(["feed", URLS, "urls", str(day), "--home", str(home)]) == 0
    newest = sorted((home / "_cbp" / "controller").glob("*.json"))[-1]
    newest.write_text(doc)
    capsys.readouterr()
    for argv in (["status", URLS], ["feed", URLS, "urls", str(day)]):
        assert main([*argv, "--home", str(home)]) == 5
        err = capsys.readouterr().err
        assert "error [damaged-home]" in err and "Traceback" not in err, err


def test_the_home_of_another_pipeline_is_a_bad_home(tmp_path, capsys):
    home = str(tmp_path / "h")
    day = tmp_path / "d.jsonl"
    day.write_text('{"url": "http://a/"}\n')
    assert main(["feed", URLS, "urls", str(day), "--home", home]) == 0
    other = str(FLOWS / "set_diff.yaml")
    assert main(["status", other, "--home", home]) == 2
    assert "error [bad-home]" in capsys.readouterr().err


def test_the_default_home_is_the_projects_whatever_the_working_directory(tmp_path, monkeypatch, caplog):
    """``proj/flows/x.yaml`` keeps its state in ``proj/state/<pipeline>`` from any directory; a YAML
    outside a flows/ directory beside itself; an old home under the working directory is named in a warning."""
    from cbp.pipeline import default_home, project_dir

    yaml = _project(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert project_dir(yaml) == str(tmp_path / "proj")
    assert cbp.load(yaml).home.location.rstrip("/") == str(tmp_path / "proj" / "state" / "url_count")
    loose = tmp_path / "loose" / "p.yaml"
    loose.parent.mkdir()
    shutil.copy(yaml, loose)
    assert project_dir(loose) == str(loose.parent)
    assert default_home(cbp.load(loose, home=str(tmp_path / "unused")).spec) == str(
        loose.parent / "state" / "url_count"
    )
    assert not caplog.records
    (elsewhere / "state" / "url_count" / "_cbp").mkdir(parents=True)  # a home made under the old default
    with caplog.at_level(logging.WARNING, logger="cbp"):
        cbp.load(yaml)
    [warned] = [r.getMessage() for r in caplog.records if r.name == "cbp"]
    assert str(elsewhere / "state" / "url_count") in warned and str(tmp_path / "proj" / "state" / "url_count") in warned
