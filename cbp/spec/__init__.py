"""One strict loader for pipeline YAML files in ``flows/``.

:func:`load_spec` reads a file into frozen, validated objects and reports every mistake with
the file, the line, the stage or flow, and what is wrong, before any Spark job starts.

    >>> spec = load_spec("flows/url_count.yaml")
    >>> spec.stages["url_count"].inputs[0].flow
    'urls'

A file looks like::

    pipeline: url_count
    mode: direct                 # or blackbox (paper 001 §4.4, the baseline)
    params: {}                   # every stage's params start from these (a stage's own win)
    flows:
      urls:   {external: true, schema: {url: string}}
      counts: {schema: {url: string, count: int}}
    stages:
      url_count:
        translator: url_count:count_urls    # module beside the YAML, or installed
        batch: false                        # true: a vectorised translator (Arrow tables per batch of keys)
        partitions: 4
        inputs:
          - {flow: urls, route_by: url}     # a field name, module:function, or ALL (broadcast)
        state: {schema: {url: string, count: int}, grouping: inner}
        outputs: [counts]
        runnable: all                       # all | any | module:function
        params: {}
"""

from __future__ import annotations

import os

from pydantic import ValidationError

from ..errors import SpecError
from .compiler import Compiler
from .loader import load_yaml
from .messages import pydantic_messages
from .objects import BROADCAST, STATE, FlowSpec, FrameFunction, InputSpec, KeyFunction, PipelineSpec, StageSpec
from .problems import combined
from .raw import MAX_TIMEOUT, RawPipeline

__all__ = [
    "MAX_TIMEOUT",
    "load_spec",
    "load_yaml",
    "PipelineSpec",
    "StageSpec",
    "FlowSpec",
    "InputSpec",
    "KeyFunction",
    "FrameFunction",
    "BROADCAST",
    "STATE",
]


def load_spec(path: str | os.PathLike[str], text: str | None = None, *, ansi: bool | None = None) -> PipelineSpec:
    """Read, validate and resolve a pipeline YAML file (or ``text`` as if it were that file); raise
    :class:`SpecError` on any mistake. ``ansi``: the SQL semantics its views are compiled with
    (``spark.sql.ansi.enabled``; None: ``CBP_SPARK_CONF``'s, else Spark's default, true)."""
    path = os.fspath(path)
    data, lines = load_yaml(path, text)
    if not isinstance(data, dict):
        raise SpecError(
            path, "line 1: the file must be a mapping with 'pipeline', 'flows' and 'stages'", code="invalid-spec"
        )
    try:
        raw = RawPipeline.model_validate(data)
    except ValidationError as e:
        errors = [SpecError(path, m, code="invalid-spec") for m in pydantic_messages(e, lines)]
        raise combined(path, errors) from None
    if not raw.views and not raw.sql:
        return Compiler(path, raw, lines).compile()
    from ..views import expand_views, route_views  # a pipeline with views: their flows and stages added
    from ..views.mode import semantics, session_ansi
    from ..views.sqlfiles import read_sql_files  # and the views of its .sql files

    with semantics(session_ansi() if ansi is None else ansi):
        raw, routes = expand_views(path, raw, lines, read_sql_files(path, list(raw.sql), raw.views))
    spec: PipelineSpec = route_views(Compiler(path, raw, lines).compile(), routes)
    return spec
