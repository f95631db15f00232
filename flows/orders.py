"""Orders per customer (``flows/orders.yaml``): a count and a total kept from signed order records.

Each order record carries its multiplicity ``_diff`` (+1 for an order that appeared, -1 for one
that was deleted or replaced by an update), so one sum handles inserts, updates and deletes. A
customer with no order left drops out of the state.
"""


def customer_totals(customer, state, orders, out):
    """Add each order's amount times its ``_diff`` to the customer's total (and ``_diff`` to the count)."""
    prev = next(state, None)
    count = prev["orders"] if prev else 0
    total = prev["total"] if prev else 0.0
    for o in orders:
        d = o.get("_diff", 1)
        count += d
        total += d * o["amount"]
    if count == 0:
        total = 0.0  # no rounding residue once every order is gone
    else:
        out.state.write({"customer": customer, "orders": count, "total": total})
    out.totals.write({"customer": customer, "orders": count, "total": total})
