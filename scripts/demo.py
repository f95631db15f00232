"""The demo behind `scripts/demo`: URLCount over the links of real pages, five increments.

Pages come from Debian's python3.11-doc package (fetched with apt-get download); each increment
is the links found on the next batch of pages, by the crawl queue's rules (cbp_crawl.links),
every occurrence of a link counted: URLCount counts how often each URL is linked to, not how
many pages link to it. After each epoch it shows what
changed; at the end, the most-linked URLs and the commands to look further.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import cbp  # noqa: E402
from cbp_crawl.corpus import fetch_debian_doc, iter_pages  # noqa: E402
from cbp_crawl.links import page_links  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--home", default=os.path.join(ROOT, "state", "url_count_demo"))
    ap.add_argument("--increments", type=int, default=5)
    args = ap.parse_args()

    corpus = fetch_debian_doc("python3.11-doc", os.path.join(ROOT, "state", "corpus"))
    if corpus:
        pages = list(iter_pages(corpus, "python3.11-doc"))
        print(f"corpus: {len(pages)} real HTML pages of python3.11-doc")
    else:
        print("corpus: could not fetch python3.11-doc with apt-get; using generated pages instead")
        rng = random.Random(0)
        pages = [
            (f"http://gen/{i}.html", " ".join(f'<a href="/{rng.randint(0, 300)}.html">x</a>' for _ in range(20)))
            for i in range(500)
        ]

    if os.path.exists(args.home):
        import shutil

        shutil.rmtree(args.home)
    pipe = cbp.load(os.path.join(ROOT, "flows", "url_count.yaml"), home=args.home)
    per = max(1, len(pages) // args.increments)
    for i in range(args.increments):
        batch = pages[i * per : (i + 1) * per]
        urls = [{"url": u} for page_url, html in batch for u in page_links(page_url, html, every_occurrence=True)]
        t0 = time.perf_counter()
        pipe.feed("urls", urls)
        for rep in pipe.run():
            print(rep.line())
        changed = pipe.output("counts", epoch=i + 1)
        top = sorted(changed, key=lambda r: -r["count"])[:3]
        print(
            f"  increment {i + 1}: {len(batch)} pages, {len(urls)} links, {len(changed)} URLs changed "
            f"({time.perf_counter() - t0:.1f}s); top changed: " + ", ".join(f"{r['url']} ={r['count']}" for r in top)
        )
    state = pipe.state("url_count")
    print(f"\nstate: {len(state)} distinct URLs; most linked:")
    for r in sorted(state, key=lambda r: -r["count"])[:10]:
        print(f"  {r['count']:6d}  {r['url']}")
    rel = os.path.relpath(args.home)
    print(
        f"\nlook further:\n  .venv/bin/cbp status flows/url_count.yaml --home {rel}\n"
        f"  .venv/bin/cbp output flows/url_count.yaml counts --home {rel} --epoch 2 | head\n"
        f"  .venv/bin/cbp state flows/url_count.yaml url_count --home {rel} | head"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
