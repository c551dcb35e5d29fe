"""Pipeline files are data, the run directory stays apart from the input, and the embedded
cluster listens on localhost."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time

import pytest

import gpupipe as gp
from gpupipe.errors import SpecError
from tests.conftest import SAMPLE


def validate(path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpupipe.cli", "validate", str(path)],
                          capture_output=True, text=True, timeout=60)


def test_python_tags_are_refused(tmp_path):
    p = tmp_path / "p.yaml"
    marker = tmp_path / "pwned"
    p.write_text(f'input: !!python/object/apply:os.system ["touch {marker}"]\n'
                 f"output: {{path: {tmp_path / 'o'}}}\n")
    r = validate(p)
    assert r.returncode == 2 and not marker.exists()
    assert r.stderr.strip() == (f"error: {p}:1:8: invalid YAML: could not determine a "
                                f"constructor for the tag "
                                f"'tag:yaml.org,2002:python/object/apply:os.system'")


def test_an_alias_bomb_is_refused_quickly(tmp_path):
    p = tmp_path / "bomb.yaml"
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{k}: &a{k} [{', '.join([f'*a{k - 1}'] * 9)}]" for k in range(1, 10)]
    p.write_text("\n".join(lines) + "\ninput: {path: x}\noutput: {path: y}\n")
    t0 = time.perf_counter()
    with pytest.raises(SpecError, match=r"expands to more than 100,000 values through its "
                                        r"aliases"):
        gp.Pipeline.from_yaml(p)
    assert time.perf_counter() - t0 < 5
    rec = tmp_path / "rec.yaml"
    rec.write_text("input: &x {path: [*x]}\noutput: {path: y}\n")
    with pytest.raises(SpecError, match="recursive structure"):
        gp.Pipeline.from_yaml(rec)


def test_aliases_in_an_ordinary_file_still_work(tmp_path):
    p = tmp_path / "p.yaml"
    p.write_text("common: &lf {stage: length_filter, min_words: 20}\n"
                 "input: {path: data/sample}\nstages: [*lf]\noutput: {path: o}\n")
    with pytest.raises(SpecError, match="common"):   # an unknown top-level key, not the alias
        gp.Pipeline.from_yaml(p)
    p.write_text("input: {path: data/sample}\nstages: [&lf {stage: length_filter, "
                 "min_words: 20}]\noutput: {path: o}\n")
    assert [s.describe() for s in gp.Pipeline.from_yaml(p).stages] == [
        "length_filter(min_words=20)"]


def test_stages_are_picked_by_registered_name_only():
    with pytest.raises(SpecError, match="unknown stage 'os.system'"):
        gp.Pipeline(input={"path": "x"}, output={"path": "y"}, stages=[{"stage": "os.system"}])


@pytest.mark.parametrize("layout", ["output-inside-input-dir", "input-inside-output"])
def test_the_run_directory_never_overlaps_the_input(tmp_path, layout):
    d = tmp_path / "in"
    d.mkdir()
    shutil.copy(SAMPLE / "debian-docs.jsonl.gz", d)
    if layout == "output-inside-input-dir":
        inp, out, msg = str(d), str(d / "run"), "is inside the input directory"
    else:
        inp, out, msg = str(d / "debian-docs.jsonl.gz"), str(d), "contains the input file"
    with pytest.raises(SpecError, match=msg):
        gp.Pipeline(input={"path": inp}, output={"path": out, "overwrite": True}).run(
            workers=1, progress=False)
    assert sorted(p.name for p in d.iterdir()) == ["debian-docs.jsonl.gz"]   # nothing written


def test_the_embedded_cluster_listens_on_localhost():
    from gpupipe.runner.cluster import connect
    from gpupipe.spec import LocalClusterSpec

    with connect(LocalClusterSpec(workers=1)) as client:
        info = client.scheduler_info()
        assert client.scheduler.address.startswith("tcp://127.0.0.1:")
        assert all(w.startswith("tcp://127.0.0.1:") for w in info["workers"])
        assert client.dashboard_link.startswith("http://127.0.0.1:")
