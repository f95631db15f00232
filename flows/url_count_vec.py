"""URLCount with a vectorised translator (``batch: true``): one call per batch of URLs, Arrow in and out.

Same flows, stage and schemas as ``url_count.yaml``; the per-key form is ``url_count.py``. A
record's ``_diff`` (its multiplicity: -1 takes a sighting back) adds to the count; a URL whose
count reaches 0 is removed from the state (and reported with count 0).
"""

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def count_urls(urls_keys, state, urls, out):
    """New count = stored count + sightings in this epoch, for every URL called.

    Each row of ``urls`` and ``state`` says in ``_pos`` which of ``urls_keys`` it belongs to, so
    sightings and stored counts add up by position: no hash table, no string compared.
    """
    pos = urls["_pos"].to_numpy()
    diff = urls["_diff"].to_numpy() if "_diff" in urls.column_names else None
    if diff is None or (diff.size and diff.min() == 1 and diff.max() == 1):  # all plain sightings: a count of rows
        total = np.bincount(pos, minlength=len(urls_keys)).astype(np.int64)
    else:
        total = np.zeros(len(urls_keys), np.int64)
        np.add.at(total, pos, diff)
    if state is not None and state.num_rows:
        np.add.at(total, state["_pos"].to_numpy(), state["count"].to_numpy())
    if total.size and total.min() < 0:
        bad = urls_keys[int(np.argmin(total))].as_py()
        raise ValueError(f"URL {bad!r}: more sightings retracted than there were (its count would be {int(total.min())})")
    new = pa.table({"_key": urls_keys, "url": urls_keys, "count": pa.array(total, pa.int64())})
    if total.all():
        return {"state": new, "counts": new.drop_columns(["_key"])}
    zero = pa.array(total == 0)
    return {"state": new.filter(pc.invert(zero)), "removed": urls_keys.filter(zero), "counts": new.drop_columns(["_key"])}
