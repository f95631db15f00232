"""Dead ends of a stage graph: stages that can never run, said before anything runs.

A stage gets input only from external flows (fed from outside) and from flows that stages which
can run produce. The stages that can ever run are the least fixpoint of that rule under each
stage's Runnable: ``all`` needs an increment on every input, ``any`` (and a custom Runnable,
which cbp cannot look into) on at least one. What is left can never run: a stage whose
``runnable: all`` waits on a loopback flow only it writes, or a cycle no external input reaches.

    >>> from cbp.spec import load_spec
    >>> [w.code for w in dead_ends(load_spec("flows/url_count.yaml"))]
    []
"""

from __future__ import annotations

from dataclasses import dataclass

from . import PipelineSpec

__all__ = ["DeadEnd", "dead_ends", "runnable_stages"]


@dataclass(frozen=True)
class DeadEnd:
    """A warning about a stage that can never run; ``code`` is stable, ``message`` says what to change."""

    stage: str
    code: str
    message: str

    def __str__(self) -> str:
        return self.message


def runnable_stages(spec: PipelineSpec) -> set[str]:
    """The stages that can ever become runnable (the least fixpoint, see the module docstring)."""
    can_run: set[str] = set()
    while True:
        fed = {f.name for f in spec.flows.values() if f.external or f.producer in can_run}
        more = {
            name
            for name, st in spec.stages.items()
            if name not in can_run
            and (
                all(i.flow in fed for i in st.inputs)
                if st.runnable_name == "all"
                else any(i.flow in fed for i in st.inputs)
            )
        }
        if not more:
            return can_run
        can_run |= more


def dead_ends(spec: PipelineSpec) -> list[DeadEnd]:
    """One :class:`DeadEnd` per stage that can never run, with the reason (codes: ``self-loop-all``,
    ``unreached-cycle``, ``waits-on-dead-stage``)."""
    can_run = runnable_stages(spec)
    fed = {f.name for f in spec.flows.values() if f.external or f.producer in can_run}
    out: list[DeadEnd] = []
    where = spec.path
    for name in spec.order:
        if name in can_run:
            continue
        st = spec.stages[name]
        starved = [i.flow for i in st.inputs if i.flow not in fed]
        own = [f for f in starved if spec.flows[f].producer == name]
        cycle = _cycle_of(spec, name)
        if st.runnable_name == "all" and own and len(starved) == len(own) and len(starved) < len(st.inputs):
            out.append(
                DeadEnd(
                    name,
                    "self-loop-all",
                    (
                        f"{where}: stage '{name}' can never run: 'runnable: all' needs an increment on every input, "
                        f"and {_names(own)} {'is' if len(own) == 1 else 'are'} written only by '{name}' itself; "
                        "use 'runnable: any' or a custom runnable"
                    ),
                )
            )
        elif cycle and not any(
            spec.flows[i.flow].external or spec.flows[i.flow].producer not in cycle
            for s in cycle
            for i in spec.stages[s].inputs
            if i.flow in fed
        ):
            out.append(
                DeadEnd(
                    name,
                    "unreached-cycle",
                    (
                        f"{where}: stage '{name}' can never run: it is in a cycle ({', '.join(sorted(cycle))}) that no "
                        f"external input reaches (it waits on {_names(starved)}); feed the cycle from an external "
                        "flow or a stage outside it"
                    ),
                )
            )
        else:
            producers = sorted({spec.flows[f].producer or "" for f in starved} - {""})
            out.append(
                DeadEnd(
                    name,
                    "waits-on-dead-stage",
                    (
                        f"{where}: stage '{name}' can never run: its runnable '{st.runnable_name}' waits on "
                        f"{_names(starved)}, which only stage(s) {', '.join(repr(p) for p in producers)} write, and "
                        "they can never run either"
                    ),
                )
            )
    return out


def _names(flows: list[str]) -> str:
    return ", ".join(f"'{f}'" for f in flows)


def _cycle_of(spec: PipelineSpec, stage: str) -> set[str]:
    """The stages on a cycle through ``stage`` (its strongly connected component), or empty."""

    def reach(start: str, forward: bool) -> set[str]:
        seen: set[str] = set()
        todo = [start]
        while todo:
            s = todo.pop()
            if forward:
                nxt = [c for f in spec.stages[s].outputs for c in spec.flows[f].consumers]
            else:
                nxt = [p for i in spec.stages[s].inputs if (p := spec.flows[i.flow].producer) is not None]
            for n in nxt:
                if n not in seen:
                    seen.add(n)
                    todo.append(n)
        return seen

    return reach(stage, True) & reach(stage, False)
