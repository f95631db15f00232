"""SetDiff translator and runnability (paper 001 §2.2)."""


def same_hour(frames, state):
    """Run when both crawls have a complete hour: read both if it is the same hour, else the older one."""
    a, b = frames["crawl_a"], frames["crawl_b"]
    if not a or not b:
        return set(), set(), state
    if a[0] == b[0]:
        return {"crawl_a", "crawl_b"}, {"crawl_a", "crawl_b"}, state
    older = "crawl_a" if a[0] < b[0] else "crawl_b"
    return {older}, {older}, state


def set_diff(url, state, crawl_a, crawl_b, out):
    """Remember every URL; report a new URL on only_a / only_b when exactly one crawler saw it."""
    if next(state, None) is not None:
        out.state.write({"url": url})  # seen before: keep it, report nothing
        return
    seen_a = next(crawl_a, None)
    seen_b = next(crawl_b, None)
    out.state.write({"url": url})
    if seen_a is not None and seen_b is None:
        out.only_a.write({"url": url, "hour": seen_a["hour"]})
    elif seen_b is not None and seen_a is None:
        out.only_b.write({"url": url, "hour": seen_b["hour"]})
