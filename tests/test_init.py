"""``cbp init NAME``: the scaffold validates and passes its own test as generated."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from cbp.cli import main


def test_the_scaffold_validates_and_passes_its_test(spark, tmp_path, capsys):
    proj = tmp_path / "proj"
    assert main(["init", "clicks", "--dir", str(proj)]) == 0
    assert "created" in capsys.readouterr().out
    assert sorted(str(p.relative_to(proj)) for p in proj.rglob("*.*")) == [
        "flows/clicks.py",
        "flows/clicks.yaml",
        "tests/test_clicks.py",
    ]
    assert main(["validate", str(proj / "flows" / "clicks.yaml")]) == 0
    assert "is valid" in capsys.readouterr().out
    spec = importlib.util.spec_from_file_location("test_clicks_generated", proj / "tests" / "test_clicks.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    (tmp_path / "t").mkdir()
    module.test_clicks_counts_every_key(tmp_path / "t")  # the generated test, as pytest would call it
    sys.modules.pop("clicks", None)


def test_init_refuses_to_overwrite_and_bad_names(tmp_path, capsys):
    assert main(["init", "clicks", "--dir", str(tmp_path)]) == 0
    before = (tmp_path / "flows" / "clicks.py").read_text()
    (tmp_path / "flows" / "clicks.py").write_text(before + "# mine\n")
    assert main(["init", "clicks", "--dir", str(tmp_path)]) == 2
    assert "error [exists]" in capsys.readouterr().err
    assert (tmp_path / "flows" / "clicks.py").read_text().endswith("# mine\n")  # nothing was overwritten
    for bad in ("Clicks", "1x", "json", "class", "a-b", "cbp"):
        assert main(["init", bad, "--dir", str(tmp_path / "other")]) == 2
        assert "error [bad-name]" in capsys.readouterr().err
    assert not (tmp_path / "other").exists()


@pytest.mark.parametrize("name", ["my_pipeline", "p2"])
def test_generated_files_name_the_pipeline(tmp_path, name):
    from cbp.commands.init import scaffold
    from cbp.spec import load_spec

    yaml, module, test = scaffold(name, str(tmp_path))
    spec = load_spec(yaml)
    assert spec.name == name and list(spec.stages) == ["count"] and spec.external_flows == ["events"]
    assert f"def test_{name}_counts_every_key" in open(test).read()


def test_the_scaffold_takes_a_retraction_back(spark, tmp_path, capsys):
    """The silent wrong result of a translator that counts records: after a retraction of 'home'
    the state must agree with the consolidated flow (1), not count the retraction as an event (3)."""
    import cbp

    proj = tmp_path / "proj"
    assert main(["init", "visits", "--dir", str(proj)]) == 0
    p = cbp.Pipeline(proj / "flows" / "visits.yaml", str(tmp_path / "home"), spark=spark)
    p.feed("events", [{"key": "home"}, {"key": "home"}, {"key": "about"}])
    p.run()
    p.feed("events", [{"key": "home", "_diff": -1}])  # echo '{"key": "home", "_diff": -1}' | cbp feed ...
    p.run()
    flow = {r["key"]: r.get("_diff", 1) for r in p.output("events", consolidated=True)}
    assert flow == {"home": 1, "about": 1}
    assert {s["key"]: s["count"] for s in p.state("count")} == flow
    sys.modules.pop("visits", None)
