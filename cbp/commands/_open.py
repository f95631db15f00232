"""Internal: the pipeline a command works on, opened as every command opens it."""

from __future__ import annotations

import argparse
import sys
from typing import Any

__all__ = ["open_pipeline"]


def open_pipeline(args: argparse.Namespace, *, note_if_new: bool = True) -> Any:
    """The pipeline of ``args.flow_yaml`` at ``args.home`` (``args.mode``, if given), its notices
    printed on stderr as ``cbp COMMAND: ...``; with ``note_if_new``, a note when nothing has been fed
    or run in the home yet (a reader's ``--home`` may be wrong)."""
    from ..pipeline import Pipeline

    pipe = Pipeline(args.flow_yaml, args.home, mode=getattr(args, "mode", None))
    pipe.parts.notice.listener = lambda message: print(f"cbp {args.command}: {message}", file=sys.stderr, flush=True)
    if note_if_new and pipe.is_new:
        print(
            f"cbp {args.command}: note: nothing has been fed or run in {pipe.home.location} yet; is --home right?",
            file=sys.stderr,
        )
    return pipe
