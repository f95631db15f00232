"""MkDocs hooks of cbp's docs site (mkdocs.yml ``hooks:``): pages made at build time, so none goes stale.

- the "How-to" and "Benchmarks" sections of the nav list the pages present in docs/howto/ and
  docs/benchmarks/ (titled by their first heading): a page added there is in the nav;
- reference/cli.md is generated from cbp's own argparse parser (every command, argument and flag);
- reference/yaml-keys.md is generated from the pipeline YAML's models (cbp/spec/raw.py), with the
  meaning of each key from its ``Field(description=...)``;
- the benchmarks' plots (bench/*.png) are published under benchmarks/plots/.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

def _nav_section(nav: list[Any], title: str, folder: str) -> None:
    """Fill the nav entry ``title`` with the pages in docs/<folder>/, index.md first."""
    pages = sorted((DOCS / folder).glob("*.md"), key=lambda p: (p.name != "index.md", p.name))
    entries = []
    for p in pages:
        first = next((ln[2:].strip() for ln in p.read_text(encoding="utf-8").splitlines() if ln.startswith("# ")), p.stem)
        entries.append({first: f"{folder}/{p.name}"})
    for i, item in enumerate(nav):
        if isinstance(item, dict) and title in item:
            nav[i] = {title: entries}


def on_config(config: Any) -> Any:
    _nav_section(config["nav"], "How-to", "howto")
    _nav_section(config["nav"], "Benchmarks", "benchmarks")
    return config


def _usage(p: argparse.ArgumentParser) -> str:
    return p.format_usage().replace("usage: ", "").strip()


def _arguments(p: argparse.ArgumentParser) -> list[str]:
    rows = ["| argument | what it is |", "|---|---|"]
    for a in p._actions:
        if isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)) or a.help == argparse.SUPPRESS:
            continue
        name = ", ".join(a.option_strings) or (a.metavar or a.dest)
        if a.option_strings and a.nargs != 0:
            name += f" {a.metavar or a.dest.upper()}"
        default = "" if a.default in (None, False, [], argparse.SUPPRESS) or not a.option_strings else f" (default: {a.default})"
        choices = f" one of: {', '.join(map(str, a.choices))}." if a.choices else ""
        text = (a.help or "").replace("|", "\\|").replace("\n", " ")
        rows.append(f"| `{name}` | {text}{choices}{default} |")
    return rows


def cli_reference() -> str:
    """The CLI reference page, from ``cbp.cli._parser()``."""
    sys.path.insert(0, str(ROOT))
    from cbp.cli import _EXIT, _parser

    ap = _parser()
    sub = next(a for a in ap._actions if isinstance(a, argparse._SubParsersAction))
    helps = {c.dest: c.help for c in sub._choices_actions}
    out = ["# Command line", "", "Generated from the `cbp` command's own parser when the docs are built.", "",
           f"`{_usage(ap)}`", "", ap.description or "", "", *_arguments(ap), "",
           "Exit codes: 0 success; " + "; ".join(f"{code} {cls.__name__}" for cls, code in _EXIT.items())
           + "; 5 any other error (see [Error codes](error-codes.md)).", ""]
    for name, p in sub.choices.items():
        out += [f"## cbp {name}", "", helps.get(name) or "", "", "```text", _usage(p), "```", "", *_arguments(p), ""]
    return "\n".join(out)


def _model_rows(model: Any) -> list[str]:
    """The table of a model's keys: key, type, default and its ``description``."""
    out = ["| key | type | default | what it is |", "|---|---|---|---|"]
    for name, field in model.model_fields.items():
        key = field.alias or name
        ann = field.annotation
        kind = ann.__name__ if isinstance(ann, type) else str(ann)
        kind = kind.replace("typing.", "").replace("cbp.spec.raw.", "").replace("cbp.spec.sources.", "")
        kind = kind.replace("Raw", "").replace("|", "\\|")
        default = "required" if field.is_required() else f"`{field.default!r}`"
        text = (field.description or "").replace("|", "\\|")
        out.append(f"| `{key}` | `{kind}` | {default} | {text} |")
    return out


def yaml_reference() -> str:
    """The YAML keys page, from the spec's pydantic models (cbp/spec/raw.py) and their descriptions."""
    sys.path.insert(0, str(ROOT))
    from cbp.spec import raw
    from cbp.spec.schema import SCALAR_TYPES

    models = [("pipeline", raw.RawPipeline), ("flow", raw.RawFlow), ("source", raw.RawSource),
              ("stage", raw.RawStage), ("input", raw.RawInput), ("state", raw.RawState)]
    out = ["# YAML keys", "", "Generated from the pipeline file's models (`cbp/spec/raw.py`) when the docs are built. "
           "A key that is not listed is an error (`invalid-spec`), naming the file, the line and the stage or flow; "
           "see [Pipelines](../guide/pipelines.md) for a whole example.", ""]
    for where, model in models:
        out += [f"## {where}", "", *_model_rows(model), ""]
    types = ", ".join(f"`{t}`" for t in SCALAR_TYPES)
    out += ["## field", "", "A field of a `schema` (a flow's, a state's, an input's) is `name: T`, T a type string: "
            f"one of {types}; `list<T>` of a scalar T other than `json` (`list<T?>`: items may be null); any of them "
            "nullable with a trailing `?` (`int?`, `list<string>?`). Any other type is refused (`bad-type`); "
            "[schema types](schema-types.md) gives each one's JSON form and Arrow, Spark and Python types. "
            "A flow's or state's field may take the long form `name: {type: T, default: V}`:", "",
            *_model_rows(raw.RawField), ""]
    return "\n".join(out)


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    for path, text in (("reference/cli.md", cli_reference()), ("reference/yaml-keys.md", yaml_reference())):
        files.append(File.generated(config, path, content=text))
    for png in sorted((ROOT / "bench").glob("*.png")):
        files.append(File.generated(config, f"benchmarks/plots/{png.name}", content=png.read_bytes()))
    return files


if __name__ == "__main__":  # print a generated page: python docs/hooks.py cli|yaml
    print(cli_reference() if sys.argv[1:] == ["cli"] else yaml_reference())
    os._exit(0)
