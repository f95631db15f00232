"""What an entry of the catalog is: a :class:`Code` raised with error classes and exit codes, a
:class:`Reported` code only printed; and :func:`_c`, the short way the code modules write one."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import BusyError, CbpError, InputError, RuntimeStateError, SpecError, UsageError, UserCodeError

_Classes = type[CbpError] | tuple[type[CbpError], ...]
_Exits = int | tuple[int, ...]


@dataclass(frozen=True)
class Code:
    """One error code: raised as ``classes`` (in that order, ``cbp`` exits with ``exits``)."""

    code: str
    classes: tuple[type[CbpError], ...]
    exits: tuple[int, ...]
    meaning: str
    hint: str


def _c(code: str, classes: _Classes, exits: _Exits, meaning: str, hint: str) -> Code:
    """A :class:`Code` entry; one class and exit code may be given bare."""
    cls = classes if isinstance(classes, tuple) else (classes,)
    ex = exits if isinstance(exits, tuple) else (exits,)
    return Code(code, cls, ex, meaning, hint)


@dataclass(frozen=True)
class Reported:
    """A code cbp reports without raising it (a warning, a refused plan line, a rejected inbox file)."""

    code: str
    where: str
    meaning: str
    hint: str


S, U, INP, UC, RS, B = SpecError, UsageError, InputError, UserCodeError, RuntimeStateError, BusyError
