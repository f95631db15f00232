"""cbp: continuous bulk processing on Apache Spark with Delta Lake state.

The public API. A pipeline is a YAML file of flows and stages (see :mod:`cbp.spec`), with
translators as plain Python functions ``translate(key, state, *inputs, out)``.

Example::

    import cbp
    p = cbp.load("flows/url_count.yaml", home="/tmp/cbp-demo")
    p.feed("urls", [{"url": "http://a/"}]); p.run()

``import cbp`` loads nothing but this module: each public name is imported from its module the
first time it is used (PEP 562), so a translator's ``from cbp import Emitter`` loads
:mod:`cbp.model` alone, and a Spark worker never loads the controller. The crawl-queue crawler is
an application on top of this API, in its own package :mod:`cbp_crawl`; Airflow DAGs are made by
:mod:`cbp.airflow.dagfactory` (it needs the ``airflow`` extra).
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"  # cbp.storage writes it into Delta commits

if TYPE_CHECKING:  # what checkers see; at run time each name is loaded by __getattr__
    from .controller import EpochRecord, EpochReport, SyncReport
    from .controller.feeds import DuplicateFeedWarning
    from .controller.plan import Change, Plan
    from .controller.rewind import RewindReport
    from .engine.driver.progress import Progress
    from .errors import BusyError, CbpError, InputError, RuntimeStateError, SpecError, UsageError, UserCodeError
    from .model import ALL, Broadcast, Emitter, Multicast, Writer, broadcast, multicast, runnable_all, runnable_any
    from .pipeline import Pipeline, load
    from .spec import PipelineSpec, load_spec

#: Each public name and the module (relative to this package) that defines it.
_HOME: dict[str, str] = {
    "load": ".pipeline",
    "Pipeline": ".pipeline",
    "load_spec": ".spec",
    "PipelineSpec": ".spec",
    "EpochReport": ".controller",
    "EpochRecord": ".controller",
    "SyncReport": ".controller",
    "Plan": ".controller.plan",
    "Change": ".controller.plan",
    "Progress": ".engine.driver.progress",
    "RewindReport": ".controller.rewind",
    "DuplicateFeedWarning": ".controller.feeds",
    "Emitter": ".model",
    "Writer": ".model",
    "runnable_all": ".model",
    "runnable_any": ".model",
    "ALL": ".model",
    "broadcast": ".model",
    "multicast": ".model",
    "Broadcast": ".model",
    "Multicast": ".model",
    "CbpError": ".errors",
    "SpecError": ".errors",
    "InputError": ".errors",
    "UsageError": ".errors",
    "UserCodeError": ".errors",
    "RuntimeStateError": ".errors",
    "BusyError": ".errors",
}

__all__ = [
    "load",
    "Pipeline",
    "load_spec",
    "PipelineSpec",
    "EpochReport",
    "EpochRecord",
    "Plan",
    "Change",
    "Progress",
    "SyncReport",
    "Emitter",
    "Writer",
    "runnable_all",
    "runnable_any",
    "ALL",
    "broadcast",
    "multicast",
    "Broadcast",
    "Multicast",
    "RewindReport",
    "DuplicateFeedWarning",
    "CbpError",
    "SpecError",
    "InputError",
    "UsageError",
    "UserCodeError",
    "RuntimeStateError",
    "BusyError",
]  # the names of _HOME (tests/test_imports.py)


def __getattr__(name: str) -> Any:
    """A public name, imported from its module on first use (then cached in this module); a
    subpackage or module (``cbp.spec``) is imported as ``import cbp.spec`` would."""
    where = _HOME.get(name)
    if where is not None:
        value = getattr(importlib.import_module(where, __name__), name)
    elif not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        value = importlib.import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOME))
