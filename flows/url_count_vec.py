"""URLCount with a vectorised translator (``batch: true``): one call per batch of URLs, Arrow in and out.

Same flows, stage and schemas as ``url_count.yaml``; the per-key form is ``url_count.py``.
"""

import numpy as np
import pyarrow as pa


def count_urls(urls_keys, state, urls, out):
    """New count = stored count + sightings in this epoch, for every URL called.

    Each row of ``urls`` and ``state`` says in ``_pos`` which of ``urls_keys`` it belongs to, so
    sightings and stored counts add up by position: no hash table, no string compared.
    """
    total = np.bincount(urls["_pos"].to_numpy(), minlength=len(urls_keys))
    if state is not None and state.num_rows:
        np.add.at(total, state["_pos"].to_numpy(), state["count"].to_numpy())
    new = pa.table({"_key": urls_keys, "url": urls_keys, "count": pa.array(total, pa.int64())})
    return {"state": new, "counts": new.drop_columns(["_key"])}
