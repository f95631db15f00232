"""Translators of components.yaml: min-label propagation over a loopback flow, and component sizes."""


def parse(key, state, lines, out):
    for line in lines:
        a, b = line["text"].split()
        out.edges.write({"src": int(a), "dst": int(b)})


def both_ends(edge):
    return [edge["src"], edge["dst"]]


def cc(node, state, edges, labels, out):
    prev = next(state, None)
    label = prev["label"] if prev else node
    nbrs = set(prev["nbrs"]) if prev else set()
    new = {e["dst"] if e["src"] == node else e["src"] for e in edges} - nbrs - {node}
    best = min([label] + [m["label"] for m in labels])
    nbrs |= new
    if prev is None or best < label:
        out.moves.write({"node": node, "old": prev["label"] if prev else None, "new": best})
        tell = nbrs  # everyone hears of a new or lower label
    else:
        tell = new  # new neighbours hear of our label
    for other in sorted(tell):
        out.labels.write({"node": other, "label": best})
    out.state.write({"node": node, "label": best, "nbrs": sorted(nbrs)})


def old_and_new(move):
    return [move["new"]] if move["old"] is None else [move["old"], move["new"]]


def size(label, state, moves, out):
    prev = next(state, None)
    before = prev["size"] if prev else 0
    n = before
    for m in moves:
        n += (m["new"] == label) - (m["old"] == label)
    if n != before:
        out.sizes.write({"label": label, "size": n})
    if n:
        out.state.write({"label": label, "size": n})
