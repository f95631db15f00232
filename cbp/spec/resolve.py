"""Resolve import paths (``module:function``) of user functions named in a pipeline YAML.

Modules found beside the YAML file (or below its directory) are shipped to Spark executors by
value, so a user's translators need not be installed as a package.

    >>> import os
    >>> resolve_callable("os.path:join", base_dir=".") is os.path.join
    True
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["resolve_callable", "is_import_path", "safe_str"]


def is_import_path(text: str) -> bool:
    """An import path has a ``:`` between module and attribute (``pkg.mod:fn``)."""
    return ":" in text


def resolve_callable(path: str, base_dir: str) -> Callable[..., Any]:
    """Import ``module:attr`` (``module`` looked up beside the YAML first) and return the callable.

    Raises ``ValueError`` with what is wrong: bad syntax, module not found, attribute missing,
    or not callable.
    """
    mod_name, sep, attr = path.partition(":")
    if not sep or not mod_name or not attr:
        raise ValueError(f"import path '{path}' must look like 'module:function'")
    base = os.path.abspath(base_dir)
    try:
        with _beside(base, mod_name):
            module = importlib.import_module(mod_name)
    except ModuleNotFoundError as e:
        raise ValueError(
            f"import path '{path}': module '{mod_name}' not found ({e}); looked beside the YAML in {base} and "
            "on sys.path"
        ) from None
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # noqa: BLE001 - the user's module failed while importing (or called sys.exit)
        raise ValueError(
            f"import path '{path}': importing module '{mod_name}' raised {type(e).__name__}: {safe_str(e)}"
        ) from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"import path '{path}': module '{mod_name}' has no attribute '{attr}'")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"import path '{path}' names a {type(obj).__name__}, not a function")
    _ship_by_value(module, base)
    fn: Callable[..., Any] = obj
    return fn


#: Directories of pipeline YAMLs whose modules were imported (their modules must not stand in for another's).
_BASES: set[str] = set()


@contextmanager
def _beside(base: str, mod_name: str) -> Iterator[None]:
    """Import with ``base`` first on ``sys.path``, then move it last (a module beside one YAML must not
    shadow anything the process imports later, and a translator's own later ``import helper`` still
    finds its helper), after dropping from ``sys.modules`` the modules of another YAML's directory
    that ``base`` has a module of the same name for (two pipelines with a ``tr.py`` each get their own),
    and any other process's module of ``mod_name``'s own name (a same-named module the user's code loaded
    from elsewhere: the YAML names the one beside it)."""
    mine = {n[:-3] for n in _listdir(base) if n.endswith(".py")} | {
        n for n in _listdir(base) if os.path.isdir(os.path.join(base, n))
    }
    mine -= {
        __name__.partition(".")[0],
        *getattr(sys, "stdlib_module_names", ()),
    }  # never cbp itself, nor the standard library
    top = mod_name.partition(".")[0]
    for name, mod in list(sys.modules.items()):
        if name.partition(".")[0] not in mine:
            continue
        file = getattr(mod, "__file__", None)
        if not file:
            continue
        home = _package_base(file, name)
        if home != base and (home in _BASES or name.partition(".")[0] == top):
            del sys.modules[name]  # the module named in the YAML is the one beside it, whoever loaded another
    sys.path.insert(0, base)
    try:
        yield
    finally:
        _BASES.add(base)
        while base in sys.path:
            sys.path.remove(base)
        sys.path.append(base)


def _listdir(d: str) -> list[str]:
    try:
        return os.listdir(d)
    except OSError:
        return []


def _package_base(file: str, name: str) -> str:
    """The directory a (sub)module ``name`` loaded from ``file`` was found in (what was on ``sys.path``)."""
    path = os.path.abspath(file)
    depth = name.count(".") + (1 if path.endswith("__init__.py") else 0)
    for _ in range(depth + 1):
        path = os.path.dirname(path)
    return path


def safe_str(e: BaseException) -> str:
    """``str(e)``, or a stand-in when the exception's own ``__str__`` fails."""
    try:
        return str(e)
    except Exception:  # noqa: BLE001 - a user's exception class
        return f"<{type(e).__name__}: its message could not be shown>"


def _ship_by_value(module: Any, base: str) -> None:
    """Pickle functions of modules that live beside the YAML by value for Spark's workers.

    Executors need not see the YAML's directory (on a cluster their working directory is the
    worker's): the module, and every module it imported from beside the YAML (a helper module next
    to the translators), travel inside the pickled task instead of being imported there. A top-level
    module found elsewhere, in a directory that is not part of the Python installation (one the user's
    process put on ``sys.path``), travels by value too, on its own.
    """
    file = getattr(module, "__file__", None)
    if not file:
        return
    from pyspark import cloudpickle

    if not os.path.abspath(file).startswith(base + os.sep):
        if _lives_in(module, os.path.dirname(os.path.abspath(file))) and not _installed(file):
            try:  # a top-level module from a directory the process put on sys.path itself, not installed:
                cloudpickle.register_pickle_by_value(module)  # type: ignore[no-untyped-call]
            except ValueError:  # a worker could not import it by name either (its helpers it must find itself)
                pass
        return
    beside = [m for m in list(sys.modules.values()) if _lives_in(m, base)]
    for mod in [module, *beside]:
        try:
            cloudpickle.register_pickle_by_value(mod)  # type: ignore[no-untyped-call]  # pyspark leaves it untyped
        except ValueError:
            pass  # already registered, or a package-level module cloudpickle does not ship


def _lives_in(module: Any, base: str) -> bool:
    """Whether a loaded module is a top-level module whose file lies directly in ``base`` (a user's
    helper next to the translators; packages such as cbp itself, even in that directory, are not)."""
    file: str | None = getattr(module, "__file__", None)
    name: str = getattr(module, "__name__", "") or ""
    if not file or "." in name:
        return False
    return os.path.dirname(os.path.abspath(file)) == base and not file.endswith("__init__.py")


def _installed(file: str) -> bool:
    """Whether ``file`` lies where every Python of this installation finds it (the interpreter's prefixes and
    site-packages): a module there is imported by name on a worker, not shipped."""
    import site

    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, *site.getsitepackages(), site.getusersitepackages()}
    path = os.path.abspath(file)
    return any(path.startswith(os.path.abspath(r) + os.sep) for r in roots if r)
