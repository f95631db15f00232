#!/usr/bin/env python
"""Real graphs for the graph benchmarks (``bench/graphs.py``), cached as edge lists in ``bench/data/``.

- **WordNet's synset graph** (Debian package ``wordnet-base``, downloaded with ``apt-get download``
  and unpacked with ``dpkg-deb -x`` by :func:`cbp_crawl.corpus.fetch_debian_doc`): every synset of
  ``usr/share/wordnet/data.{noun,verb,adj,adv}`` is a node ``f"{offset}{pos}"`` (pos ``n v a r``;
  the satellite adjective ``s`` is folded into ``a``), every pointer (hypernym, antonym, ...) an
  edge synset -> pointed synset. A data line is ``synset_offset lex_filenum ss_type w_cnt word
  lex_id [word lex_id ...] p_cnt [pointer_symbol synset_offset pos source/target ...] ...``
  (``w_cnt`` two hex digits, ``p_cnt`` three decimal ones); lines starting with two spaces are
  the license header. :func:`wordnet_edges` gives the directed edge list (pointer symbols and
  word-level pointers folded: one edge per ordered pair) and, with ``directed=False``, the
  undirected one (one edge per unordered pair, ``src < dst``); ``hypernyms_only`` keeps just the
  hypernym pointers (``@``, ``@i``): the taxonomy, a DAG from each synset up to its roots.
- **A documentation package's link graph** (:func:`doc_link_edges`, default ``python3.11-doc``):
  its HTML pages are the nodes (their URLs, :func:`cbp_crawl.corpus.iter_pages`), and a link from
  a page to another page of the package (:func:`cbp_crawl.links.page_links`, the crawl queue's
  rules) is an edge.

Edge lists are cached as tab-separated text (``bench/data/<name>.edges``, first line a header
naming the source and rules); :func:`split_edges` splits one into a base graph and increments
with a fixed seed.

    .venv/bin/python bench/graphdata.py       # build (or read) the caches and print their sizes
"""

from __future__ import annotations

import random
import sys
from collections.abc import Iterable
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
DATA = BENCH / "data"
sys.path.insert(0, str(ROOT))

Edge = tuple[str, str]
WORDNET_FILES = ("data.noun", "data.verb", "data.adj", "data.adv")
POS = {"n": "n", "v": "v", "a": "a", "s": "a", "r": "r"}


def _pos(p: str) -> str:
    try:
        return POS[p]
    except KeyError:
        raise ValueError(f"unknown WordNet part of speech {p!r}") from None


def parse_wordnet_line(line: str) -> tuple[str, list[tuple[str, str]]]:
    """One data line: its synset's node id and its pointers as (pointer symbol, node id), in order."""
    f = line.split()
    offset, ss_type, w_cnt = f[0], f[2], int(f[3], 16)
    node = f"{offset}{_pos(ss_type)}"
    i = 4 + 2 * w_cnt
    p_cnt = int(f[i])
    i += 1
    targets = []
    for _ in range(p_cnt):
        symbol, off, pos, _src_tgt = f[i : i + 4]
        targets.append((symbol, f"{off}{_pos(pos)}"))
        i += 4
    return node, targets


#: Pointer symbols of the hypernym graph (synset -> its hypernyms, instance hypernyms included).
HYPERNYMS = frozenset({"@", "@i"})


def parse_wordnet(directory: Path, symbols: frozenset[str] | None = None) -> list[Edge]:
    """Directed edges (synset -> pointed synset; one per ordered pair, no self-loops), sorted;
    only pointers whose symbol is in ``symbols`` when given."""
    edges: set[Edge] = set()
    for name in WORDNET_FILES:
        with open(directory / name, encoding="latin-1") as fh:
            for line in fh:
                if line.startswith("  ") or not line.strip():
                    continue
                node, targets = parse_wordnet_line(line)
                edges.update((node, t) for sym, t in targets if t != node and (symbols is None or sym in symbols))
    return sorted(edges)


def undirected(edges: Iterable[Edge]) -> list[Edge]:
    """One edge per unordered pair (``src < dst``), no self-loops, sorted."""
    return sorted({(a, b) if a < b else (b, a) for a, b in edges if a != b})


def _read_cache(path: Path, header: str) -> list[Edge] | None:
    if not path.exists():
        return None
    with open(path, encoding="utf-8") as fh:
        if fh.readline().rstrip("\n") != header:
            return None
        return [tuple(line.rstrip("\n").split("\t", 1)) for line in fh if line.strip()]  # type: ignore[misc]


def _write_cache(path: Path, header: str, edges: list[Edge]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(header + "\n" + "".join(f"{a}\t{b}\n" for a, b in edges), encoding="utf-8")
    tmp.replace(path)


def wordnet_edges(directed: bool = True, hypernyms_only: bool = False) -> list[Edge]:
    """WordNet's synset pointer graph (cached in ``bench/data/wordnet-{directed,undirected}.edges``);
    with ``hypernyms_only`` just the hypernym pointers (:data:`HYPERNYMS`: a DAG, synset -> hypernym;
    cached in ``bench/data/wordnet-hypernyms-*.edges``)."""
    from cbp_crawl.corpus import fetch_debian_doc

    kind = "directed" if directed else "undirected"
    which = "hypernyms-" if hypernyms_only else ""
    cache = DATA / f"wordnet-{which}{kind}.edges"
    header = (
        f"# wordnet-base synset pointers{' @ @i' if hypernyms_only else ''}, {kind}, node = offset+pos (s->a), "
        "parser v1"
    )
    hit = _read_cache(cache, header)
    if hit is not None:
        return hit
    root = fetch_debian_doc("wordnet-base", str(DATA))
    if root is None:
        raise RuntimeError("cannot get Debian package wordnet-base (apt-get download failed)")
    edges = parse_wordnet(Path(root) / "usr" / "share" / "wordnet", HYPERNYMS if hypernyms_only else None)
    if not directed:
        edges = undirected(edges)
    _write_cache(cache, header, edges)
    return edges


def doc_link_edges(package: str = "python3.11-doc", directed: bool = True) -> list[Edge]:
    """Page -> page links inside a Debian documentation package (cached in ``bench/data/``)."""
    from cbp_crawl.corpus import fetch_debian_doc, iter_pages
    from cbp_crawl.links import RULES_VERSION, page_links

    kind = "directed" if directed else "undirected"
    cache = DATA / f"{package}-links-{kind}.edges"
    header = f"# page links inside {package}, {kind}, cbp_crawl.links rules {RULES_VERSION}"
    hit = _read_cache(cache, header)
    if hit is not None:
        return hit
    root = fetch_debian_doc(package, str(DATA))
    if root is None:
        raise RuntimeError(f"cannot get Debian package {package} (apt-get download failed)")
    pages = dict(iter_pages(root, package))
    edges = sorted({(url, t) for url, html in pages.items() for t in page_links(url, html) if t in pages and t != url})
    if not directed:
        edges = undirected(edges)
    _write_cache(cache, header, edges)
    return edges


def split_edges(
    edges: list[Edge], increments: int, base: float | int = 0.5, seed: int = 1
) -> tuple[list[Edge], list[list[Edge]]]:
    """Shuffle ``edges`` with ``seed``; the first ``base`` edges (a count, or a fraction of all)
    are the base graph, the rest ``increments`` increments of (nearly) equal size."""
    order = list(edges)
    random.Random(seed).shuffle(order)
    n_base = base if isinstance(base, int) else int(round(base * len(order)))
    head, rest = order[:n_base], order[n_base:]
    k, r = divmod(len(rest), increments)
    out, a = [], 0
    for j in range(increments):
        b = a + k + (1 if j < r else 0)
        out.append(rest[a:b])
        a = b
    return head, out


def nodes_of(edges: Iterable[Edge]) -> set[str]:
    return {n for e in edges for n in e}


def main() -> int:
    for name, edges in (
        ("wordnet directed", wordnet_edges(True)),
        ("wordnet undirected", wordnet_edges(False)),
        ("wordnet hypernyms directed", wordnet_edges(True, hypernyms_only=True)),
        ("python3.11-doc links directed", doc_link_edges(directed=True)),
        ("python3.11-doc links undirected", doc_link_edges(directed=False)),
    ):
        print(f"{name:<32} {len(nodes_of(edges)):>8,} nodes {len(edges):>9,} edges")
    return 0


if __name__ == "__main__":
    sys.exit(main())
