"""MkDocs hooks of cbp's docs site (mkdocs.yml ``hooks:``): pages made at build time, so none goes stale.

- the "How-to" and "Benchmarks" sections of the nav list the pages present in docs/howto/ and
  docs/benchmarks/ (titled by their first heading): a page added there is in the nav;
- reference/cli.md is generated from cbp's own argparse parser (every command, argument and flag);
- reference/yaml-keys.md is generated from the pipeline YAML's models (cbp.spec), with the meaning
  of each key from :data:`MEANING`;
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

#: What each YAML key means (by model and key); a key without an entry shows only its type and default.
MEANING = {
    ("pipeline", "pipeline"): "the pipeline's name: its default home is `state/<name>` in the project",
    ("pipeline", "mode"): "`direct` (state partition-pinned and indexed, the default) or `blackbox` (state re-read and re-shuffled every epoch: the paper's baseline)",
    ("pipeline", "description"): "free text",
    ("pipeline", "params"): "a mapping every stage's `out.params` starts from; a stage's own `params` override its keys for that stage (one value several stages must agree on is set here once)",
    ("pipeline", "flows"): "the flows, by name (see *flow*)",
    ("pipeline", "stages"): "the stages, by name (see *stage*)",
    ("flow", "schema"): "field name -> type (`string`, `int`, `float`, `bool`, `bytes`, `json`, ...); records are checked against it",
    ("flow", "external"): "`true` for an input you feed (`cbp feed`); otherwise a stage must produce it",
    ("flow", "description"): "free text",
    ("flow", "migrate"): "`module:function` that `cbp upgrade` calls with each stored record of the flow's live increments (a dict in the old schema) when the schema changes in a way cbp cannot make itself; returns the new record or `None` (dropped). See [Changing a pipeline](../howto/changing-a-pipeline.md)",
    ("stage", "translator"): "`module:function`, the module looked up beside the YAML first",
    ("stage", "inputs"): "the flows the stage reads, each with its RouteBy/OrderBy/FrameBy (see *input*)",
    ("stage", "state"): "the stage's state: its schema and grouping (see *state*); none for a stateless stage",
    ("stage", "outputs"): "the flows the stage writes (`out.<flow>.write(...)`)",
    ("stage", "partitions"): "the stage's fixed number of state partitions (the parallelism of its epochs)",
    ("stage", "runnable"): "when the stage may run: `all` (every input has an increment, the default), `any`, or `module:function`",
    ("stage", "params"): "any mapping, handed to the translator as `out.params` (over the pipeline's `params`)",
    ("stage", "description"): "free text",
    ("stage", "timeout"): "seconds an epoch of this stage may take; a longer one is cancelled (`timeout`, exit 4)",
    ("stage", "batch"): "a vectorised translator, called per batch of keys with Arrow tables (see the guide)",
    ("input", "flow"): "the input flow's name",
    ("input", "route_by"): "a field name or `module:function` giving a record's key (the translate call it goes to)",
    ("input", "order_by"): "a field name or `module:function` ordering a key's records of this flow",
    ("input", "frame_by"): "`module:function` grouping records into frames (increments become complete when a frame closes)",
    ("input", "schema"): "a schema the stage expects of this input (a subset of the flow's)",
    ("state", "schema"): "the state record's fields (the key field included)",
    ("state", "grouping"): "`inner` (only keys with new input are read and called) or `outer` (every stored key is called each epoch)",
}


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


def yaml_reference() -> str:
    """The YAML keys page, from the spec's pydantic models."""
    sys.path.insert(0, str(ROOT))
    from cbp import spec

    models = [("pipeline", spec._RawPipeline), ("flow", spec._RawFlow), ("stage", spec._RawStage),
              ("input", spec._RawInput), ("state", spec._RawState)]
    out = ["# YAML keys", "", "Generated from the pipeline file's models (`cbp.spec`) when the docs are built. "
           "A key that is not listed is an error (`invalid-spec`), naming the file, the line and the stage or flow; "
           "see [Pipelines](../guide/pipelines.md) for a whole example.", ""]
    for where, model in models:
        out += [f"## {where}", "", "| key | type | default | what it is |", "|---|---|---|---|"]
        for name, field in model.model_fields.items():
            key = field.alias or name
            ann = field.annotation
            kind = ann.__name__ if isinstance(ann, type) else str(ann)
            kind = kind.replace("typing.", "").replace("cbp.spec.", "").replace("_Raw", "").replace("|", "\\|")
            default = "required" if field.is_required() else f"`{field.default!r}`"
            out.append(f"| `{key}` | `{kind}` | {default} | {MEANING.get((where, key), '')} |")
        out.append("")
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
