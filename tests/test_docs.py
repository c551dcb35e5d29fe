"""The documentation: the generated reference matches the code (a stale file fails here), covers
every stage, parameter and pipeline key, and every relative link in docs/ and the README
resolves."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from pathlib import Path

from gpupipe import docgen
from gpupipe.spec import PipelineSpec
from tests.conftest import REPO

GPUPIPE = str(Path(sys.executable).parent / "gpupipe")


def test_generated_reference_is_current():
    stale = docgen.stale(str(REPO / "docs"))
    assert stale == [], f"{stale} are stale: run `make docs` and commit the result"


def test_a_stale_reference_is_detected(tmp_path):
    docgen.write(str(tmp_path))
    assert docgen.stale(str(tmp_path)) == []
    stages = tmp_path / docgen.STAGES_FILE
    stages.write_text(stages.read_text().replace("| `min_words` |", "| `min_word` |", 1))
    (tmp_path / docgen.PIPELINE_FILE).unlink()
    res = subprocess.run([GPUPIPE, "docs", "--check", "--docs-dir", str(tmp_path)],
                         capture_output=True, text=True, cwd=REPO)
    assert res.returncode == 1
    assert res.stderr.splitlines() == [
        f"stale: {tmp_path / docgen.PIPELINE_FILE} differs from what the code generates",
        f"stale: {stages} differs from what the code generates",
        "run `gpupipe docs` (make docs) and commit the result"]
    ok = subprocess.run([GPUPIPE, "docs", "--docs-dir", str(tmp_path)], capture_output=True,
                        text=True, cwd=REPO)
    assert ok.returncode == 0 and docgen.stale(str(tmp_path)) == []


def test_stage_reference_covers_every_stage_and_parameter():
    text = docgen.stage_reference()
    stages = docgen.builtin_stages()
    assert len(stages) == 24
    sections = re.split(r"^## ", text, flags=re.M)[1:]
    assert [s.split("\n", 1)[0] for s in sections] == list(stages)
    for section, (name, cls) in zip(sections, stages.items()):
        params = re.findall(r"^\| `(\w+)` \|", section, flags=re.M)
        assert params == [f.name for f in dataclasses.fields(cls)], name
        for reason in cls.reasons:
            assert f"`{reason}`" in section, (name, reason)
    # a default as the code has it, a constraint and a reason
    lf = sections[list(stages).index("length_filter")]
    assert "| `min_words` | integer ≥ 0 or null | `null` |" in lf
    assert "Drop reasons: `too_few_chars`, `too_many_chars`, `too_few_words`, `too_many_words`" in lf


def test_pipeline_reference_covers_every_key():
    text = docgen.pipeline_reference()
    top = text.split("## Top level", 1)[1].split("\n## ", 1)[0]
    assert re.findall(r"^\| `(\w+)` \|", top, flags=re.M) == list(PipelineSpec.model_fields)
    assert "| `output` | [OutputSpec](#outputspec) | *required* |" in top
    shards = text.split("## ShardSpec", 1)[1].split("\n## ", 1)[0]
    assert "| `seed` | integer | `1234` | shard = hash64(seed, id) mod shards;" in shards


def test_relative_links_resolve():
    files = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    checked = 0
    for f in files:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", f.read_text()):
            if re.match(r"[a-z]+://", target):
                continue
            assert (f.parent / target).exists(), f"{f.relative_to(REPO)}: broken link {target}"
            checked += 1
    assert checked >= 15
