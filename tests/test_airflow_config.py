"""dags/cbp.yaml (cbp.airflow.config) and the DAG factory's handling of what cannot be built.

Every bad setting is refused when the file is loaded, with a typed error naming the file and the
key (code ``bad-config``; YAML the bounded reader refuses keeps its own code). A pipeline YAML that
cannot be built does not take the other DAGs with it: it becomes a DAG whose one task fails with
the error.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FLOWS, ROOT

from cbp.errors import CbpError

pytest.importorskip("airflow", reason="needs apache-airflow (pip install -e '.[airflow]')")

CRAWLER = "crawlers:\n  crawl_queue:\n    corpus: {corpus}\n    seed: http://h/\n"


def _write(tmp_path: Path, text: str, flows: Path = FLOWS) -> str:
    (tmp_path / "corpus").mkdir(exist_ok=True)
    head = f"flows: {flows}\nhomes: {tmp_path / 'state'}\ninbox: {tmp_path / 'inbox'}\n"
    cfg = tmp_path / "cbp.yaml"
    cfg.write_text(text.replace("HEAD\n", head).replace("{corpus}", str(tmp_path / "corpus")))
    return str(cfg)


def _code(path: str) -> str:
    from cbp.airflow.config import load_config

    with pytest.raises(CbpError) as e:
        load_config(path)
    assert path in str(e.value), str(e.value)  # the error names the file
    return e.value.code


BAD = {  # the config file -> (code, a word of the message: the key)
    "a list": ("- a\n- b\n", "bad-config", "mapping"),
    "a string": ("hello\n", "bad-config", "mapping"),
    "an int": ("5\n", "bad-config", "mapping"),
    "crawlers a list": ("HEAD\ncrawlers: [a]\n", "bad-config", "crawlers"),
    "crawler a string": ("HEAD\ncrawlers:\n  crawl_queue: x\n", "bad-config", "crawl_queue"),
    "poke 0": ("HEAD\npoke_interval: 0\n", "bad-config", "poke_interval"),
    "poke negative": ("HEAD\npoke_interval: -5\n", "bad-config", "poke_interval"),
    "poke nan": ("HEAD\npoke_interval: .nan\n", "bad-config", "poke_interval"),
    "poke inf": ("HEAD\npoke_interval: .inf\n", "bad-config", "poke_interval"),
    "poke text": ("HEAD\npoke_interval: abc\n", "bad-config", "poke_interval"),
    "poke true": ("HEAD\npoke_interval: true\n", "bad-config", "poke_interval"),
    "run timeout 1e300": ("HEAD\nrun_timeout_minutes: 1e300\n", "bad-config", "run_timeout_minutes"),
    "run timeout over a week": ("HEAD\nrun_timeout_minutes: 10081\n", "bad-config", "run_timeout_minutes"),
    "crawl timeout huge": ("HEAD\ncrawl_timeout_minutes: 1.0e300\n", "bad-config", "crawl_timeout_minutes"),
    "epoch timeout 1e9": ("HEAD\nepoch_timeout_seconds: 1e9\n", "bad-config", "epoch_timeout_seconds"),
    "epoch timeout 0": ("HEAD\nepoch_timeout_seconds: 0\n", "bad-config", "epoch_timeout_seconds"),
    "settle negative": ("HEAD\ninbox_settle_seconds: -1\n", "bad-config", "inbox_settle_seconds"),
    "settle nan": ("HEAD\ninbox_settle_seconds: .nan\n", "bad-config", "inbox_settle_seconds"),
    "max_pages 0": ("HEAD\n" + CRAWLER + "    max_pages: 0\n", "bad-config", "max_pages"),
    "max_pages true": ("HEAD\n" + CRAWLER + "    max_pages: true\n", "bad-config", "max_pages"),
    "max_pages 2.9": ("HEAD\n" + CRAWLER + "    max_pages: 2.9\n", "bad-config", "max_pages"),
    "max_pages text": ("HEAD\n" + CRAWLER + "    max_pages: abc\n", "bad-config", "max_pages"),
    "revisit_min 0": ("HEAD\n" + CRAWLER + "    revisit_min: 0\n", "bad-config", "revisit_min"),
    "revisit_max inf": ("HEAD\n" + CRAWLER + "    revisit_max: .inf\n", "bad-config", "revisit_max"),
    "revisit_min over max": (
        "HEAD\n" + CRAWLER + "    revisit_min: 100\n    revisit_max: 10\n",
        "bad-config",
        "revisit_min",
    ),
    "gone_after 0": ("HEAD\n" + CRAWLER + "    gone_after: 0\n", "bad-config", "gone_after"),
    "max_per_host text": ("HEAD\n" + CRAWLER + "    max_per_host: many\n", "bad-config", "max_per_host"),
    "crawler key typo": ("HEAD\n" + CRAWLER + "    max_page: 5\n", "bad-config", "max_page"),
    "crawler without seed": ("HEAD\ncrawlers:\n  crawl_queue:\n    corpus: {corpus}\n", "bad-config", "seed"),
    "seed not http": ("HEAD\n" + CRAWLER.replace("http://h/", "javascript:alert(1)"), "bad-config", "seed"),
    "more hosts than corpora": ("HEAD\n" + CRAWLER + "    hosts: [a, b]\n", "bad-config", "hosts"),
    "hosts a number": ("HEAD\n" + CRAWLER + "    hosts: 5\n", "bad-config", "hosts"),
    "host with a blank": ("HEAD\n" + CRAWLER + "    hosts: ['BAD HOST']\n", "bad-config", "hosts"),
    "host all digits": ("HEAD\n" + CRAWLER + "    hosts: ['2024']\n", "bad-config", "hosts"),
    "seed port too big": ("HEAD\n" + CRAWLER.replace("http://h/", "'http://h:99999/'"), "bad-config", "seed"),
    "seed host with a blank": ("HEAD\n" + CRAWLER.replace("http://h/", "'http://a b/'"), "bad-config", "seed"),
    "corpus on s3": (
        "HEAD\ncrawlers:\n  crawl_queue:\n    corpus: s3://b/a\n    seed: http://h/\n",
        "bad-config",
        "corpus",
    ),
    "corpus with a NUL": (
        'HEAD\ncrawlers:\n  crawl_queue:\n    corpus: "a\\0b"\n    seed: http://h/\n',
        "bad-config",
        "corpus",
    ),
    "inbox with a line break": ('flows: {flows}\ninbox: "/tmp/in\\nbox"\n', "bad-config", "inbox"),
    "unknown key": ("HEAD\nhome: /x\n", "bad-config", "home"),
    "duplicate key": ("HEAD\nhomes: /elsewhere\n", "duplicate-key", "homes"),
    "duplicate crawler key": ("HEAD\n" + CRAWLER + "    seed: http://other/\n", "duplicate-key", "seed"),
    "alias bomb": (
        "HEAD\nx0: &x0 [a, a, a, a, a, a, a, a, a]\n"
        + "".join(f"x{i}: &x{i} [{', '.join([f'*x{i - 1}'] * 9)}]\n" for i in range(1, 8)),
        "yaml-too-big",
        "alias",
    ),
    "homes empty": ("flows: {flows}\nhomes:\n", "bad-config", "homes"),
    "homes http": ("flows: {flows}\nhomes: http://127.0.0.1:1/h\ninbox: /tmp/i\n", "bad-config", "homes"),
    "homes with %": ("flows: {flows}\nhomes: /tmp/h%41\n", "bad-config", "homes"),
    "homes relative file URI": ("flows: {flows}\nhomes: 'file:h'\n", "bad-config", "homes"),
    "homes the root": ("flows: {flows}\nhomes: file:///\n", "bad-config", "homes"),
    "flows a number": ("flows: 5\n", "bad-config", "flows"),
    "inbox empty": ("flows: {flows}\ninbox:\n", "bad-config", "inbox"),
    "spark_master a number": ("HEAD\nspark_master: 5\n", "bad-config", "spark_master"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_setting_is_refused_at_load_with_a_code_naming_the_key(case, tmp_path):
    text, code, key = BAD[case]
    path = _write(tmp_path, text.replace("{flows}", str(FLOWS)))
    assert _code(path) == code
    from cbp.airflow.config import load_config

    with pytest.raises(CbpError, match=key):
        load_config(path)


def test_good_settings_load_as_written(tmp_path):
    from cbp.airflow.config import load_config

    cfg = load_config(
        _write(
            tmp_path,
            "HEAD\npoke_interval: 0.5\nrun_timeout_minutes: 10080\nepoch_timeout_seconds: 6e2\n"
            "inbox_settle_seconds: 0\n" + CRAWLER + "    hosts: h\n    max_pages: 7\n"
            "    revisit_min: 60\n    revisit_max: 86400\n    gone_after: 2\n    max_per_host: 50\n",
        )
    )
    assert (cfg.poke_interval, cfg.run_timeout_minutes, cfg.epoch_timeout_seconds, cfg.inbox_settle_seconds) == (
        0.5,
        10080,
        600,
        0,
    )
    c = cfg.crawlers["crawl_queue"]
    assert c.hosts == ["h"] and c.seed == ["http://h/"] and c.corpus == [str(tmp_path / "corpus")] and c.max_pages == 7
    assert (c.revisit_min, c.revisit_max, c.gone_after, c.max_per_host) == (60.0, 86400.0, 2, 50)
    assert load_config(_write(tmp_path, "HEAD\n")).inbox_settle_seconds == 5  # the default: a few seconds
    # a file: URI is the directory it names, wherever the config file is
    assert load_config(_write(tmp_path, f"flows: {FLOWS}\nhomes: file://{tmp_path}/h\n")).homes == f"{tmp_path}/h"
    assert (
        load_config(
            _write(tmp_path, f"flows: {FLOWS}\nhomes: file://localhost{tmp_path}/h\ninbox: file:{tmp_path}/i\n")
        ).inbox
        == f"{tmp_path}/i"
    )
    assert (
        load_config(_write(tmp_path, f"flows: {FLOWS}\nhomes: s3://b/h\nmarkers: {tmp_path}/m\n")).homes == "s3://b/h"
    )


def _flows(tmp_path: Path, *names: str, name: str = "flows") -> Path:
    flows = tmp_path / name
    flows.mkdir()
    for n in names:
        for ext in (".yaml", ".py"):
            shutil.copy(FLOWS / f"{n}{ext}", flows / f"{n}{ext}")
    return flows


def test_a_flows_path_with_brackets_is_no_glob_pattern(tmp_path):
    from cbp.airflow.dagfactory import make_dags

    flows = _flows(tmp_path, "url_count", name="fl[1]ows")
    assert set(make_dags(_write(tmp_path, "HEAD\n", flows))) == {"cbp_url_count"}


def test_a_home_with_a_hash_or_question_mark_keeps_distinct_asset_uris(tmp_path):
    from cbp.airflow.dagfactory import make_dags

    flows = _flows(tmp_path, "url_count", "crawl_queue")
    path = _write(tmp_path, f"flows: {flows}\nhomes: '{tmp_path}/ho#m?e'\ninbox: {tmp_path}/inbox\n")
    dags = make_dags(path)
    uris = {a.uri for n in ("cbp_url_count", "cbp_crawl_queue") for a in dags[n].timetable.asset_condition.objects}
    assert uris == {
        f"file://{tmp_path}/ho%23m%3Fe/url_count/flows/urls",
        f"file://{tmp_path}/ho%23m%3Fe/crawl_queue/flows/pages",
    }
    assert (
        dags["cbp_url_count"].task_dict["publish_counts"].outlets[0].uri
        == f"file://{tmp_path}/ho%23m%3Fe/url_count/flows/counts"
    )


def _failure(dag) -> CbpError:
    """What the one task of a broken DAG fails with."""
    assert set(dag.task_dict) == {"broken"} and "broken" in dag.tags
    with pytest.raises(CbpError) as e:
        dag.task_dict["broken"].python_callable()
    return e.value


def test_a_pipeline_named_like_a_crawler_dag_is_refused(tmp_path):
    from cbp.airflow.dagfactory import make_dags

    flows = _flows(tmp_path, "url_count", "crawl_queue")
    (flows / "zz.yaml").write_text(
        (FLOWS / "url_count.yaml").read_text().replace("pipeline: url_count", "pipeline: crawl_queue_crawler")
    )
    dags = make_dags(_write(tmp_path, "HEAD\n" + CRAWLER, flows))
    assert set(dags) == {"cbp_url_count", "cbp_crawl_queue", "cbp_crawl_queue_crawler"}
    assert _failure(dags["cbp_crawl_queue_crawler"]).code == "dag-id-collision"
    assert set(dags["cbp_crawl_queue"].task_dict) == {"land_inbox", "run", "publish_crawl_queue", "publish_epochs"}


def test_a_broken_yaml_leaves_the_other_dags_and_shows_its_error(tmp_path, caplog):
    from cbp.airflow.dagfactory import make_dags

    flows = _flows(tmp_path, "url_count", "crawl_queue", "set_diff")
    (flows / "zz broken.yaml").write_text("pipeline: [zz\n")
    (flows / "set_diff.yaml").write_text((flows / "set_diff.yaml").read_text().replace("stages:", "stagez:"))
    path = _write(tmp_path, "HEAD\n" + CRAWLER + "  nowhere:\n    corpus: {corpus}\n    seed: http://h/\n", flows)
    dags = make_dags(path)
    assert set(dags) == {
        "cbp_url_count",
        "cbp_crawl_queue",
        "cbp_crawl_queue_crawler",
        "cbp_set_diff",
        "cbp_zz_broken",
        "cbp_nowhere_crawler",
    }
    assert dags["cbp_crawl_queue_crawler"].task_dict["crawl_round"]  # the crawl loop is intact
    assert _failure(dags["cbp_zz_broken"]).code == "yaml"
    assert _failure(dags["cbp_set_diff"]).code == "invalid-spec"
    assert _failure(dags["cbp_nowhere_crawler"]).code == "unknown-pipeline"
    assert (
        type(dags["cbp_zz_broken"].timetable).__name__ == "OnceTimetable"
    )  # it fails once, visibly, instead of vanishing
    assert "zz broken.yaml" in caplog.text and "set_diff.yaml" in caplog.text  # and the DAG processor's log says why
    # the crawler of a broken pipeline fails with the pipeline's error
    (flows / "crawl_queue.yaml").write_text("pipeline: crawl_queue\n")
    dags = make_dags(path)
    assert _failure(dags["cbp_crawl_queue"]).code == _failure(dags["cbp_crawl_queue_crawler"]).code == "invalid-spec"
    assert set(dags["cbp_url_count"].task_dict) == {"land_inbox", "run", "publish_counts", "publish_epochs"}


def test_airflow_imports_the_dags_file_with_a_broken_yaml_without_an_import_error(tmp_path):
    flows = _flows(tmp_path, "url_count", "crawl_queue")
    (flows / "zz.yaml").write_text("pipeline: [zz\n")
    path = _write(tmp_path, "HEAD\n" + CRAWLER, flows)
    code = (
        "import warnings; warnings.filterwarnings('ignore')\n"
        "from airflow.dag_processing.dagbag import DagBag\n"
        f"b = DagBag(dag_folder={str(ROOT / 'dags')!r})\n"
        "print(sorted(b.dag_ids), len(b.import_errors))\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "CBP_DAGS_CONFIG": path},
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert (
        r.stdout.strip().splitlines()[-1]
        == "['cbp_crawl_queue', 'cbp_crawl_queue_crawler', 'cbp_url_count', 'cbp_zz'] 0"
    )
