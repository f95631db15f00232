"""The bounded YAML reader behind :func:`cbp.spec.load_spec`: one document, bounded work.

A pipeline YAML comes from people: it is read with limits on size, nesting and nodes (aliases
expanded, so an alias bomb stops early), without recursive aliases or duplicate keys, and every
refusal is a :class:`cbp.errors.SpecError` naming the file and line.
"""

from __future__ import annotations

from typing import Any

import yaml

from ..errors import SpecError

__all__ = ["load_yaml", "MAX_YAML_BYTES", "MAX_YAML_DEPTH", "MAX_YAML_NODES"]

MAX_YAML_BYTES = 64 << 10  # a pipeline file is a few KiB; PyYAML reads ~100 KiB/s at worst
MAX_YAML_DEPTH = 32  # mappings/sequences nested in the file, aliases expanded
MAX_YAML_NODES = 100_000  # nodes of the document with every alias expanded (an alias bomb stops here)
_NL = b"\n"


def load_yaml(path: str, text: str | None = None) -> tuple[Any, dict[tuple[str, ...], int]]:
    """Read one YAML document with bounded work; return it and the line of each key path.

    The file is at most :data:`MAX_YAML_BYTES` of UTF-8; nesting at most :data:`MAX_YAML_DEPTH`
    deep and :data:`MAX_YAML_NODES` nodes, both counted with aliases expanded; a recursive alias
    and a key given twice in a mapping are refused. Every refusal is a :class:`SpecError` naming
    the line.
    """
    try:
        if text is not None:  # the text a home recorded (cbp.controller.upgrade), read as if it were the file
            raw = text.encode("utf-8")[: MAX_YAML_BYTES + 1]
        else:
            with open(path, "rb") as fh:
                raw = fh.read(MAX_YAML_BYTES + 1)
    except OSError as e:
        raise SpecError(path, f"cannot read the file: {e.strerror or e}", code="unreadable") from None
    if len(raw) > MAX_YAML_BYTES:
        raise SpecError(
            path,
            f"line {raw[:MAX_YAML_BYTES].count(_NL) + 1}: the file is longer than {MAX_YAML_BYTES >> 10} KiB, "
            "the most cbp reads as a pipeline (keep data in increments, not in the YAML)",
            code="yaml-too-big",
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SpecError(
            path,
            f"line {raw[: e.start].count(_NL) + 1}: not UTF-8 text ({e.reason} at byte {e.start + 1})",
            code="yaml",
        ) from None
    loader = None
    try:
        loader = _BoundedLoader(text)
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        what = getattr(e, "problem", None) or str(e)
        if mark is not None:
            line = mark.line + 1
        elif isinstance(e, yaml.reader.ReaderError):
            line = text.count("\n", 0, e.position) + 1
            what = f"character #x{e.character:04x} is not allowed in YAML" if isinstance(e.character, int) else e.reason
        else:
            line = None
        where = f"line {line}: " if line else ""
        code = getattr(e, "code", "yaml")
        raise SpecError(
            path, f"{where}{what}" if code != "yaml" else f"{where}not valid YAML: {what}", code=code
        ) from None
    finally:
        if loader is not None:
            loader.dispose()
    return data, _line_index(node)


class _YamlRefused(yaml.MarkedYAMLError):
    """Valid YAML that cbp does not read: too deep, too big once aliases are expanded, recursive, a duplicate key."""

    def __init__(self, code: str, problem: str, mark: Any) -> None:
        super().__init__(problem=problem, problem_mark=mark)
        self.code = code


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's SafeLoader with the checks of :func:`load_yaml`, made while the document is composed,
    so no step (composing, constructing, validating, indexing lines) can recurse or expand without bound."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0  # collections open around the node being composed
        self._nodes = 0  # nodes so far, aliases expanded
        self._open: set[str] = set()  # anchors of the collections being composed
        self._size: dict[int, int] = {}  # id(node) -> nodes in it, aliases expanded
        self._height: dict[int, int] = {}  # id(node) -> collections nested in it, itself included

    def _count(self, n: int, mark: Any) -> None:
        self._nodes += n
        if self._nodes > MAX_YAML_NODES:
            raise _YamlRefused(
                "yaml-too-big",
                f"the document has more than {MAX_YAML_NODES:,} nodes with its aliases expanded (an alias bomb?)",
                mark,
            )

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()  # type: ignore[no-untyped-call]  # types-PyYAML leaves it untyped
        if isinstance(event, yaml.AliasEvent):
            target = self.anchors.get(event.anchor)
            if target is not None:
                if event.anchor in self._open:
                    raise _YamlRefused(
                        "yaml-recursive",
                        f"alias *{event.anchor} is inside the node &{event.anchor} it refers to: "
                        "recursive structures are not allowed",
                        event.start_mark,
                    )
                self._count(self._size[id(target)], event.start_mark)
                if self._depth + self._height[id(target)] > MAX_YAML_DEPTH:
                    raise _YamlRefused(
                        "yaml-too-deep",
                        f"alias *{event.anchor} nests mappings/sequences deeper than {MAX_YAML_DEPTH} levels",
                        event.start_mark,
                    )
            return super().compose_node(parent, index)
        collection = isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent))
        if collection:
            if self._depth >= MAX_YAML_DEPTH:
                raise _YamlRefused(
                    "yaml-too-deep", f"mappings/sequences nested deeper than {MAX_YAML_DEPTH} levels", event.start_mark
                )
            self._depth += 1
        before = self._nodes
        self._count(1, event.start_mark)
        anchor = getattr(event, "anchor", None)
        if anchor is not None:
            self._open.add(anchor)
        try:
            node = super().compose_node(parent, index)
        finally:
            if anchor is not None:
                self._open.discard(anchor)
            if collection:
                self._depth -= 1
        self._size[id(node)] = self._nodes - before
        if isinstance(node, yaml.MappingNode):
            self._check_keys(node)
            children = [x for pair in node.value for x in pair]
        else:
            children = node.value if isinstance(node, yaml.SequenceNode) else []
        self._height[id(node)] = int(collection) + max((self._height[id(c)] for c in children), default=0)
        return node

    def _check_keys(self, node: yaml.MappingNode) -> None:
        """A key given twice in one mapping is refused (PyYAML keeps the last); merge keys (<<) may be overridden."""
        seen: dict[Any, Any] = {}
        for key, _ in node.value:
            if not isinstance(key, yaml.ScalarNode):
                continue  # a collection as a key is refused when constructed (unhashable)
            try:
                value = self.yaml_constructors[key.tag](self, key) if key.tag in self.yaml_constructors else key.value
                hash(value)
            except Exception:
                value = (key.tag, key.value)
            first = seen.get(value)
            if first is not None:
                raise _YamlRefused(
                    "duplicate-key",
                    f"key '{key.value[:80]}' appears twice in this mapping (first on line "
                    f"{first.start_mark.line + 1}); cbp does not pick one",
                    key.start_mark,
                )
            seen[value] = key

    def construct_object(self, node: Any, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except yaml.YAMLError:
            raise
        except (
            ValueError,
            TypeError,
            KeyError,
            AttributeError,
            OverflowError,
            IndexError,
        ) as e:  # e.g. !!int abc, 2001-13-01
            what = repr(node.value[:60]) if isinstance(node, yaml.ScalarNode) else "this node"
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot read {what} as {node.tag}: {e}", node.start_mark
            ) from None


def _line_index(node: Any) -> dict[tuple[str, ...], int]:
    """Map key paths (``('stages', 'count', 'inputs')``) to 1-based line numbers."""
    out: dict[tuple[str, ...], int] = {}

    def walk(n: Any, path: tuple[str, ...]) -> None:
        if isinstance(n, yaml.MappingNode):
            for k, v in n.value:
                p = path + (str(k.value),)
                out[p] = k.start_mark.line + 1
                walk(v, p)
        elif isinstance(n, yaml.SequenceNode):
            for v in n.value:
                walk(v, path)

    if node is not None:
        out[()] = node.start_mark.line + 1
        walk(node, ())
    return out
