"""URLCount translator (paper 001, Fig. 3), with retractions: a record with ``_diff`` n is n
sightings (a negative n takes sightings back); a URL whose count reaches 0 drops its state."""


def count_urls(url, state, urls, out):
    """Add the URL's new sightings (their multiplicities) to its stored count; emit the new count
    (0 when the URL's sightings were all taken back: its state is dropped)."""
    prev = next(state, None)
    count = sum(r["_diff"] for r in urls) + (prev["count"] if prev else 0)
    if count < 0:
        raise ValueError(f"URL {url!r}: more sightings retracted than there were (its count would be {count})")
    if count:
        out.state.write({"url": url, "count": count})
    out.counts.write({"url": url, "count": count})
