"""What every part of compiling a pipeline YAML uses: where a mistake is (:meth:`Context.fail`
names the file and line), and the checks of a schema, of params, and of the user functions a stage
names (``module:function``, imported and checked against how cbp calls them)."""

from __future__ import annotations

import inspect
import json
import os
import re
from collections.abc import Callable
from typing import Any

from ..errors import SpecError
from .fielddefs import field_definition
from .objects import KeyFunction
from .raw import RawPipeline
from .resolve import is_import_path, resolve_callable
from .schema import DIFF, FieldType, RecordSchema

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,99}\Z")  # at most 100 characters: names become file and directory names
_KEY_CALL = "f(record)"  # how route_by / order_by functions are called


class Context:
    """A pipeline file being compiled: its path, its validated YAML and the line of each key."""

    def __init__(self, path: str, raw: RawPipeline, lines: dict[tuple[str, ...], int]) -> None:
        self.path, self.raw, self.lines = path, raw, lines
        self.base = os.path.dirname(os.path.abspath(path))

    def fail(self, where: tuple[str, ...], message: str, code: str) -> SpecError:
        line = None
        for n in range(len(where), -1, -1):
            line = self.lines.get(where[:n])
            if line is not None:
                break
        return SpecError(self.path, (f"line {line}: " if line else "") + message, code=code)

    def schema(self, fields: dict[str, Any], where: tuple[str, ...], what: str) -> RecordSchema:
        if not fields:
            raise self.fail(where, f"{what}: the schema has no fields", "empty-schema")
        out: dict[str, FieldType] = {}
        defaults: dict[str, Any] = {}
        for name, t in fields.items():
            if name == DIFF:
                raise self.fail(
                    where,
                    f"{what}: field name '{DIFF}' is reserved: it is every record's multiplicity (+1 when absent, "
                    "-1 a retraction); cbp adds it, a schema does not declare it",
                    "reserved-name",
                )
            if not _NAME.match(str(name)) or str(name).startswith("_"):
                raise self.fail(
                    where, f"{what}: field name '{name}' must be an identifier not starting with '_'", "bad-name"
                )
            try:
                out[name], has, value = field_definition(name, t)
            except ValueError as e:
                raise self.fail(where, f"{what}: field '{name}': {e}", "bad-type") from None
            if has:
                defaults[name] = value
        return RecordSchema(out, defaults)

    def key_function(
        self, text: str | None, schema: RecordSchema, where: tuple[str, ...], what: str
    ) -> KeyFunction | None:
        if text is None:
            return None
        if is_import_path(text):
            return KeyFunction(text, fn=self.resolve(text, where, what))
        if text not in schema.fields:
            raise self.fail(
                where,
                f"{what}: '{text}' is not a field of the flow (fields: {', '.join(schema.fields)}) nor an import path "
                f"'module:function'",
                "unknown-field",
            )
        return KeyFunction(text, field=text)

    def resolve(
        self, text: str, where: tuple[str, ...], what: str, call: tuple[int, str] = (1, _KEY_CALL)
    ) -> Callable[..., Any]:
        """Import ``module:function`` and check it can be called as cbp will call it.

        ``call`` is (number of positional arguments, how the call looks); a translator also gets ``out=``.
        """
        try:
            fn = resolve_callable(text, self.base)
        except ValueError as e:
            raise self.fail(where, f"{what}: {e}", "bad-import") from None
        nargs, shape = call
        if shape != _KEY_CALL and (
            inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn) or inspect.iscoroutinefunction(fn)
        ):
            raise self.fail(
                where,
                f"{what} '{text}' is a generator or async function; cbp calls it as {shape} and uses what it "
                + ("writes with out.<flow>.write(...)" if shape.startswith("translate") else "returns"),
                "bad-signature",
            )
        try:
            sig = inspect.signature(fn)
        except (TypeError, ValueError):
            return fn  # a builtin or C function: nothing to check
        try:
            if shape.startswith("translate"):
                sig.bind(*range(nargs), out=None)
            else:
                sig.bind(*range(nargs))
        except TypeError as e:
            raise self.fail(where, f"{what} '{text}{sig}' cannot be called as {shape}: {e}", "bad-signature") from None
        return fn

    def check_params(self, params: dict[str, Any], where: tuple[str, ...], what: str) -> None:
        """Params reach translators as JSON-like values: what JSON cannot hold as it is, is refused (``bad-params``)."""
        try:
            if json.loads(json.dumps(params, allow_nan=False)) != params:
                raise ValueError("a mapping key that is not a string")
        except (TypeError, ValueError) as e:
            raise self.fail(
                where,
                f"{what}: params must be plain YAML values: strings, finite numbers, "
                f"booleans, null, lists and mappings with string keys ({e})",
                "bad-params",
            ) from None
