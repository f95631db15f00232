"""The Python stage of ``sql_views.yaml``: a customer's total of big orders, read from a SQL view."""


def running_total(cust, state, big_orders, out):
    """Add each big order's ``gross`` times its ``_diff`` (a retracted order takes its amount back);
    retract the customer's old total and write the new one when it changes.

    Example: orders of 30 and 40 (gross 60, 80) give ``{"cust": "a", "total": 140.0}``.
    """
    old = next(state, None)
    total, n = (old["total"], old["n"]) if old else (0.0, 0)
    for r in big_orders:
        total, n = total + r["gross"] * r["_diff"], n + r["_diff"]
    if old is not None and (old["total"], old["n"]) == (total, n):
        return
    if old is not None:
        out.totals.write({"cust": cust, "total": old["total"], "_diff": -1})
    if n:
        out.state.write({"cust": cust, "total": total, "n": n})
        out.totals.write({"cust": cust, "total": total})
