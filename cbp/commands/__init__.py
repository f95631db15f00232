"""Internal: ``cbp`` subcommands that live in modules of their own (the older ones are in :mod:`cbp.cli`).

Each module here defines ``NAME`` (the subcommand), ``add_parser(sub, with_home)`` (adds its
``argparse`` subparser; ``with_home(p)`` adds the ``FLOW.yaml`` and ``--home`` arguments) and
``run(args) -> int`` (the exit code; errors are raised as :class:`cbp.errors.CbpError`, which
:func:`cbp.cli.main` prints with their code). They are found by :func:`modules`, so a new command
is one new file.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

__all__ = ["modules"]


def modules() -> list[ModuleType]:
    """The command modules of this package, in name order."""
    found = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if not info.name.startswith("_"):
            found.append(importlib.import_module(f"{__name__}.{info.name}"))
    return found
