"""The error-code catalog (cbp/errorcodes/) against cbp's source, both ways: every code raised is
in the catalog with the class it is raised with, every catalog entry is raised somewhere, each
entry's exit code is what ``cbp`` exits with for that class, and the docs page is the catalog's."""

from __future__ import annotations

import ast

import pytest
from conftest import ROOT
from errorscan import raise_sites

from cbp import errorcodes, errors
from cbp.cli import exit_code

CBP = ROOT / "cbp"
#: The crawl application beside cbp raises cbp's errors with codes of the one catalog too.
CRAWL_APP = ROOT / "cbp_crawl"


@pytest.fixture(scope="module")
def cbp_sites() -> dict[tuple[str, str], list[str]]:
    """Where cbp raises each code: the scan of cbp's source, once for the file's tests (none changes it)."""
    return raise_sites(CBP)


@pytest.fixture(scope="module")
def all_sites(cbp_sites: dict[tuple[str, str], list[str]]) -> dict[tuple[str, str], list[str]]:
    """Where cbp and the crawl application raise each code."""
    found = {key: list(where) for key, where in cbp_sites.items()}
    for key, where in raise_sites(CRAWL_APP).items():
        found[key] = found.get(key, []) + where
    return found


def _catalog() -> dict[str, errorcodes.Code]:
    return {c.code: c for _, codes in errorcodes.SECTIONS for c in codes}


def test_scan_finds_codes_through_variables_and_carriers(cbp_sites):
    found = cbp_sites
    assert len({c for c, _ in found}) > 100
    assert ("bad-config", "RuntimeStateError") in found  # code=BAD_CONFIG, a module constant
    assert ("route-required", "SpecError") in found  # self.fail(where, message, "route-required")
    assert ("batch-schema", "UserCodeError") in found  # self._fail(plan, "batch-schema", ...) -> FailureRecord
    assert ("yaml-too-deep", "SpecError") in found  # _YamlRefused("yaml-too-deep", ...) re-raised by the loader
    assert ("io", "RuntimeStateError") in found  # a task's failure record 'io'


def test_every_raised_code_is_in_the_catalog_with_its_class(all_sites):
    catalog = _catalog()
    missing = []
    for (code, cls), where in sorted(all_sites.items()):
        entry = catalog.get(code)
        if entry is None:
            missing.append(
                f"code '{code}' ({cls}, raised at {', '.join(where[:3])}) has no entry: add "
                f'_c("{code}", {cls}, {exit_code(getattr(errors, cls))}, "<meaning>", "<what to do>") '
                "to its kind's module in cbp/errorcodes/"
            )
        elif cls not in [k.__name__ for k in entry.classes]:
            missing.append(
                f"code '{code}' is raised as {cls} at {', '.join(where[:3])}, but its entry in "
                f"cbp/errorcodes/ lists only {[k.__name__ for k in entry.classes]}: "
                f"add {cls} (and its exit code)"
            )
    assert not missing, "\n".join(missing)


def test_every_catalog_entry_is_raised_as_it_says(all_sites):
    found = all_sites
    unraised = [
        f"'{c.code}' as {k.__name__}"
        for c in _catalog().values()
        for k in c.classes
        if (c.code, k.__name__) not in found
    ]
    assert not unraised, (
        f"catalog entries nothing in cbp/ or cbp_crawl/ raises (remove them or fix the class): {unraised}"
    )


def test_each_entry_exits_as_the_cli_maps_its_class():
    for c in _catalog().values():
        assert len(c.classes) == len(c.exits), c.code
        assert c.exits == tuple(exit_code(k) for k in c.classes), f"'{c.code}': the catalog says exit {c.exits}"
    assert exit_code(errors.BusyError) == 6 and exit_code(errors.SpecError) == 2


def test_cli_exits_with_the_catalog_exit_code(monkeypatch, capsys):
    """main() itself, for one code of each class: the printed code and the exit code are the catalog's."""
    from cbp import cli

    for c in [codes[0] for _, codes in errorcodes.SECTIONS]:
        cls = c.classes[0]
        err = cls("x.yaml", "boom", code=c.code) if cls is errors.SpecError else cls("boom", code=c.code)

        def raising(args, err=err):
            raise err

        monkeypatch.setattr(cli, "_dispatch", raising)
        assert cli.main(["validate", "x.yaml"]) == c.exits[0], c.code
        assert f"error [{c.code}]" in capsys.readouterr().err


def test_codes_are_unique_and_every_error_class_has_its_exit():
    codes = [c.code for _, cs in errorcodes.SECTIONS for c in cs] + [r.code for r in errorcodes.REPORTED]
    assert len(codes) == len(set(codes)), sorted(c for c in codes if codes.count(c) > 1)


def test_reported_codes_are_in_the_source():
    strings = {
        n.value
        for p in [*CBP.rglob("*.py"), *CRAWL_APP.rglob("*.py")]
        for n in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
        if isinstance(n, ast.Constant) and isinstance(n.value, str)
    }
    for r in errorcodes.REPORTED:
        assert any(s == r.code or s.startswith(r.code + ": ") for s in strings), r.code


def test_docs_page_is_the_generated_catalog():
    page = (ROOT / "docs" / "reference" / "error-codes.md").read_text(encoding="utf-8")
    assert page == errorcodes.markdown(), "regenerate: python -m cbp.errorcodes > docs/reference/error-codes.md"
    assert "home-mismatch" not in page
