"""`gpupipe slurm` under a real Slurm (two nodes on this host, `tests/cluster/slurm.py`): the
generated script submitted with ``sbatch`` from a shell whose PATH lacks gpupipe's environment,
the job COMPLETED with a clean log, and shards byte-identical to a LocalCluster run; then a job
cancelled mid-run and submitted again resumes to the same bytes."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from tests.cluster import common
from tests.cluster.slurm import Slurm, why_not
from tests.conftest import REPO

pytestmark = [pytest.mark.skipif(why_not() is not None, reason=str(why_not())),
              # one Slurm and one reference run for the module, in one test process
              pytest.mark.xdist_group("slurm")]

BIN = os.path.dirname(sys.executable)
PIPELINE = "pipelines/english_web.yaml"


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    with Slurm(tmp_path_factory.mktemp("slurm"), nodes=2, cpus=2) as s:
        yield s


@pytest.fixture(scope="module")
def local_run(tmp_path_factory) -> Path:
    return common.local_run(PIPELINE, tmp_path_factory.mktemp("local"))


def _files(root: Path) -> dict[str, bytes]:
    return common.run_files(root, ("data", "shards"))


def _bare_path_env() -> dict:
    """The submitting shell: PATH without gpupipe's environment (no `dask` on it)."""
    path = [d for d in os.environ["PATH"].split(os.pathsep) if d != BIN]
    return {**os.environ, "PATH": os.pathsep.join(path)}


def _script(tmp_path: Path, out: Path) -> Path:
    script = tmp_path / "job.sbatch"
    r = gp_cli("slurm", PIPELINE, "--cpu", "--nodes", "2", "--workers-per-node", "1",
               "--gpupipe", os.path.join(BIN, "gpupipe"), "--workdir", str(tmp_path / "w"),
               "--set", f"output.path={out}", "-o", str(script))
    assert r.returncode == 0, r.stderr
    return script


def gp_cli(*args):
    import subprocess

    return subprocess.run([sys.executable, "-m", "gpupipe.cli", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


def test_a_two_node_job_completes_with_the_local_runs_bytes(slurm, local_run, tmp_path):
    out = tmp_path / "run"
    script = _script(tmp_path, out)
    log = tmp_path / "job-%j.out"
    t0 = time.monotonic()
    job = slurm.sbatch(script, f"--chdir={REPO}", f"--output={log}", env=_bare_path_env())
    info = slurm.wait(job, timeout=240)
    text = Path(str(log).replace("%j", str(job))).read_text()
    assert (info["JobState"], info["ExitCode"]) == ("COMPLETED", "0:0"), text[-3000:]
    assert info["NodeList"] == "n[1-2]"
    assert "2 worker(s) expected" in text and "gpupipe: driver exited with 0" in text
    # the job's end shut the cluster down: no step killed or cancelled. (distributed itself
    # may log a nanny's race with its worker's exit, on a loaded machine: not asserted)
    for noise in ("srun: error", "CANCELLED", "Killed", "slurmstepd"):
        assert noise not in text, (noise, text[-3000:])
    print(f"\nslurm job {job}: {time.monotonic() - t0:.1f} s from sbatch to COMPLETED")
    assert _files(out) == _files(local_run)


def test_a_cancelled_job_resubmitted_resumes_to_the_same_bytes(slurm, local_run, tmp_path):
    out = tmp_path / "run"
    script = _script(tmp_path, out)
    options = (f"--chdir={REPO}", f"--output={tmp_path / 'job-%j.out'}")
    first = slurm.sbatch(script, *options, env=_bare_path_env())
    # cancel once the run has committed a checkpoint partition (mid-run)
    end = time.monotonic() + 180
    while not any((out / "checkpoints").glob("*/*.parquet")) and \
            slurm.job(first)["JobState"] in ("PENDING", "RUNNING"):
        assert time.monotonic() < end, "no checkpoint after 180 s"
        time.sleep(0.2)
    slurm.scancel(first)
    assert slurm.wait(first, timeout=60)["JobState"] == "CANCELLED"
    assert not (out / "shards" / "manifest.json").exists()   # it did not finish
    second = slurm.sbatch(script, *options, env=_bare_path_env())
    info = slurm.wait(second, timeout=240)
    text = (tmp_path / f"job-{second}.out").read_text()
    assert (info["JobState"], info["ExitCode"]) == ("COMPLETED", "0:0"), text[-3000:]
    summary = json.loads((out / "run.json").read_text())
    assert summary["status"] == "complete"
    assert sum(seg["reused"] for seg in summary["segments"]) > 0   # it resumed
    assert _files(out) == _files(local_run)
