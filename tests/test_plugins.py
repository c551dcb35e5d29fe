"""A third-party stage registered through the ``gpupipe.stages`` entry point: examples/plugin is
pip-installed (into a directory of its own, put on PYTHONPATH) and used from the CLI and from
Python as a user would, with its documents checked against a plain-Python reference; a plugin
that fails to load is reported, never fatal."""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

GPUPIPE = os.path.join(os.path.dirname(sys.executable), "gpupipe")
PLUGIN = REPO / "examples" / "plugin"
LABEL = "code_lines_filter = gpupipe_code_filter:CodeLinesFilter (gpupipe-code-filter)"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """examples/plugin installed with pip (a copy, so the build leaves the checkout clean),
    plus a broken plugin: an installed distribution whose entry point names a missing module."""
    root = tmp_path_factory.mktemp("plugin")
    src = shutil.copytree(PLUGIN, root / "src")
    target = root / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--no-build-isolation", "--target", str(target), str(src)], check=True)
    broken = target / "broken_plugin-0.1.dist-info"
    broken.mkdir()
    (broken / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugin\nVersion: 0.1\n")
    (broken / "entry_points.txt").write_text(
        "[gpupipe.stages]\nfancy_filter = broken_plugin_missing:FancyFilter\n")
    return target


def _run(args, site, **kw):
    env = {**os.environ, "PYTHONPATH": str(site)}
    return subprocess.run(args, capture_output=True, text=True, cwd=REPO, env=env, timeout=300,
                          **kw)


def _code_ratio(text: str) -> float:
    # the reference: written here again, not imported from the plugin
    lines = [x for x in text.split("\n") if x.strip()]
    code = [x for x in lines if x[:4] == "    " or x[:1] == "\t"
            or any(x.lstrip().startswith(p) for p in (">>> ", "... ", "$ ", "# "))]
    return len(code) / len(lines) if lines else 0.0


def _expected_drops(max_ratio: float) -> set[str]:
    ids = set()
    for path in sorted((REPO / "data" / "sample").glob("*.jsonl.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            for line in f:
                r = json.loads(line)
                lines = [x for x in r["text"].split("\n") if x.strip()]
                if lines and _code_ratio(r["text"]) > max_ratio:
                    ids.add(r["id"])
    return ids


def test_cli_lists_and_runs_a_plugin_stage(site, tmp_path):
    listed = _run([GPUPIPE, "stages", "code_lines_filter"], site)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.startswith("code_lines_filter  [row]  Drop documents whose share of "
                                    f"code-like lines exceeds ``max_ratio``, or that have fewer "
                                    f"than ``min_lines`` non-blank lines.  (plugin {LABEL})\n")
    assert "    max_ratio: number >= 0 <= 1 = 0.5\n" in listed.stdout
    assert "drop reasons: too_few_lines, too_much_code" in listed.stdout

    spec = tmp_path / "p.yaml"
    spec.write_text("input: {path: data/sample/*.jsonl.gz, id_column: id}\n"
                    "stages:\n  - {stage: code_lines_filter, max_ratio: 0.4, keep_rejected: true}\n"
                    f"output: {{path: {tmp_path / 'run'}}}\n")
    run = _run([GPUPIPE, "run", str(spec), "-w", "2", "--no-progress"], site)
    assert run.returncode == 0, run.stderr
    summary = json.loads((tmp_path / "run" / "run.json").read_text())
    expected = _expected_drops(0.4)
    assert len(expected) == 628
    assert summary["stages"][0]["stage"] == "code_lines_filter"
    assert summary["stages"][0]["drops"] == {"too_much_code": len(expected)}
    import pandas as pd

    rejected = pd.read_parquet(tmp_path / "run" / "rejected" / "code_lines_filter")
    assert set(rejected["id"]) == expected


def test_python_api_and_preview_use_a_plugin_stage(site):
    script = """
import json, gpupipe as gp
p = gp.Pipeline(input={"path": "data/sample/*.jsonl.gz", "id_column": "id"},
                stages=[{"stage": "code_lines_filter", "max_ratio": 0.4}], output="unused")
pv = p.preview(n=50, seed=0)
why = gp.explain_document(p, "Example:\\n\\n    import os\\n    print(os.sep)\\n")
print(json.dumps({"described": p.stages[0].describe(), "columns": list(pv.columns),
                  "ratios": pv["code_lines_filter.code_line_ratio"].round(6).tolist(),
                  "texts": pv["text"].tolist(), "verdicts": pv["code_lines_filter"].tolist(),
                  "why": why.astype(str).values.tolist()}))
"""
    res = _run([sys.executable, "-c", script], site)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["described"] == "code_lines_filter(max_ratio=0.4)"
    assert out["columns"] == ["id", "text", "code_lines_filter",
                              "code_lines_filter.code_line_ratio", "code_lines_filter.lines",
                              "verdict"]
    assert out["ratios"] == [round(_code_ratio(t), 6) for t in out["texts"]]
    assert out["verdicts"] == ["too_much_code" if _code_ratio(t) > 0.4 else "keep"
                               for t in out["texts"]]
    rows = {r[1]: r for r in out["why"] if r[0] == "code_lines_filter"}
    assert rows["code_line_ratio"][2] == str(2 / 3) and rows["code_line_ratio"][3].startswith(
        "<= 0.4 (max_ratio)")
    assert rows["code_line_ratio"][4] == "drop: too_much_code"


def test_a_broken_plugin_is_reported_not_fatal(site, tmp_path):
    listed = _run([GPUPIPE, "stages"], site)
    assert listed.returncode == 0, listed.stderr
    failure = ("plugin fancy_filter = broken_plugin_missing:FancyFilter (broken-plugin) failed "
               "to load: ModuleNotFoundError: No module named 'broken_plugin_missing'")
    assert failure in listed.stdout
    assert "length_filter  [row]" in listed.stdout and f"(plugin {LABEL})" in listed.stdout

    spec = tmp_path / "p.yaml"
    spec.write_text("input: {path: data/sample/*.jsonl.gz}\nstages:\n  - stage: fancy_filter\n"
                    "output: {path: unused}\n")
    bad = _run([GPUPIPE, "validate", str(spec)], site)
    assert bad.returncode == 2
    assert "unknown stage 'fancy_filter'" in bad.stderr and failure in bad.stderr
    assert "Traceback" not in bad.stderr


def test_docs_show_the_example_plugin_verbatim():
    doc = (REPO / "docs" / "custom-stages.md").read_text()
    for rel in ("gpupipe_code_filter/__init__.py", "pyproject.toml"):
        source = (PLUGIN / rel).read_text()
        assert source in doc, f"docs/custom-stages.md no longer shows examples/plugin/{rel}"
    assert re.search(r"pip install \./examples/plugin", doc)
