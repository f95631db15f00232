"""URLCount with a vectorised translator (``batch: true``): one call per batch of URLs, Arrow in and out.

Same flows, stage and schemas as ``url_count.yaml``; the per-key form is ``url_count.py``.
"""

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def count_urls(urls_keys, state, urls, out):
    """New count = stored count + sightings in this epoch, for every URL called.

    The records come grouped by key in the order of ``urls_keys`` (every called URL has at least
    one), so a URL's sightings are the length of its run: no hash table, no reordering.
    """
    ends = pc.run_end_encode(urls["_key"].combine_chunks()).run_ends.to_numpy()
    total = pa.array(np.diff(ends, prepend=0), pa.int64())
    if state is not None and state.num_rows:  # stored counts, where there are
        prev = state["count"].take(pc.index_in(urls_keys, value_set=state["_key"]))
        total = pc.add(total, pc.fill_null(prev, 0))
    new = pa.table({"_key": urls_keys, "url": urls_keys, "count": total})
    return {"state": new, "counts": new.drop_columns(["_key"])}
