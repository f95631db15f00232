"""The YAML reference page is generated from the pipeline file's models: every key has a meaning
(``Field(description=...)``), and the types it lists are the ones the schema parser takes."""

from __future__ import annotations

import pytest
from conftest import ROOT
from pydantic import BaseModel

from cbp.spec import raw
from cbp.spec.schema import SCALAR_TYPES, parse_type


def _models() -> list[type[BaseModel]]:
    return [raw.RawPipeline, raw.RawFlow, raw.RawSource, raw.RawStage, raw.RawInput, raw.RawState, raw.RawField]


def _reference() -> str:
    import importlib.util

    spec = importlib.util.spec_from_file_location("cbp_docs_hooks", ROOT / "docs" / "hooks.py")
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    return hooks.yaml_reference()


@pytest.mark.parametrize("model", _models(), ids=lambda m: m.__name__)
def test_every_key_has_a_description(model):
    missing = [f.alias or n for n, f in model.model_fields.items() if not (f.description or "").strip()]
    assert not missing, f"{model.__name__}: keys without Field(description=...): {missing}"


def test_the_page_shows_every_key_with_its_description():
    page = _reference()
    for model in _models():
        for name, f in model.model_fields.items():
            assert f"| `{f.alias or name}` |" in page and f.description in page, (model.__name__, name)
    assert "{type: T, default: V}" in page and "## field" in page
    assert "`signed`" in page


def test_listed_types_are_the_parsers():
    page = _reference()
    listed = page.split("## field", 1)[1].split("\n\n")[1]
    for t in SCALAR_TYPES:
        assert f"`{t}`" in listed
        t = t.replace("(P,S)", "(12,2)")
        assert parse_type(t).name == t and parse_type(f"{t}?").nullable
    for refused in ("bytes", "decimal(39,2)", "list<json>"):
        assert f"`{refused}`" not in listed.replace("other than `json`", "")
        with pytest.raises(ValueError):
            parse_type(refused)
