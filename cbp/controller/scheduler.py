"""Runnability and scheduling (paper 001 §4.1-4.2): what each stage's Runnable says, and the
round-robin scheduler for possibly cyclic graphs with backpressure.

Reads: ``live.spec`` and ``live.st`` (connectors, increments' framing keys and completeness,
runnable states, the scheduler's position), the intentions a killed run left, the runner lease.
Writes: through the journal only: a Runnable's new state when it says not runnable (a
:class:`~.change.RunnableStateSet` the journal saves) and the scheduler's position ``sched``, which
it moves on a copy and commits with each epoch's change (:class:`~.change.SchedSet`; a run's first
epoch also commits the new round a run starts); runs each epoch through :class:`~.epoch.Epochs`: plans it
under the home's lock, runs its Spark job without it, commits it under the lock (a refused
commit, :mod:`.commitcheck`, is planned again; the scheduler sets ``epoch_timeout`` and
``run_info`` for the run) and collects garbage through :class:`~.landing.Landing` when a run
ends; holds the home's runner lock for the whole run.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

from ..errors import UsageError, UserCodeError
from ..model import normalize_runnable_result
from ..spec import MAX_TIMEOUT
from ..spec.resolve import safe_str
from ..storage import Home
from .change import RunnableStateSet
from .commitcheck import Conflict, Planned
from .epoch import Epochs
from .intentions import Intention, Intentions
from .journal import Journal
from .landing import Landing
from .live import Live, Tuning
from .records import Decision, EpochReport, check_storable
from .snapshot import Sched

__all__ = ["Scheduler"]


class Scheduler:
    """Asks Runnables, and runs runnable stages round by round."""

    def __init__(
        self,
        home: Home,
        live: Live,
        journal: Journal,
        intentions: Intentions,
        epochs: Epochs,
        landing: Landing,
        tuning: Tuning,
        notify: Callable[[str], None],
    ) -> None:
        self.home, self.live, self.journal, self.intentions = home, live, journal, intentions
        self.epochs, self.landing, self.tuning, self.notify = epochs, landing, tuning, notify

    def frames(self, stage: str) -> dict[str, list[Any]]:
        """Framing keys of the complete increments at the head of each input connector."""
        out: dict[str, list[Any]] = {}
        for inp in self.live.spec.stages[stage].inputs:
            incs = self.live.st.flows[inp.flow].incs
            keys = []
            for i in self.live.st.connector(stage, inp.flow):
                m = incs[i]
                if not m.complete:
                    break
                keys.append(m.frame)
            out[inp.flow] = keys
        return out

    def decide(self, stage: str, *, keep_state: bool = False) -> Decision | None:
        """Ask the stage's Runnable; None when the stage is not runnable.

        With ``keep_state`` (the scheduler's calls), a new runnable state returned with a "not
        runnable" answer is saved too; a runnable decision carries its state to the epoch's commit.
        """
        spec = self.live.spec.stages[stage]
        frames = self.frames(stage)
        where = f"stage '{stage}' runnable '{spec.runnable_name}'"
        try:
            result = spec.runnable(
                {k: list(v) for k, v in frames.items()}, copy.deepcopy(self.live.st.stages[stage].runnable_state)
            )
            reads, removes, state = normalize_runnable_result(result, frames, where)
        except (TypeError, ValueError) as e:
            text = safe_str(e)
            raise UserCodeError(text if where in text else f"{where}: {text}") from e
        except KeyboardInterrupt:
            raise
        except BaseException as e:  # noqa: BLE001 - user code: SystemExit and kin too, never a silent exit
            raise UserCodeError(f"{where} raised {type(e).__name__}: {safe_str(e)}") from e
        check_storable(state, f"{where} returned a state that")
        if not reads:
            sst = self.live.st.stages[stage]
            stored = json.loads(json.dumps(state)) if keep_state else None  # as it will read back
            if keep_state and stored != sst.runnable_state:
                self.journal.save(RunnableStateSet(stage, stored))
            return None
        return Decision(reads, removes, state)

    def _backpressured(self, stage: str) -> bool:
        outs = [f for f in self.live.spec.stages[stage].outputs if self.live.spec.flows[f].consumers]
        if not outs:
            return False
        return all(
            len(self.live.st.connector(c, f)) >= self.tuning.backpressure
            for f in outs
            for c in self.live.spec.flows[f].consumers
        )

    def run(
        self,
        max_epochs: int | None = None,
        on_epoch: Callable[[EpochReport], None] | None = None,
        on_start: Callable[[str, int], None] | None = None,
        command: str = "cbp.Pipeline.run()",
        epoch_timeout: float | None = None,
    ) -> list[EpochReport]:
        """Run runnable stages round by round until none is runnable or ``max_epochs`` stage epochs ran.

        Each round gives every runnable stage (in dataflow order) one epoch, so no stage starves;
        a stage whose every downstream connector already holds ``backpressure`` increments waits
        while others can run. The round's position is part of each epoch's commit, so a run that
        was killed (or stopped by ``max_epochs``) goes on exactly where it stopped. Only one
        runner works on a home at a time: another one gets :class:`cbp.errors.BusyError`.
        ``epoch_timeout`` (seconds) limits every stage epoch of this run, besides each stage's
        own ``timeout``: an epoch over its limit is cancelled and nothing of it is committed.
        """
        if epoch_timeout is not None and not 0 < epoch_timeout <= MAX_TIMEOUT:
            raise UsageError(
                f"the epoch timeout must be a positive number of seconds, at most a week ({MAX_TIMEOUT}), got "
                f"{epoch_timeout}",
                code="bad-option",
            )
        self.epochs.epoch_timeout = epoch_timeout
        reports: list[EpochReport] = []

        def took_over(holder: dict[str, Any]) -> None:
            self.notify(
                f"took over the home from a cbp run that was killed (pid {holder.get('pid')} on {holder.get('host')}: "
                f"{holder.get('command')})"
            )

        with self.home.runner_lock(command, took_over):
            self.epochs.run_info = {
                **self.home.holder_info(),
                "command": command,
            }  # kept in each epoch's history entry (cbp history)
            first = True
            while True:
                # The home's lock is held to plan each epoch and to commit it, never while its Spark
                # job runs (feeds land meanwhile; the next epoch reads them). The first hold also
                # starts the run, the last collects garbage: on S3 each hold is a lease taken and
                # given back, four requests.
                with self.journal.locked():
                    if first:
                        self.intentions.load()
                    # the scheduler's position moves on a copy, committed with the epoch it chooses
                    sched = copy.deepcopy(self.live.st.sched)
                    if first and not sched.ran:  # no epoch in this round yet: a new run starts a whole round
                        sched = Sched()
                    first = False
                    step = self._next_step(sched) if max_epochs is None or len(reports) < max_epochs else None
                    if step is None:
                        self.landing.collect_garbage()
                        break
                    planned = self.epochs.plan(step[0], step[1], intention=step[2], sched=sched)
                rep = self._run_planned(planned, on_start)
                if rep is None:
                    continue  # refused: planned again on the newest snapshot
                reports.append(rep)
                if on_epoch:
                    on_epoch(rep)
        return reports

    def _run_planned(self, planned: Planned, on_start: Callable[[str, int], None] | None) -> EpochReport | None:
        """Run a planned epoch's Spark job without the home's lock, then commit it under the lock
        on the newest snapshot; None if the commit was refused (:mod:`.commitcheck`)."""
        try:
            if on_start:
                on_start(planned.stage, planned.epoch)
        except BaseException:
            self.intentions.abandon_quietly(planned.stage, planned.epoch, planned.out_incs)
            raise
        job = self.epochs.run_job(planned)
        held = False
        try:
            with self.journal.locked():
                held = True
                done = self.epochs.commit(planned, *job)
        except BaseException:
            if not held:  # taking the lock, a recovery or the YAML's check failed: the epoch is dropped
                self.intentions.abandon_quietly(planned.stage, planned.epoch, planned.out_incs)
            raise
        if isinstance(done, Conflict):
            self.notify(
                f"stage '{done.stage}' epoch {done.epoch} was not committed: {done.reason} while its job ran; "
                "planning it again"
            )
            return None
        return done

    def _next_step(self, sc: Sched) -> tuple[str, Decision, Intention | None] | None:
        """Advance the scheduler's position ``sc`` (a copy, changed in place; ``live.st`` is not) to
        the next stage epoch to run: (stage, decision, intention to finish)."""
        while True:
            order = list(self.live.spec.order) if sc.pass_ == 0 else sc.held
            if sc.pos >= len(order):
                if not sc.ran and sc.pass_ == 0 and sc.held:
                    sc.pass_, sc.pos = 1, 0
                    continue
                quiet = not sc.ran
                sc.pass_, sc.pos, sc.ran, sc.held = 0, 0, False, []  # a new round
                if quiet:  # nothing ran in a whole round
                    return None
                continue
            stage = order[sc.pos]
            sc.pos += 1
            intention = self.intentions.interrupted.pop(stage, None)
            if intention is not None and self.intentions.fits(intention):
                self.notify(
                    f"finishing stage '{stage}' epoch {intention.epoch}, which was interrupted: re-running it with "
                    "the same inputs"
                )
                sc.ran = True
                return stage, intention.decision(), intention
            if sc.pass_ == 0 and self._backpressured(stage):
                sc.held.append(stage)
                continue
            d = self.decide(stage, keep_state=True)
            if d is None:
                continue
            sc.ran = True
            return stage, d, None

    def idle_reasons(self) -> dict[str, str]:
        """Why each stage is not runnable now (stages that are runnable are left out)."""
        from ..spec.deadends import dead_ends

        self.journal.refresh()
        dead = {d.stage: d.message for d in dead_ends(self.live.spec)}
        out: dict[str, str] = {}
        for s, spec in self.live.spec.stages.items():
            if self.decide(s) is not None:
                continue
            if s in dead:
                out[s] = dead[s]
                continue
            frames = self.frames(s)
            pending = {i.flow: len(self.live.st.connector(s, i.flow)) for i in spec.inputs}
            have = ", ".join(f"'{f}' {len(k)} complete of {pending[f]} pending" for f, k in frames.items())
            if not any(pending.values()):
                out[s] = "no new input on " + ", ".join(f"'{f}'" for f in pending)
            elif spec.runnable_name == "all" and not any(frames.values()):
                out[s] = (
                    f"no complete increment yet ({have}); a framed flow's increment completes when a later framing "
                    "key arrives or on 'cbp feed --close'"
                )
            elif spec.runnable_name == "all":
                waiting = [f for f, k in frames.items() if not k]
                out[s] = f"runnable 'all' waits for an increment on {', '.join(repr(f) for f in waiting)} ({have})"
            else:
                out[s] = f"its runnable '{spec.runnable_name}' says not runnable ({have})"
        return out
