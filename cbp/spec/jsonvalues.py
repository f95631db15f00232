"""JSON values in records: a JSON text parsed within bounds, a ``json`` field's value checked
without recursion (finite numbers, string keys, no lone surrogates, at most :data:`MAX_DEPTH`
levels), and :class:`RecordError`, what a record that does not fit says."""

from __future__ import annotations

import json
import math
import re
import reprlib
from typing import Any

MAX_DEPTH = 128  # arrays/objects nested in one record, the record itself counting as one (as serde_json)
SURROGATE = re.compile("[\ud800-\udfff]")  # only a lone \\uXXXX escape gets one into a str
_JSON_INT_BITS = 14_000  # ~4,200 digits: Python's int <-> text conversion limit is 4,300
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?', re.S)  # a JSON string (an unterminated one: to the end)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_repr = reprlib.Repr()
_repr.maxstring = _repr.maxother = 60


class RecordError(ValueError):
    """One record does not fit its schema; ``field`` names the field at fault; ``code`` is the
    :class:`cbp.errors.InputError` code it becomes (``bad-record``, or ``bad-diff`` for a bad ``_diff``)."""

    code = "bad-record"

    def __init__(self, field: str | None, message: str) -> None:
        self.field = field
        super().__init__(f"field '{field}': {message}" if field else message)


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for k, v in pairs:
        if k in seen:
            raise RecordError(k, "appears twice in the same JSON object")
        seen[k] = v
    return seen


def _no_constant(name: str) -> Any:
    raise RecordError(None, f"malformed JSON: {name} is not a JSON number")


def too_deep(text: str) -> bool:
    """Whether a JSON text nests arrays/objects deeper than MAX_DEPTH (brackets in strings do not count).

    Linear and at C/numpy speed whatever the text: strings are cut out by one regex pass (an
    unterminated one runs to the end), then the depth is a running sum over the brackets left.
    """
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return False  # the common case
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    if brackets.count("[") + brackets.count("{") <= MAX_DEPTH:
        return False
    import numpy as np

    depth = 0
    for start in range(0, len(brackets), 1 << 20):
        b = np.frombuffer(brackets[start : start + (1 << 20)].encode("ascii"), dtype=np.uint8)
        running = np.cumsum(np.where((b == 91) | (b == 123), 1, -1)) + depth  # '[' 91, '{' 123
        if int(running.max()) > MAX_DEPTH:
            return True
        depth = int(running[-1])
    return False


def surrogate_message(text: str, where: str = "") -> str:
    i = SURROGATE.search(text).start()  # type: ignore[union-attr]
    return (
        f"text{where} holds a lone surrogate \\u{ord(text[i]):04x} at character {i + 1} (a \\uXXXX escape "
        "without its pair), which is not Unicode; it cannot be stored"
    )


def check_json(field: str, value: Any) -> None:
    """A ``json`` field's value must be JSON (:class:`RecordError` naming ``field`` if not): checked
    without recursion, in bounded depth.

        >>> check_json("tags", {"a": [1, 2.5, None, "x"]})
        >>> try:
        ...     check_json("tags", {"a": [float("nan")]})
        ... except RecordError as e:
        ...     print(e)
        field 'tags': nan[a][0] is not a JSON number (JSON has no NaN or Infinity)
    """
    if _plainly_json(value, 2):
        return
    _walk_json(field, value)


_SCALAR_JSON = (type(None), bool, int, float)


def _plainly_json(v: Any, depth: int) -> bool:
    """Whether ``v`` is certainly JSON that :func:`_walk_json` accepts, found at C speed for the
    common shapes (lists of strings, flat objects); False means "walk it" (an error, or unsure)."""
    t = type(v)
    if t is str:
        return v.isascii() or SURROGATE.search(v) is None
    if t is dict:
        if depth > MAX_DEPTH:
            return False
        if not (all(type(k) is str for k in v) and _no_surrogate(v)):
            return False
        items: Any = v.values()
    elif t is list or t is tuple:
        if depth > MAX_DEPTH:
            return False
        items = v
    else:
        return _plain_scalar(v)
    kinds = set(map(type, items))
    if kinds == {str}:
        return _no_surrogate(items)
    if kinds <= {str, *_SCALAR_JSON}:
        return _no_surrogate([x for x in items if type(x) is str]) and all(
            _plain_scalar(x) for x in items if type(x) is not str
        )
    return all(_plainly_json(x, depth + 1) for x in items)


def _no_surrogate(texts: Any) -> bool:
    """Whether no str of ``texts`` (an iterable of exact strs) holds a surrogate: O(1) per ASCII str."""
    return all(map(str.isascii, texts)) or SURROGATE.search("".join(texts)) is None


def _plain_scalar(v: Any) -> bool:
    t = type(v)
    if v is None or t is bool:
        return True
    if t is int:
        n: int = v
        return n.bit_length() <= _JSON_INT_BITS
    if t is float:
        return math.isfinite(v)
    return False


def _walk_json(field: str, value: Any) -> None:
    """:func:`check_json`'s walk, which names what is wrong and where."""
    stack: list[tuple[Any, int, Any, Any]] = [
        (value, 2, None, None)
    ]  # value, depth (the record is 1), parent entry, key

    def path(entry: Any) -> str:
        keys = []
        while entry is not None and entry[2] is not None:
            keys.append(f"[{short(entry[3])}]")
            entry = entry[2]
        return "".join(reversed(keys))

    while stack:
        entry = stack.pop()
        v, depth = entry[0], entry[1]
        if v is None or v is True or v is False:
            continue
        t = type(v)
        if t is str:
            if SURROGATE.search(v):
                raise RecordError(field, surrogate_message(v, path(entry)))
        elif t is int:
            if v.bit_length() > _JSON_INT_BITS:
                raise RecordError(field, f"an integer{path(entry)} of more than 4,000 digits")
        elif t is float:
            if not math.isfinite(v):
                raise RecordError(field, f"{v}{path(entry)} is not a JSON number (JSON has no NaN or Infinity)")
        elif t is dict or t is list or t is tuple:
            if depth > MAX_DEPTH:
                raise RecordError(
                    field, f"nested deeper than {MAX_DEPTH} levels of arrays/objects (the record counts as one)"
                )
            if t is dict:
                for k, item in v.items():
                    if type(k) is not str:
                        raise RecordError(
                            field, f"object key {short(k)}{path(entry)} is not a string (JSON keys are strings)"
                        )
                    if SURROGATE.search(k):
                        raise RecordError(field, surrogate_message(k, path(entry)))
                    stack.append((item, depth + 1, entry, k))
            else:
                stack.extend((item, depth + 1, entry, i) for i, item in enumerate(v))
        else:
            raise RecordError(
                field,
                f"{t.__name__} value{path(entry)} is not JSON (use dicts, lists, strings, numbers, booleans or None)",
            )


def short(x: Any) -> str:
    """A name or value for a message: short strings as they are, anything else abridged (never recursing deeply)."""
    if type(x) is str:
        return x if len(x) <= 80 and not SURROGATE.search(x) else repr(x[:60])[1:-1] + ("..." if len(x) > 60 else "")
    return safe_repr(x)


def safe_repr(x: Any) -> str:
    """An abridged repr that cannot fail (a huge int, a user object whose __repr__ raises)."""
    try:
        return _repr.repr(x)
    except Exception:
        return f"an int of {x.bit_length()} bits" if type(x) is int else f"<{type(x).__name__}>"


def parse_json(line: str) -> Any:
    """One JSON text parsed (not validated); a text nested deeper than :data:`MAX_DEPTH` is refused before it
    is parsed."""
    if too_deep(line):
        raise RecordError(
            None, f"JSON nested deeper than {MAX_DEPTH} levels of arrays/objects (the record counts as one)"
        )
    try:
        value = json.loads(line, object_pairs_hook=_no_duplicate_keys, parse_constant=_no_constant)
    except RecordError:
        raise
    except json.JSONDecodeError as e:
        raise RecordError(None, f"malformed JSON: {e.msg.removesuffix(' at')} at column {e.colno}") from None
    except (ValueError, RecursionError) as e:  # e.g. an integer of more than 4,300 digits
        raise RecordError(None, f"malformed JSON: {str(e).split(';')[0]}") from None
    return value
