"""Record the driver JVM's class archive (:mod:`cbp.engine.driver.jvmcache`) for this checkout's local
drivers, with short runs that exit normally: ``tests/conftest.py`` runs this file once, before the suite's
drivers start, when no archive is kept for this Java and class path.

Without it, on a clean clone (a new class path, so a new archive key) the first xdist worker's session
driver takes the recording and keeps it until pytest exits (the JVM writes an archive only as it exits),
so none of the suite's drivers, hundreds of ``cbp`` processes among them, starts from one. A driver that
maps the archive starts with about half the CPU of one that does not (docs/concepts/test-suite.md).

The runs load what the suite's drivers load: a direct-mode stage (URLCount), a black-box stage with a
loopback flow and Python jobs (the crash tests' components), Arrow, Delta commits, and Spark's own Delta
reader.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    sys.path.insert(0, str(ROOT / "tests" / "crash"))
    import cbp
    from cbp.engine.driver.session import get_spark

    spark = get_spark()
    with tempfile.TemporaryDirectory() as home:
        urls = cbp.load(ROOT / "flows" / "url_count.yaml", home=f"{home}/urls", spark=spark)
        urls.feed("urls", [{"url": "http://a/"}, {"url": "http://b/"}, {"url": "http://a/"}])
        urls.run()
        graph = cbp.load(ROOT / "tests" / "crash" / "components.yaml", home=f"{home}/cc", spark=spark)
        graph.feed("lines", [{"text": "1 2"}, {"text": "2 3"}])
        graph.run()
        table = next(p.parent for p in Path(home).rglob("_delta_log") if p.is_dir() for _ in [0])
        spark.read.format("delta").load(str(table)).count()
    # the process's exit stops the session and keeps the archive (jvmcache.finish_at_exit)


if __name__ == "__main__":
    main()
