"""URLCount translator (paper 001, Fig. 3)."""


def count_urls(url, state, urls, out):
    """Add the URL's new sightings to its stored count; emit the new count."""
    prev = next(state, None)
    count = sum(1 for _ in urls) + (prev["count"] if prev else 0)
    out.state.write({"url": url, "count": count})
    out.counts.write({"url": url, "count": count})
