"""Every translator shipped in the repository, against a feed that takes records back.

Found, not listed by hand: the stages of ``flows/*.yaml``, the ``cbp init`` template, and the
Python code blocks of the docs and the README that define a translator (a function whose last
parameter is ``out``). Each is fed increments with retractions (``_diff: -1``) and a record of
several copies (``_diff: 2``); a signed stage's state must equal a from-scratch computation over
the consolidated input after every increment, and a stage that is not signed must refuse the
retraction (``retraction-refused``) before anything lands. A translator found here without a
case below fails :func:`test_every_shipped_translator_has_a_case`: give it one.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from conftest import FLOWS, ROOT

import cbp
from cbp.commands.init import scaffold
from cbp.errors import InputError

# flows/pagerank.* and flows/clustering* are checked against networkx with retractions by the graphs
# tests (tests/test_graphs.py, the graphs helper's part of issue 46), not here
GRAPHS = {"pagerank.yaml", "clustering.yaml", "clustering_emulated.yaml"}
# flows/sql_views.* (views and the Python stage running_total, also in docs/howto/sql-views.md) are
# checked against Spark SQL with retractions after every epoch by tests/test_sql_views.py, not here
ELSEWHERE = GRAPHS | {"sql_views.yaml"}
FEEDS = [
    [{"k": "a"}, {"k": "a"}, {"k": "b"}, {"k": "d", "_diff": 2}],
    [{"k": "a", "_diff": -1}, {"k": "b", "_diff": -1}, {"k": "c"}, {"k": "d", "_diff": -1}],
]
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
PRELUDE = "import numpy as np\nimport pyarrow as pa\nimport pyarrow.compute as pc\n\n"


def from_scratch(feeds: list[list[dict[str, Any]]]) -> dict[str, int]:
    """Each key's count over the consolidated input: the sum of its multiplicities, zeros left out."""
    df = pd.DataFrame([{"k": r["k"], "d": r.get("_diff", 1)} for feed in feeds for r in feed])
    return {k: int(n) for k, n in df.groupby("k")["d"].sum().items() if n != 0}


def counter_yaml(fn: str, key: str, count: str, *, batch: bool = False, state_key: str | None = None) -> str:
    """A counting stage (per key, or ``batch``) named ``count`` over external flow ``ins``."""
    batch_line = "\n    batch: true" if batch else ""
    return (
        f"pipeline: shipped\nflows:\n  ins: {{external: true, schema: {{{key}: string}}}}\n"
        f"  counts: {{schema: {{{key}: string, {count}: int}}}}\nstages:\n  count:\n    translator: MOD:{fn}\n"
        f"    signed: true\n    partitions: 2{batch_line}\n    inputs: [{{flow: ins, route_by: {key}}}]\n"
        f"    state: {{schema: {{{state_key or key}: string, {count}: int}}}}\n    outputs: [counts]\n"
    )


def run_counter(
    spark: Any,
    yaml: Path,
    home: Path,
    key: str,
    count: str,
    *,
    state_key: str | None = None,
    extra: Callable[[dict[str, Any]], dict[str, Any]] = lambda r: r,
    stage: str = "count",
) -> None:
    """Feed :data:`FEEDS` (key field ``key``); after each, the state equals :func:`from_scratch`."""
    p = cbp.Pipeline(yaml, str(home), spark=spark)
    for n, feed in enumerate(FEEDS, 1):
        p.feed("ins", [extra({**{key if f == "k" else f: v for f, v in r.items()}}) for r in feed])
        p.run()
        got = {s[state_key or key]: s[count] for s in p.state(stage)}
        assert got == from_scratch(FEEDS[:n]), f"after feed {n}"


# ------------------------------------------------------------------ discovery
def doc_translators() -> list[tuple[str, str, str]]:
    """(file relative to the repository, function name, the code block) of every translator in the docs."""
    out = []
    for f in DOC_FILES:
        text = f.read_text(encoding="utf-8")
        blocks = re.findall(r"^```python\n(.*?)^```", text, re.S | re.M)
        blocks += re.findall(r"^cat > \S+\.py <<'EOF'\n(.*?)^EOF$", text, re.S | re.M)  # a module a bash block writes
        for block in blocks:
            for name, params in re.findall(r"^def (\w+)\(([^)]*)\):", block, re.M):
                if params.replace(" ", "").split(",")[-1] == "out":
                    out.append((str(f.relative_to(ROOT)), name, block))
    return out


def flow_stages() -> list[tuple[str, str]]:
    """(YAML file name, stage) of every stage of the shipped pipelines."""
    from cbp.spec import load_spec

    return [(y.name, s) for y in sorted(FLOWS.glob("*.yaml")) for s in load_spec(y).stages]


EXCERPTS = {  # docs blocks that show part of a translator ('...' elides the rest): not runnable alone
    ("docs/guide/broadcast.md", "node"): "multicast excerpt of flows/clustering.py (covered with the graphs)",
    ("docs/howto/keyed-state.md", "add_links", 1): "batch keyed-rows excerpt ('...'); its per-key form is run below",
    ("docs/howto/sql-views.md", "running_total"): "flows/sql_views.py's, run by tests/test_sql_views.py",
}


def doc_key(path: str, name: str, n: int) -> tuple:
    return (path, name) if n == 0 else (path, name, n)


def test_every_shipped_translator_has_a_case():
    found = set()
    seen: Counter = Counter()
    for path, name, _ in doc_translators():
        found.add(doc_key(path, name, seen[(path, name)]))
        seen[(path, name)] += 1
    assert found - set(DOC_CASES) - set(EXCERPTS) == set(), "a translator in the docs has no case here"
    assert len(found) >= 8  # the discovery finds them
    stages = {(y, s) for y, s in flow_stages() if y not in ELSEWHERE}
    assert stages - set(FLOW_CASES) == set(), "a stage of flows/*.yaml has no case here"


# ------------------------------------------------------------------ the docs and the README
def _doc_module(tmp_path: Path, key: tuple) -> tuple[str, Path]:
    path, name = key[0], key[1]
    n = key[2] if len(key) > 2 else 0
    blocks = [b for p, f, b in doc_translators() if p == path and f == name]
    mod = "doc_" + re.sub(r"\W", "_", f"{path}_{name}_{n}_{tmp_path.name}")
    (tmp_path / f"{mod}.py").write_text(PRELUDE + blocks[n])
    sys.modules.pop(mod, None)
    return mod, tmp_path


COUNTERS = {  # per doc translator: (key field, count field, batch, state key field)
    ("README.md", "count_urls"): ("url", "count", False),
    ("docs/tutorial.md", "count"): ("key", "count", False),
    ("docs/guide/pipelines.md", "count_urls"): ("url", "count", False),
    ("docs/guide/batch.md", "count_urls"): ("url", "count", False),
    ("docs/guide/batch.md", "count_urls", 1): ("url", "count", True),
    ("docs/howto/retractions.md", "count_urls"): ("url", "count", False),
}
KEYED_ROWS = """
pipeline: shipped_rows
flows:
  ins: {external: true, schema: {site: string, url: string}}
stages:
  count:
    translator: MOD:add_links
    signed: true
    partitions: 2
    inputs: [{flow: ins, route_by: site}]
    state: {schema: {url: string, inlinks: int}, row_key: url}
"""
ORDERS_DOC = (
    counter_yaml("customer_totals", "customer", "orders")
    .replace("schema: {customer: string}", "schema: {customer: string, amount: float}")
    .replace("{customer: string, orders: int}", "{customer: string, orders: int, total: float}")
    .replace("outputs: [counts]", "outputs: [totals]")
    .replace("  counts: {schema", "  totals: {schema")
)
DOC_CASES = [*COUNTERS, ("docs/howto/delta-sources.md", "customer_totals"), ("docs/howto/keyed-state.md", "add_links")]


@pytest.mark.parametrize("key", DOC_CASES, ids=lambda k: "-".join(map(str, k)))
def test_doc_translator_sums_diff(spark, tmp_path, key):
    mod, d = _doc_module(tmp_path, key)
    if key in COUNTERS:
        field, count, batch = COUNTERS[key]
        yaml = d / "p.yaml"
        yaml.write_text(counter_yaml(key[1], field, count, batch=batch).replace("MOD", mod))
        run_counter(spark, yaml, tmp_path / "home", field, count)
    elif key[1] == "customer_totals":
        yaml = d / "p.yaml"
        yaml.write_text(ORDERS_DOC.replace("MOD", mod))
        run_counter(spark, yaml, tmp_path / "home", "customer", "orders", extra=lambda r: {**r, "amount": 2.5})
    else:  # keyed rows: in-links per URL of a site
        yaml = d / "p.yaml"
        yaml.write_text(KEYED_ROWS.replace("MOD", mod))
        run_counter(spark, yaml, tmp_path / "home", "url", "inlinks", extra=lambda r: {**r, "site": "s"})
    sys.modules.pop(mod, None)


# ------------------------------------------------------------------ the cbp init template
def test_init_template_sums_diff(spark, tmp_path):
    yaml = Path(scaffold("shipped_init", str(tmp_path / "proj"))[0])
    text = yaml.read_text().replace("flow: events", "flow: ins").replace("  events:", "  ins:")
    yaml.write_text(text)
    run_counter(spark, yaml, tmp_path / "home", "key", "count")
    sys.modules.pop("shipped_init", None)


# ------------------------------------------------------------------ flows/*.yaml
def _renamed(name: str, tmp_path: Path, *replacements: tuple[str, str]) -> Path:
    """A copy of a shipped YAML (beside its translator module) with ``replacements`` made."""
    text = (FLOWS / name).read_text()
    for a, b in replacements:
        assert a in text, a
        text = text.replace(a, b)
    (tmp_path / "flows").mkdir()
    module = name.removesuffix(".yaml") + ".py"
    (tmp_path / "flows" / module).write_text((FLOWS / module).read_text())  # the translator, beside the YAML
    out = tmp_path / "flows" / name
    out.write_text(text)
    return out


def _url_count(spark, tmp_path, name):
    yaml = _renamed(name, tmp_path, ("  urls:", "  ins:"), ("flow: urls", "flow: ins"))
    run_counter(spark, yaml, tmp_path / "home", "url", "count", stage="url_count")


def _orders(spark, tmp_path, name):  # the Delta source replaced by a plain external flow: the same records
    yaml = _renamed(
        name,
        tmp_path,
        ("  orders:", "  ins:"),
        ("flow: orders", "flow: ins"),
        ("    source: {delta: ../state/orders_source}", "    # source: the records, fed"),
    )
    run_counter(
        spark,
        yaml,
        tmp_path / "home",
        "customer",
        "orders",
        extra=lambda r: {**r, "order_id": 1, "amount": 2.0},
        stage="customer_totals",
    )


def _set_diff(spark, tmp_path, name):  # not signed: first sightings cannot be taken back
    p = cbp.Pipeline(FLOWS / name, str(tmp_path / "home"), spark=spark)
    for flow in ("crawl_a", "crawl_b"):
        with pytest.raises(InputError) as e:
            p.feed(flow, [{"url": "u", "hour": 1}, {"url": "u", "hour": 1, "_diff": -1}])
        assert e.value.code == "retraction-refused"
        assert p.feeds(flow) == 0


def _page(url: str, fetched: float, links: list[str], status: int = 200) -> dict[str, Any]:
    html = "".join(f'<a href="{t}">x</a>' for t in links)
    return {"url": url, "status": status, "html": html if status == 200 else None, "digest": None, "fetched": fetched}


def _crawl_queue(spark, tmp_path, name):
    """Pages are versions, never retracted (a 404 is landed instead): a retraction fed to pages is
    refused; a 404 makes extract_links retract the page's links, which signed count_links sums."""
    from cbp_crawl.reference import counts_from_scratch

    p = cbp.Pipeline(FLOWS / name, str(tmp_path / "home"), spark=spark)
    with pytest.raises(InputError) as e:
        p.feed("pages", [{**_page("http://h.test/a", 1.0, []), "_diff": -1}])
    assert e.value.code == "retraction-refused"
    feeds = [
        [
            _page("http://h.test/a", 1.0, ["http://h.test/c", "http://h.test/b"]),
            _page("http://h.test/b", 1.0, ["http://h.test/c", "http://o.test/x"]),
        ],
        [_page("http://h.test/a", 2.0, [], status=404), _page("http://h.test/d", 2.0, ["http://h.test/b"])],
    ]
    for n, feed in enumerate(feeds, 1):
        p.feed("pages", feed if "landmark" not in name else [r for f in feeds[:n] for r in f])
        p.run()
        if "landmark" in name:
            continue
        url_in, site_in, _ = counts_from_scratch(feeds[:n], feeds=True)
        want = {**{("url", u): int(c) for u, c in url_in.items()}, **{("site", s): int(c) for s, c in site_in.items()}}
        assert {(r["kind"], r["name"]): r["inlinks"] for r in p.state("count_links")} == want, f"after feed {n}"


FLOW_CASES: dict[tuple[str, str], Callable[..., None]] = {
    ("url_count.yaml", "url_count"): _url_count,
    ("url_count_vec.yaml", "url_count"): _url_count,
    ("orders.yaml", "customer_totals"): _orders,
    ("set_diff.yaml", "set_diff"): _set_diff,
    **{
        (y, s): _crawl_queue
        for y in ("crawl_queue.yaml", "crawl_queue_landmark.yaml")
        for s in ("extract_links", "count_links", "merge", "score", "threshold")
    },
}


@pytest.mark.parametrize("name", sorted({y for y, _ in FLOW_CASES}))
def test_shipped_pipeline_with_retractions(spark, tmp_path, name):
    stages = {s: f for (y, s), f in FLOW_CASES.items() if y == name}
    for run in set(stages.values()):  # one run checks every stage of the pipeline
        run(spark, tmp_path, name)
