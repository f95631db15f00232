"""Internal: ``cbp`` subcommands that live in modules of their own (the older ones are in :mod:`cbp.cli`).

Each module here defines ``NAME`` (the subcommand), ``add_parser(sub, with_home)`` (adds its
``argparse`` subparser; ``with_home(p)`` adds the ``FLOW.yaml`` and ``--home`` arguments) and
``run(args) -> int`` (the exit code; errors are raised as :class:`cbp.errors.CbpError`, which
:func:`cbp.cli.main` prints with their code). They are found by :func:`modules`, so a new command
is one new file. An application on top of cbp adds a subcommand the same way from its own package,
by an entry point in the group ``cbp.commands`` naming such a module (the crawl application's
``cbp crawl`` is ``cbp_crawl.command``, declared in pyproject.toml); cbp imports no application.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import pkgutil
from types import ModuleType

#: The entry-point group of command modules that applications add.
GROUP = "cbp.commands"

__all__ = ["modules"]


def modules() -> list[ModuleType]:
    """The command modules of this package, then those applications add (entry points of
    :data:`GROUP`), each in name order; an application's command never replaces cbp's own."""
    found = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if not info.name.startswith("_"):
            found.append(importlib.import_module(f"{__name__}.{info.name}"))
    names = {m.NAME for m in found}
    for ep in sorted(importlib.metadata.entry_points(group=GROUP), key=lambda e: e.name):
        if ep.name not in names:
            names.add(ep.name)
            found.append(ep.load())
    return found
