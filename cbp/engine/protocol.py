"""What a task of a stage epoch reports to the driver.

    >>> r = TaskResult(part=1, stats={"in": 3})
    >>> r.part, r.index, r.state_adds
    (1, None, [])
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

__all__ = ["TaskResult"]


@dataclass
class TaskResult:
    """One task's result: the files it wrote (future Delta add actions) and what it did.

    ``state_adds``/``state_removes`` are files of the stage's state table, ``outputs`` maps each
    output flow to its new files, ``index`` is the partition's new index file (direct mode).
    """

    part: int
    index: Optional[str] = None
    state_adds: list[dict[str, Any]] = field(default_factory=list)
    state_removes: list[dict[str, Any]] = field(default_factory=list)
    outputs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)
