"""The GPU path, as far as it can be checked without a GPU: cuda cluster specs and their errors,
KvikIO settings on workers, partition sizing, `gpupipe slurm` (its script run end to end with
stand-ins for srun/scontrol), `gpupipe io-bench`. `gpu` tests run where a GPU works."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import gpupipe as gp
from gpupipe.errors import SpecError
from gpupipe.runner.cluster import connect, cuda_cluster_kwargs
from gpupipe.runner.plan import stage_backends
from gpupipe.runner.sources import effective_blocksize
from gpupipe.slurm import SlurmOptions, python_for, render
from gpupipe.spec import LocalClusterSpec
from gpupipe.stages import GopherQuality, LengthFilter

BIN = os.path.dirname(sys.executable)


def cli(*args, **kw):
    return subprocess.run([os.path.join(BIN, "gpupipe"), *args], capture_output=True, text=True,
                          timeout=300, **kw)


# ---------------------------------------------------------------------------- cuda cluster spec

CUDA = {"kind": "cuda", "protocol": "ucx", "interface": "ib0", "enable_infiniband": True,
        "enable_nvlink": True, "rmm_pool_size": "70GB",
        "device_memory_limit": 0.8, "devices": "0,1,2,3"}


def test_cuda_cluster_spec_and_its_arguments():
    p = gp.Pipeline(input="data/sample", output="out/x", cluster=CUDA)
    kw = cuda_cluster_kwargs(p.cluster, env={"A": "1"})
    assert kw["CUDA_VISIBLE_DEVICES"] == "0,1,2,3" and kw["protocol"] == "ucx"
    assert kw["interface"] == "ib0" and kw["enable_infiniband"] and kw["enable_nvlink"]
    assert kw["rmm_pool_size"] == 70_000_000_000 and kw["rmm_async"] is False
    assert "enable_rdmacm" not in kw  # not set: dask-cuda's automatic transport selection
    assert kw["device_memory_limit"] == 0.8 and kw["enable_cudf_spill"] is True
    assert kw["env"] == {"A": "1"} and "n_workers" not in kw
    assert cuda_cluster_kwargs(p.cluster, workers=2)["n_workers"] == 2
    tcp = gp.Pipeline(input="data/sample", output="out/x", cluster={"kind": "cuda"}).cluster
    assert "enable_infiniband" not in cuda_cluster_kwargs(tcp)  # tcp: no UCX switches at all
    again = gp.Pipeline.from_dict(json.loads(json.dumps(p.to_dict())))
    assert again.cluster == p.cluster
    assert "local CUDA cluster (dask-cuda), GPUs 0,1,2,3; protocol ucx, interface ib0" in \
        p.explain()


@pytest.mark.parametrize("cluster, message", [
    ({"kind": "cuda", "enable_nvlink": True}, "enable_nvlink needs protocol: ucx"),
    ({"kind": "cuda", "protocol": "ucx", "enable_rdmacm": True, "enable_infiniband": False},
     "enable_rdmacm needs InfiniBand"),
    ({"kind": "cuda", "rmm_pool_size": "8GB", "rmm_async": True},
     "rmm_pool_size is not used with rmm_async"),
    ({"kind": "cuda", "rmm_pool_size": 1.5}, "fraction in \\(0, 1\\]"),
    ({"kind": "cuda", "rmm_pool_size": "plenty"}, "a size such as '24GB'"),
    ({"kind": "cuda", "devices": "first"}, "not a list of GPU indices"),
    ({"kind": "cuda", "protocl": "ucx"}, "did you mean 'protocol'"),
    ({"kind": "gpu"}, "unknown cluster kind 'gpu'"),
])
def test_bad_cuda_cluster_specs(cluster, message):
    with pytest.raises(SpecError, match=message):
        gp.Pipeline(input="data/sample", output="out/x", cluster=cluster)


def test_cuda_cluster_without_dask_cuda_is_a_clear_error(tmp_path, small_corpus):
    pytest.importorskip("dask")
    if __import__("importlib").util.find_spec("dask_cuda") is not None:
        pytest.skip("dask-cuda is installed here")
    p = tmp_path / "p.yaml"
    p.write_text(f"input: {{path: {small_corpus}}}\ncluster: {{kind: cuda}}\n"
                 f"output: {{path: {tmp_path / 'o'}}}\n")
    r = cli("run", str(p), "--no-progress")
    assert r.returncode == 1
    assert "cluster.kind: cuda needs dask-cuda" in r.stderr and "gpupipe[gpu]" in r.stderr
    assert "Traceback" not in r.stderr


def test_missing_ucx_or_gpu_are_clear_errors(monkeypatch):
    """What a machine with dask-cuda but without distributed-ucxx, or without a GPU, reports
    (the package lookup is redirected: this machine has neither)."""
    import importlib.util

    from gpupipe.errors import ClusterError
    from gpupipe.runner import cluster as backend

    real = importlib.util.find_spec
    present = {"dask_cuda": True, "distributed_ucxx": False}
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: (
        object() if present[name] else None) if name in present else real(name, *a))
    with pytest.raises(ClusterError, match="protocol: ucx needs .*distributed-ucxx"):
        backend.local_cuda_cluster(protocol="ucx")
    monkeypatch.setattr(backend, "device_memory_bytes", lambda: None)
    with pytest.raises(ClusterError, match="no NVIDIA GPU is visible"):
        backend.local_cuda_cluster(protocol="tcp")


def test_partition_size_follows_device_memory_on_cuda_clusters():
    base = gp.Pipeline(input="data/sample", output="out/x")
    cuda = gp.Pipeline(input="data/sample", output="out/x", cluster={"kind": "cuda"})
    assert effective_blocksize(base.input, base.cluster, 80 * 2**30) == 256 * 2**20
    assert effective_blocksize(cuda.input, cuda.cluster, 80 * 2**30) == 80 * 2**30 // 32
    explicit = gp.Pipeline(input={"path": "data/sample", "blocksize": "64MiB"}, output="out/x",
                           cluster={"kind": "cuda", "partition_fraction": 0.1})
    assert effective_blocksize(explicit.input, explicit.cluster, 80 * 2**30) == 64 * 2**20
    assert effective_blocksize(cuda.input, cuda.cluster, None) == 256 * 2**20  # no GPU: default


def test_explain_names_stages_converted_for_another_backend():
    stages = [LengthFilter(min_words=3), GopherQuality()]
    assert stage_backends(stages, "pandas") == [("pandas", False), ("pandas", False)]
    # both compute with kernels and the seam only: native on cuDF
    assert stage_backends(stages, "cudf") == [("cudf", False), ("cudf", False)]
    from gpupipe.stages import RegexFilter

    assert stage_backends([RegexFilter(pattern="x")], "cudf") == [("pandas", True)]


def test_conversions_are_planned_between_fused_stages_only():
    from gpupipe.runner.plan import conversions, plan
    from gpupipe.stages import ExactDedup, RegexFilter

    host = RegexFilter(pattern="x")
    stages = [LengthFilter(min_words=3), host, GopherQuality(), ExactDedup(), host,
              LengthFilter(min_words=1)]
    assert conversions(plan(stages), "cudf") == {1: "device->host", 2: "host->device",
                                                 5: "host->device"}
    assert conversions(plan(stages), "pandas") == {}


def test_explain_shows_the_cudf_plan_on_a_machine_without_a_gpu():
    """`backend: cudf` cannot run here, but explain shows what a GPU machine would run: each
    stage's backend, and one warning per stage whose partitions are copied to the host."""
    p = gp.Pipeline.from_yaml("pipelines/english_web.yaml", overrides=["backend=cudf"])
    text = p.explain()
    assert "backend  cudf — not usable on this machine: backend: cudf cannot be used here" in text
    warned = [line.strip() for line in text.splitlines() if "WARNING" in line]
    # the first segment reads onto the GPU and stays there; the global stages read their
    # Parquet checkpoints on their own side; the tokenizer encodes on the device
    assert warned == []
    for native in ("normalize_text", "language_id", "gopher_repetition", "gopher_quality",
                   "c4_quality", "fineweb_quality", "pii_redact"):
        assert f"        {native} runs on cudf\n" in text
    assert ("        tokenize runs on cudf (NFC / NFKC of the documents that need it, and the "
            "documents handed to tokenizers, on the host)\n") in text
    assert ("        fuzzy_dedup runs on cudf (LSH buckets, candidate checks and the selection on "
            "the host)\n") in text
    quick = gp.Pipeline.from_yaml("pipelines/quickstart.yaml", overrides=["backend=cudf"])
    assert [line.strip() for line in quick.explain().splitlines() if "WARNING" in line] == []
    hf = gp.Pipeline.from_yaml("pipelines/quickstart.yaml",
                               overrides=["backend=cudf", "stages.2.engine=huggingface"])
    assert [line.strip() for line in hf.explain().splitlines() if "WARNING" in line] == [
        "WARNING conversion before tokenize: every partition is copied from the GPU to the host"]
    assert "routing and shard writing run on the host" in text
    r = cli("run", "pipelines/quickstart.yaml", "--set", "backend=cudf", "-o",
            "/tmp/gpupipe-never-written")
    assert r.returncode != 0 and "backend: cudf cannot be used here" in r.stderr
    assert "Traceback" not in r.stderr and not os.path.exists("/tmp/gpupipe-never-written")


def test_run_json_records_each_stage_backend(tmp_path, small_corpus, client):
    """Each stage's backend and seconds; run.json schema 2 has no ``device_seconds`` (it was
    the wall seconds of any stage on cuDF, not device time)."""
    stages = [LengthFilter(min_words=20), GopherQuality(min_doc_words=10)]
    res = gp.Pipeline(input=str(small_corpus), output=str(tmp_path / "o"), stages=stages,
                      backend="pandas").run(client=client, progress=False)
    got = [(s["stage"], s["backend"]) for s in res.summary["stages"]]
    assert got == [("length_filter", "pandas"), ("gopher_quality", "pandas")]
    assert res.summary["schema_version"] == 2
    assert not any("device_seconds" in s for s in res.summary["stages"])
    assert res.summary["backend"] == {"requested": "pandas", "used": "pandas",
                                      "reason": "requested"}


# ---------------------------------------------------------------------------- KvikIO settings

def test_kvikio_settings_reach_every_worker(client, small_corpus, tmp_path):
    io = {"kvikio": {"compat_mode": "on", "nthreads": 16, "task_size": "8MiB"}}
    p = gp.Pipeline(input=str(small_corpus), output=str(tmp_path / "o"), io=io)
    assert "KvikIO on every worker" in p.explain()
    res = p.run(client=client, progress=False)
    assert res.summary["pipeline"]["io"]["kvikio"]["nthreads"] == 16
    seen = client.run(lambda: {k: os.environ.get(k) for k in
                               ("KVIKIO_COMPAT_MODE", "KVIKIO_NTHREADS", "KVIKIO_TASK_SIZE")})
    assert len(seen) == 2
    for env in seen.values():
        assert env == {"KVIKIO_COMPAT_MODE": "ON", "KVIKIO_NTHREADS": "16",
                       "KVIKIO_TASK_SIZE": str(8 * 2**20)}


def test_embedded_cluster_workers_start_with_the_settings():
    with connect(LocalClusterSpec(workers=1), env={"KVIKIO_NTHREADS": "4"}) as c:
        assert list(c.run(lambda: os.environ.get("KVIKIO_NTHREADS")).values()) == ["4"]
        assert list(c.run(lambda: os.environ.get("RAYON_NUM_THREADS")).values()) == ["1"]


# ---------------------------------------------------------------------------- slurm

def test_slurm_gpu_script_content():
    s = render(SlurmOptions(pipeline="pipelines/quickstart.yaml", nodes=4, gpus_per_node=8,
                            partition="gpu", time="04:00:00", account="ml", protocol="ucx",
                            interface="ib0", rmm_pool_size="0.9",
                            container_image="nvcr.io/nvidia/rapidsai/base:26.10-cuda12-py3.11",
                            overrides=("output.path=/lustre/run",)), "quickstart")
    for line in ("#SBATCH --nodes=4", "#SBATCH --gpus-per-node=8", "#SBATCH --partition=gpu",
                 "#SBATCH --time=04:00:00", "#SBATCH --account=ml", "#SBATCH --ntasks-per-node=1",
                 "#SBATCH --job-name=gpupipe-quickstart", "set -euo pipefail",
                 "EXPECTED_WORKERS=$(( SLURM_JOB_NUM_NODES * 8 ))", "trap cleanup EXIT",
                 'exit "$status"'):
        assert line in s, line
    assert ('"$PYTHON" -m dask scheduler --scheduler-file="$SCHEDULER_FILE" --protocol=ucx '
            '--interface=ib0 --port=0 --dashboard-address=:0 --preload=gpupipe.runner.lost_workers &'
            ) in s
    assert ('"$PYTHON" -m dask cuda worker --scheduler-file="$SCHEDULER_FILE" --interface=ib0 '
            '--enable-cudf-spill --rmm-pool-size=0.9 &') in s
    assert "\nexport DASK_DISTRIBUTED__SCHEDULER__WORKER_TTL=15s\n" in s   # ucx's default
    # in the container, its own python3; checked there, not on the batch host
    assert "\nPYTHON=python3\n" in s and "cannot import" not in s
    assert s.count("--container-image=nvcr.io/nvidia/rapidsai/base:26.10-cuda12-py3.11") == 3
    driver = [ln for ln in s.splitlines() if " run " in ln and not ln.startswith("#")][0]
    assert f"run {os.path.abspath('pipelines/quickstart.yaml')} --scheduler-file=" in driver
    assert '--min-workers="$EXPECTED_WORKERS"' in driver and "--set=output.path=/lustre/run" in driver
    assert driver.startswith("srun ")  # in the container too
    assert "--dedicated" not in driver and "MALLOC_" not in s   # dask-cuda's workers
    assert subprocess.run(["bash", "-n"], input=s, text=True).returncode == 0


def test_slurm_cpu_script_and_option_errors():
    s = render(SlurmOptions(pipeline="p.yaml", nodes=2, cpu=True, cpus_per_node=32), "p")
    assert "#SBATCH --cpus-per-task=32" in s and "--gpus-per-node" not in s
    assert "dask worker --scheduler-file=\"$SCHEDULER_FILE\" --nworkers=32 --nthreads=1" in s
    assert "EXPECTED_WORKERS=$(( SLURM_JOB_NUM_NODES * 32 ))" in s
    lines = [ln for ln in s.splitlines() if " run " in ln and not ln.startswith("#")]
    # no container: the batch step is the driver, with the environment's own Python
    assert lines[0].startswith('"$PYTHON" -m gpupipe.cli run ')
    # the job's workers run its pipeline only (extract_html may end one), and their allocator
    # is set as in gpupipe's local workers, unless the job's environment sets it
    assert " --no-progress --dedicated" in lines[0]
    assert ('\nexport MALLOC_TRIM_THRESHOLD_="${MALLOC_TRIM_THRESHOLD_:-4194304}"\n'
            'export MALLOC_MMAP_THRESHOLD_="${MALLOC_MMAP_THRESHOLD_:-4194304}"\n') in s
    assert "\nPYTHON=python3\n" in s   # SlurmOptions' default; the CLI resolves it
    assert "if ! \"$PYTHON\" -c 'import gpupipe, distributed' 2>/dev/null; then" in s
    assert "UCX_TLS" not in s and "--protocol=tcp" in s
    # UCX on CPU nodes (tested across hosts in tests/cluster/test_hosts.py): its TCP and
    # shared-memory transports, no CUDA context, distributed-ucxx checked before srun
    u = render(SlurmOptions(pipeline="p.yaml", cpu=True, protocol="ucx"), "p")
    assert '\nexport UCX_TLS="${UCX_TLS:-tcp,self,sm}"\n' in u
    assert ('\nexport DASK_DISTRIBUTED_UCXX__CREATE_CUDA_CONTEXT='
            '"${DASK_DISTRIBUTED_UCXX__CREATE_CUDA_CONTEXT:-False}"\n') in u
    assert "'import gpupipe, distributed, distributed_ucxx'" in u
    assert "--nthreads=1 --memory-limit=auto --protocol=ucx &" in u
    with pytest.raises(SpecError, match="--nodes"):
        SlurmOptions(pipeline="p.yaml", nodes=0)


def test_slurm_steps_run_the_python_of_gpupipes_environment(tmp_path):
    """The scheduler, workers and driver come from the environment of the gpupipe named (its
    console script's #! line), or --python, or the Python running `gpupipe slurm`."""
    env_bin = tmp_path / "env" / "bin"
    env_bin.mkdir(parents=True)
    script = env_bin / "gpupipe"
    script.write_text(f"#!{env_bin / 'python'}\nimport sys\n")
    assert python_for(gpupipe=str(script)) == str(env_bin / "python")
    script.write_text("#!/usr/bin/env -S python3.11 -u\n")
    assert python_for(gpupipe=str(script)) == "python3.11"
    assert python_for(python="/opt/py/bin/python", gpupipe=str(script)) == "/opt/py/bin/python"
    assert python_for() == sys.executable and python_for(container=True) == "python3"
    (tmp_path / "plain").write_text("echo hi\n")
    with pytest.raises(SpecError, match="not a console script with a #! line; give --python"):
        python_for(gpupipe=str(tmp_path / "plain"))
    with pytest.raises(SpecError, match="--gpupipe '/no/such/gpupipe': No such file"):
        python_for(gpupipe="/no/such/gpupipe")
    out = tmp_path / "job.sbatch"
    r = cli("slurm", "pipelines/quickstart.yaml", "--cpu", "--gpupipe",
            os.path.join(BIN, "gpupipe"), "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert f"\nPYTHON={os.path.join(BIN, 'python')}\n" in out.read_text()
    assert "\nexport DASK_DISTRIBUTED__SCHEDULER__WORKER_TTL=20s\n" in out.read_text()
    r = cli("slurm", "pipelines/quickstart.yaml", "--cpu", "--worker-ttl", "45s")
    assert "\nexport DASK_DISTRIBUTED__SCHEDULER__WORKER_TTL=45s\n" in r.stdout, r.stderr


def test_slurm_takes_the_pipelines_cuda_cluster_settings(tmp_path):
    """The job's workers get what the pipeline file's cluster section (kind: cuda) asks for; a
    flag on the command line wins; a CPU job keeps the network settings only."""
    pipe = tmp_path / "p.yaml"
    pipe.write_text(open("pipelines/quickstart.yaml").read() + (
        "cluster: {kind: cuda, protocol: ucx, interface: ib0, rmm_pool_size: 0.8,\n"
        "          enable_nvlink: true, enable_infiniband: false, rmm_async: false,\n"
        "          device_memory_limit: 0.7}\n"))
    r = cli("slurm", str(pipe), "--nodes", "2")
    assert r.returncode == 0, r.stderr
    assert ('"$PYTHON" -m dask scheduler --scheduler-file="$SCHEDULER_FILE" --protocol=ucx '
            '--interface=ib0 ') in r.stdout
    assert ('"$PYTHON" -m dask cuda worker --scheduler-file="$SCHEDULER_FILE" --interface=ib0 '
            '--enable-cudf-spill --rmm-pool-size=0.8 --disable-infiniband --enable-nvlink '
            '--device-memory-limit=0.7 &') in r.stdout
    assert "WORKER_TTL=15s" in r.stdout   # ucx's
    r = cli("slurm", str(pipe), "--interface", "ib1", "--rmm-pool-size", "70GB")
    assert "--interface=ib1 --enable-cudf-spill --rmm-pool-size=70GB" in r.stdout, r.stderr
    r = cli("slurm", str(pipe), "--cpu")
    assert r.returncode == 0, r.stderr
    assert "--nthreads=1 --memory-limit=auto --protocol=ucx --interface=ib0 &" in r.stdout
    assert "rmm" not in r.stdout and "nvlink" not in r.stdout
    r = cli("slurm", str(pipe), "--protocol", "tcp")
    assert r.returncode == 2
    assert "--protocol tcp: the pipeline's cluster section sets enable_infiniband" in r.stderr


def test_slurm_cli_validates_the_pipeline_and_writes_an_executable(tmp_path):
    out = tmp_path / "job.sbatch"
    r = cli("slurm", "pipelines/quickstart.yaml", "--nodes", "2", "--gpus-per-node", "4",
            "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert out.stat().st_mode & stat.S_IXUSR and "#SBATCH --nodes=2" in out.read_text()
    bad = tmp_path / "bad.yaml"
    bad.write_text("input: {path: data/sample}\nstages: [{stage: lenght_filter}]\n"
                   "output: {path: out/x}\n")
    r = cli("slurm", str(bad))
    assert r.returncode == 2 and "did you mean 'length_filter'" in r.stderr


SRUN = """#!/usr/bin/env bash
# stand-in for Slurm's srun on one node: drop the options, run the command
while [[ $# -gt 0 && "$1" == -* ]]; do shift; done
exec "$@"
"""
SCONTROL = """#!/usr/bin/env bash
echo localhost
"""


def _slurm_env(tmp_path: Path) -> dict:
    shims = tmp_path / "shims"
    shims.mkdir()
    for name, body in (("srun", SRUN), ("scontrol", SCONTROL)):
        (shims / name).write_text(body)
        (shims / name).chmod(0o755)
    # PATH without the environment of gpupipe: the script finds dask and gpupipe through the
    # Python it names
    path = [d for d in os.environ["PATH"].split(os.pathsep) if d != BIN]
    return {**os.environ, "PATH": os.pathsep.join([str(shims), *path]), "SLURM_JOB_ID": "42",
            "SLURM_JOB_NUM_NODES": "1", "SLURM_JOB_NODELIST": "localhost"}


def _pids_alive(pattern: str) -> list[str]:
    r = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True)
    return r.stdout.split()


@pytest.mark.parametrize("fails", [False, True], ids=["ok", "failing-pipeline"])
def test_generated_cpu_script_runs_the_scheduler_file_flow(tmp_path, small_corpus, fails):
    """The script itself, end to end on this machine: scheduler, workers, driver, teardown."""
    pipe = tmp_path / "p.yaml"
    stages = "[{stage: tokenize, tokenizer: /no/such/tokenizer.json}]" if fails else \
        "[{stage: length_filter, min_words: 20}]"
    pipe.write_text(textwrap.dedent(f"""\
        name: slurm-test
        input: {{path: {small_corpus}}}
        stages: {stages}
        output: {{path: {tmp_path / 'run'}}}
        """))
    workdir = tmp_path / f"sched-{fails}"
    script = tmp_path / "job.sbatch"
    script.write_text(render(SlurmOptions(pipeline=str(pipe), cpu=True, workers_per_node=2,
                                          workdir=str(workdir),
                                          python=os.path.join(BIN, "python")), "slurm-test"))
    r = subprocess.run(["bash", str(script)], cwd=tmp_path, env=_slurm_env(tmp_path),
                       capture_output=True, text=True, timeout=300, start_new_session=True)
    try:
        if fails:
            assert r.returncode == 2, r.stdout + r.stderr  # the driver's exit code (a spec error)
            assert "tokenizer" in r.stderr
        else:
            assert r.returncode == 0, r.stdout + r.stderr
            summary = json.loads((tmp_path / "run" / "run.json").read_text())
            assert summary["status"] == "complete"
            assert summary["cluster"]["kind"] == "scheduler_file"
            assert summary["cluster"]["workers"] == 2
        assert "gpupipe: driver exited with" in r.stdout
        assert not (workdir / "scheduler.json").exists()
        assert not _pids_alive(str(workdir))  # scheduler and workers are gone
    finally:
        for pid in _pids_alive(str(workdir)):
            os.kill(int(pid), signal.SIGKILL)


# ---------------------------------------------------------------------------- io-bench

def test_generated_script_stops_before_srun_without_gpupipes_python(tmp_path):
    """A Python that cannot import gpupipe (the system's, here) stops the job at once, naming
    it, before any srun starts a daemon."""
    script = tmp_path / "job.sbatch"
    script.write_text(render(SlurmOptions(pipeline="pipelines/quickstart.yaml", cpu=True,
                                          workdir=str(tmp_path / "w"), python="/usr/bin/python3"),
                             "q"))
    env = _slurm_env(tmp_path)
    (tmp_path / "shims" / "srun").write_text("#!/bin/sh\necho SRUN-RAN >&2\nexit 9\n")
    r = subprocess.run(["bash", str(script)], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2, r.stdout + r.stderr
    assert ("gpupipe: /usr/bin/python3 cannot import gpupipe, distributed on "
            in r.stderr) and "--python" in r.stderr and "SRUN-RAN" not in r.stderr


def test_io_bench_reads_every_byte_with_each_method(tmp_path):
    r = cli("io-bench", "data/sample", "--repeat", "2", "--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    size = sum(p.stat().st_size for p in Path("data/sample").glob("*.jsonl.gz"))
    assert report["bytes"] == size and report["files"] == 5
    for name in ("posix", "pyarrow"):
        assert report["methods"][name]["bytes"] == size
        assert len(report["methods"][name]["passes_mb_s"]) == 2
    from gpupipe.runner.cluster import probe_gpu

    if not probe_gpu()[0]:
        assert "no usable GPU" in report["methods"]["kvikio"]["skipped"]
    r = cli("io-bench", str(tmp_path / "nothing-here"))
    assert r.returncode == 1 and "matches no file" in r.stderr


def test_io_bench_parquet_files_are_decoded(tmp_path, small_corpus):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": ["a" * 1000] * 100}), tmp_path / "a.parquet")
    from gpupipe.iobench import run

    report = run([str(tmp_path / "a.parquet")], repeat=1)
    assert report["methods"]["pyarrow_parquet"]["bytes"] == (tmp_path / "a.parquet").stat().st_size


# ---------------------------------------------------------------------------- on a GPU

def _tables(directory: Path) -> dict[str, list[dict]]:
    """Every Parquet file under ``directory`` as rows, sorted (row for row, whatever the file
    layout of the run)."""
    import pyarrow.parquet as pq

    out = {}
    for f in sorted(directory.rglob("*.parquet")):
        if f.is_file():
            rows = pq.read_table(f).to_pylist()
            out[str(f.relative_to(directory))] = sorted(rows, key=repr)
    return out


def _counts(summary: dict) -> dict:
    keep = ("stage", "backend", "docs_in", "docs_out", "bytes_in", "bytes_out", "drops",
            "counters")
    return {"read": {k: v for k, v in summary["read"].items() if k != "seconds"},
            "stages": [{k: s[k] for k in keep if k != "backend"} for s in summary["stages"]],
            "accounting": summary["accounting"], "output": {
                k: summary["output"][k] for k in ("docs", "bytes", "partitions")}}


@pytest.mark.gpu
@pytest.mark.parametrize("pipeline,extra", [
    ("quickstart", []), ("english_web", []), ("web_dedup", []),
    ("web_dedup", ["exact_dedup.normalize=false"]),  # xxHash64 keys hashed on the GPU
])
def test_backend_cudf_on_a_local_cuda_cluster_gives_the_pandas_run(tmp_path, pipeline, extra):
    """The same pipeline file, pandas on a CPU cluster and cuDF on a LocalCUDACluster: shards
    and data byte for byte, rejected rows and dedup audit row for row, run.json counts equal."""
    pytest.importorskip("dask_cuda")
    path = f"pipelines/{pipeline}.yaml"
    cpu = gp.Pipeline.from_yaml(path, overrides=[
        *extra, "backend=pandas", "cluster.kind=local", f"output.path={tmp_path / 'cpu'}"]).run(
        workers=2, progress=False)
    gpu = gp.Pipeline.from_yaml(path, overrides=[
        *extra, "backend=cudf", "cluster.kind=cuda", f"output.path={tmp_path / 'gpu'}"]).run(
        progress=False)
    assert gpu.summary["backend"]["used"] == "cudf"
    native = [s["stage"] for s in gpu.summary["stages"] if s["backend"] == "cudf"]
    assert native and all(s["seconds"] > 0 for s in gpu.summary["stages"]
                          if s["backend"] == "cudf" and s["docs_in"])
    assert "tokenize" in native   # every one of these pipelines tokenizes, on the device
    assert _counts(gpu.summary) == _counts(cpu.summary)
    a, b = Path(cpu.output), Path(gpu.output)
    for sub in ("data", "shards"):
        files = sorted(p.relative_to(a / sub) for p in (a / sub).rglob("*") if p.is_file()
                       and p.name != "manifest.json")
        for f in files:
            assert (b / sub / f).read_bytes() == (a / sub / f).read_bytes(), f"{sub}/{f}"
    for sub in ("rejected", "dedup"):
        assert _tables(b / sub) == _tables(a / sub)


@pytest.mark.gpu
def test_io_bench_reads_into_gpu_memory(tmp_path):
    from gpupipe.iobench import run

    report = run([str(p) for p in Path("data/sample").glob("*.gz")], repeat=1,
                 methods=["kvikio"])
    assert report["methods"]["kvikio"]["bytes"] == report["bytes"]


def test_dockerfile_base_image_matches_the_gpu_extra():
    import re
    import tomllib

    docker = Path("Dockerfile").read_text()
    rapids = re.search(r"ARG RAPIDS_VERSION=(\S+)", docker).group(1)
    assert "FROM rapidsai/base:${RAPIDS_VERSION}-cuda${CUDA_VERSION}-py${PYTHON_VERSION}" in docker
    extra = tomllib.loads(Path("pyproject.toml").read_text())["project"]["optional-dependencies"]
    cudf = next(d for d in extra["gpu"] if d.startswith("cudf-cu12"))
    assert cudf == f"cudf-cu12=={rapids}.*"
    assert re.search(r"ARG CUDA_VERSION=(\d+)", docker).group(1) == "12"  # the -cu12 wheels
