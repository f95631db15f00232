"""The ``cbp`` command line: feed, run, state, output here; validate, status, sql and the other
commands in :mod:`cbp.commands`, a module each.

    $ cbp validate flows/url_count.yaml
    $ cbp feed flows/url_count.yaml urls day1.jsonl
    $ cbp run flows/url_count.yaml --max-epochs 10
    $ cbp output flows/url_count.yaml counts --epoch 1
    $ cbp sql flows/url_count.yaml "SELECT * FROM url_count WHERE count > 1" --format table
    $ cbp --remote sc://127.0.0.1:15002 run flows/url_count.yaml   # on a Spark Connect server

Exit codes: 0 success, 2 a mistake in the YAML or the command, 3 bad input records, 4 user code
failed, 5 runtime/storage problem, 6 another ``cbp run`` holds the home.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from . import commands
from .commands import _follow
from .commands import _terminal as terminal
from .commands._open import open_pipeline
from .commands._terminal import json_line
from .errors import BusyError, CbpError, InputError, RuntimeStateError, SpecError, UsageError, UserCodeError, printable
from .spec import MAX_TIMEOUT

__all__ = ["main", "exit_code", "json_line"]

#: Exit code per error class (never per message): a time limit, a dying worker and any user-code
#: failure are UserCodeErrors (4), an unwritable home a RuntimeStateError (5); any other CbpError is 5.
_EXIT = {SpecError: 2, UsageError: 2, InputError: 3, UserCodeError: 4, RuntimeStateError: 5, BusyError: 6}


def exit_code(error: type[CbpError]) -> int:
    """The exit code of ``cbp`` failing with an error of class ``error`` (cbp/errorcodes/ lists them per code)."""
    return next((code for cls, code in _EXIT.items() if issubclass(error, cls)), 5)


#: The order of ``cbp --help``: these first, then the other commands of :mod:`cbp.commands` by name.
_FIRST = ("validate", "feed", "run", "state", "output", "sql", "status")


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="cbp", description="Continuous bulk processing on Apache Spark with Delta Lake state."
    )
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")
    adders: dict[str, Callable[[Any, Callable[[argparse.ArgumentParser], None]], None]] = {
        "feed": _feed_parser,
        "run": _run_parser,
        "state": _state_parser,
        "output": _output_parser,
    }
    adders.update((mod.NAME, mod.add_parser) for mod in commands.modules())
    for name in [*_FIRST, *sorted(set(adders) - set(_FIRST))]:
        adders[name](sub, _with_home)
    ap.add_argument(
        "--verbose", action="store_true", help="show Spark's and the JVM's own lines on stderr (hidden by default)"
    )
    ap.add_argument(
        "--remote",
        metavar="sc://HOST:PORT",
        help="run Spark on this Spark Connect server (no JVM here; as CBP_REMOTE, docs/howto/spark-connect.md)",
    )
    for p in sub.choices.values():  # also after the command: cbp run X.yaml --verbose
        p.add_argument("--verbose", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        p.add_argument("--remote", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    return ap


def _with_home(p: argparse.ArgumentParser) -> None:
    p.add_argument("flow_yaml", metavar="FLOW.yaml", help="the pipeline file")
    p.add_argument(
        "--home",
        help="where the pipeline keeps its state (default: state/<pipeline name> in the project, "
        "the directory holding the YAML's flows/ directory, else the YAML's own directory)",
    )


def _feed_parser(sub: Any, with_home: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser("feed", help="land one increment (JSON lines or Parquet) on an external input flow")
    with_home(p)
    p.add_argument("input_flow", metavar="INPUT_FLOW", help="an external flow of the pipeline (external: true)")
    p.add_argument(
        "file",
        metavar="FILE",
        nargs="?",
        help="JSON lines, one object per line ('-' for stdin), or a Parquet file (*.parquet); optional with --close",
    )
    p.add_argument("--close", action="store_true", help="close the flow's open frame: its increment becomes complete")
    p.add_argument(
        "--id",
        dest="feed_id",
        help="an id for this feed (e.g. the file's name): a feed with an id already landed lands nothing",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="land a feed with --id even if its records equal a pending feed landed without an id",
    )


def _run_parser(sub: Any, with_home: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser("run", help="run stage epochs until no stage is runnable")
    with_home(p)
    p.add_argument("--max-epochs", type=_positive, default=None, help="stop after this many stage epochs")
    p.add_argument("--mode", choices=["direct", "blackbox"], help="override the pipeline's execution mode")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.add_argument(
        "--epoch-timeout",
        type=_seconds,
        default=None,
        metavar="SECONDS",
        help="cancel a stage epoch that runs longer than this (exit 4, nothing committed); a stage's YAML "
        "'timeout' applies too",
    )
    p.add_argument("--upgrade", action="store_true", help="apply the plan of a changed YAML first (as 'cbp upgrade')")
    p.add_argument(
        "--no-sync",
        dest="sync",
        action="store_false",
        help="do not sync source flows (source: {delta: URI}) first: run on what 'cbp sync' landed already",
    )
    _follow.add_arguments(p)  # --follow, --min-interval, ...: continuous mode


def _state_parser(sub: Any, with_home: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser("state", help="print a stage's state records as JSON lines")
    with_home(p)
    p.add_argument("stage", metavar="STAGE", help="a stage with state")
    p.add_argument("--epoch", type=int, help="the state after this epoch of the stage (default: latest)")


def _output_parser(sub: Any, with_home: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser("output", help="print a flow's records as JSON lines")
    with_home(p)
    p.add_argument("flow", metavar="FLOW", help="any flow of the pipeline (external or a stage's output)")
    p.add_argument(
        "--epoch",
        type=int,
        help="only the records its producing stage wrote in that epoch (for an external flow: the Nth feed)",
    )
    p.add_argument(
        "--consolidated",
        action="store_true",
        help="the flow's contents as of --epoch (default: all): each record once, _diff summed, zeros dropped",
    )


def _seconds(text: str) -> float:
    try:
        n = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text!r}") from None
    if not n > 0 or n == float("inf"):
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds, got {text}")
    if n > MAX_TIMEOUT:
        raise argparse.ArgumentTypeError(
            f"must be at most {MAX_TIMEOUT} seconds (a week, as a stage's 'timeout:'), got {text}"
        )
    return n


def _positive(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {n}")
    return n


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``cbp`` console script; returns the exit code."""
    args = _parser().parse_args(argv)
    terminal.setup(args.verbose)
    try:
        _remote(args.remote)
        return _dispatch(args)
    except CbpError as e:
        for code, message in getattr(e, "problems", None) or [(e.code, str(e))]:  # a YAML's mistakes, one a line
            print(f"cbp {args.command}: error [{code}]: {printable(message)}", file=sys.stderr)
        return exit_code(type(e))
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        print(f"cbp {args.command}: interrupted; the next run continues from the last committed epoch", file=sys.stderr)
        return 130
    except OSError as e:  # e.g. a home on an object store that cannot be reached
        from .storage.objectstore import unreachable

        typed = unreachable(str(getattr(args, "home", None) or ""), e)
        if typed is not None:
            print(f"cbp {args.command}: error [home-unreachable]: {printable(str(typed))}", file=sys.stderr)
            return 5
        print(f"cbp {args.command}: error: {type(e).__name__}: {printable(str(e))}", file=sys.stderr)
        return 5
    finally:
        sys.stdout.flush()


def _remote(url: str | None) -> None:
    """``--remote URL``: this process's Spark is a Spark Connect session to ``url`` (``CBP_REMOTE``)."""
    if url is None:
        return
    if not url.startswith("sc://"):
        raise UsageError(f"--remote {url!r}: give a Spark Connect URL, sc://HOST:PORT", code="usage")
    os.environ["CBP_REMOTE"] = url


def _dispatch(args: argparse.Namespace) -> int:
    for mod in commands.modules():
        if mod.NAME == args.command:
            return int(mod.run(args))
    # feed and run write: the note on a new home is for the commands that read
    pipe = open_pipeline(args, note_if_new=args.command not in ("feed", "run"))
    if args.command == "feed":
        return _feed(pipe, args)
    if args.command == "run":
        return _follow.run(pipe, args, _run)
    if args.command == "state":
        for rec in pipe.state(args.stage, args.epoch):
            print(json_line(rec))
        return 0
    if args.command == "output":
        for rec in pipe.output(args.flow, args.epoch, consolidated=args.consolidated):
            print(json_line(rec))
        return 0
    raise AssertionError(args.command)


def _feed(pipe: Any, args: argparse.Namespace) -> int:
    if args.file is None and not args.close:
        raise UsageError("give FILE (.jsonl or .parquet; or --close to close the open frame)", code="usage")
    if args.file is None:
        landed = pipe.close(args.input_flow)
    else:
        src = "/dev/stdin" if args.file == "-" else args.file
        landed = pipe.feed(args.input_flow, src, close=args.close, feed_id=args.feed_id, force=args.force)
    # the feed's number is what 'cbp output FLOW --epoch N' takes; an empty feed has one too
    what = f"already landed (--id {args.feed_id}), nothing new" if landed.repeated else f"{landed.records} record(s)"
    incs = f"increment(s) {', '.join(map(str, landed))}" if landed else "no increment"
    print(
        f"landed on '{args.input_flow}' as feed {landed.feed} (output --epoch {landed.feed}): {what}, {incs}"
        f"{' (closed)' if args.close else ''}"
    )
    return 0


def _run(pipe: Any, args: argparse.Namespace) -> int:
    # py4j logs Ctrl-C and lost connections through the root logger as tracebacks; cbp reports
    # failures itself (see main), so the CLI keeps only critical library logging.
    logging.getLogger().setLevel(logging.CRITICAL)
    t0 = time.perf_counter()
    tty = sys.stderr.isatty()
    display = terminal.EpochDisplay() if tty and not args.quiet else None  # a progress bar for an epoch over 2 s

    def start(stage: str, epoch: int) -> None:
        if not args.quiet and not tty:
            print(f"... running {stage} epoch {epoch}", file=sys.stderr, flush=True)

    def done(rep: Any) -> None:
        if display is not None:
            display.done(rep.stage, rep.epoch)
        print(rep.line(), flush=True)

    command = (
        "cbp " + " ".join(sys.argv[1:]) if sys.argv and sys.argv[0].endswith("cbp") else f"cbp run {args.flow_yaml}"
    )
    reports = pipe.run(
        args.max_epochs,
        on_epoch=done,
        on_start=start,
        command=command,
        epoch_timeout=args.epoch_timeout,
        upgrade=args.upgrade,
        progress=display.progress if display is not None else None,
        sync=args.sync,
    )
    print(
        f"{len(reports)} stage epoch(s) in {time.perf_counter() - t0:.1f}s; "
        + (
            "quiescent: no stage is runnable"
            if args.max_epochs is None or len(reports) < args.max_epochs
            else f"stopped at --max-epochs {args.max_epochs}"
        )
    )
    if not reports:
        for stage, why in pipe.idle_reasons().items():
            print(f"  stage '{stage}' did not run: {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
