"""URLCount with a vectorised translator (``batch: true``): one call per batch of URLs, Arrow in and out.

Same flows, stage and schemas as ``url_count.yaml``; the per-key form is ``url_count.py``.
"""

import pyarrow as pa
import pyarrow.compute as pc


def count_urls(urls_keys, state, urls, out):
    """New count = stored count + sightings in this epoch, for every URL called."""
    seen = urls.group_by("_key").aggregate([("url", "count")])  # _key, url_count
    prev = state.select(["_key", "count"]) if state is not None else None
    if prev is not None and prev.num_rows:
        seen = seen.join(prev, "_key", join_type="left outer")
        total = pc.add(seen["url_count"], pc.fill_null(seen["count"], 0))
    else:
        total = seen["url_count"]
    new = pa.table({"_key": seen["_key"], "url": seen["_key"], "count": pc.cast(total, pa.int64())})
    return {"state": new, "counts": new.drop_columns(["_key"])}
