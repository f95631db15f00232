"""The docs site: it builds with ``mkdocs build --strict``, every code block of the tutorial runs, and
the README stays short. (The error-code page is checked against the source by test_error_catalog.py.)"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from conftest import ROOT

DOCS = ROOT / "docs"


def test_mkdocs_build_strict(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_MKDOCS_2_WARNING": "1"}
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "-f",
            str(ROOT / "mkdocs.yml"),
            "-d",
            str(tmp_path / "site"),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    cli = (tmp_path / "site" / "reference" / "cli" / "index.html").read_text()
    for command in ("validate", "feed", "run", "init", "status", "sql"):  # generated from the parser
        assert f"cbp {command}" in cli
    assert "--verbose" in cli and "--epoch-timeout" in cli
    assert "route_by" in (tmp_path / "site" / "reference" / "yaml-keys" / "index.html").read_text()
    assert (tmp_path / "site" / "benchmarks" / "plots" / "url_count.png").exists()


def _blocks(md: str) -> list[tuple[str, str]]:
    """The fenced code blocks of a Markdown text: (language, code)."""
    return re.findall(r"^```(bash|python)\n(.*?)^```", md, re.S | re.M)


def test_every_tutorial_block_runs(tmp_path):
    blocks = _blocks((DOCS / "tutorial.md").read_text())
    assert [lang for lang, _ in blocks].count("bash") >= 5 and any(lang == "python" for lang, _ in blocks)
    project = tmp_path / "project"
    project.mkdir()
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }
    env.pop("CBP_VERBOSE", None)
    outputs = []
    for n, (lang, code) in enumerate(blocks, 1):
        cmd = ["bash", "-euo", "pipefail", "-c", code] if lang == "bash" else [sys.executable, "-c", code]
        r = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, f"block {n} ({lang}) failed:\n{code}\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
        outputs.append(r.stdout)
    assert (project / "state" / "clicks" / "_cbp").is_dir()  # the default home, in the project
    after = outputs[-2]  # cbp output ... --epoch 2 after the change: about (seen twice), not contact
    assert [line for line in after.splitlines() if line.startswith("{")] == ['{"key": "about", "count": 2}'], after
    assert "1 passed" in outputs[-1]


def test_readme_is_short_and_starts_with_the_two_commands():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 200
    block = lines[lines.index("```bash") + 1 : lines.index("```bash") + 3]
    assert block[0].startswith("bash scripts/demo ") and block[1].startswith("bash scripts/test ")
    assert lines.index("```bash") <= 3
