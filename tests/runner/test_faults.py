"""Real faults on a real run of the CLI: SIGKILL of the whole process group (driver and
workers) inside the read segment, inside fuzzy and span dedup's steps and while the shards are
written, then a rerun; and Ctrl-C (SIGINT to the group). Shards, data and the dedup audits must
equal an uninterrupted run's, byte for byte."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, SAMPLE

BIN = os.path.join(os.path.dirname(sys.executable), "gpupipe")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """The sample corpus as 40 plain JSONL files (40 read partitions: room to stop inside)."""
    d = tmp_path_factory.mktemp("faults")
    recs = [json.loads(line) for f in sorted(SAMPLE.glob("*.jsonl.gz"))
            for line in gzip.open(f, "rt", encoding="utf-8")]
    (d / "in").mkdir()
    for k in range(40):
        with open(d / "in" / f"p{k:02d}.jsonl", "w", encoding="utf-8") as f:
            f.writelines(json.dumps({"id": r["id"], "text": r["text"]}) + "\n"
                         for r in recs[k::40])
    return d


def pipeline_file(corpus: Path, out: Path) -> Path:
    p = out.parent / f"{out.name}.yaml"
    p.write_text(f"""\
input: {{path: {corpus / 'in'}, id_column: id}}
stages:
  - {{stage: normalize_text}}
  - {{stage: length_filter, min_words: 20}}
  - {{stage: exact_dedup}}
  - {{stage: fuzzy_dedup}}
  - {{stage: span_dedup, unit: line, span: 2, min_words: 5}}
  - {{stage: tokenize, tokenizer: {REPO / 'data' / 'tokenizer.json'}}}
output: {{path: {out}, shards: {{num_shards: 3, splits: {{train: 0.9, valid: 0.1}}}}}}
""")
    return p


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start(pipe: Path, failpoints: str | None = None, sigint: bool = False) -> subprocess.Popen:
    """`gpupipe run` in a new process group. ``sigint``: with SIGINT's default action, as from
    a terminal, even when this suite runs as a background job (whose shell ignores SIGINT, and
    every child inherits that)."""
    env = {**os.environ, "GPUPIPE_FAILPOINTS": failpoints} if failpoints else None
    return subprocess.Popen([BIN, "run", str(pipe), "-w", "2", "--no-progress"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, cwd=REPO, env=env,
                            preexec_fn=_default_sigint if sigint else None)


def run_to_end(pipe: Path) -> None:
    """`gpupipe run` in a new process group, which must complete (exit 0)."""
    p = start(pipe)
    _, err = p.communicate(timeout=300)
    assert p.returncode == 0, err[-3000:]


def digests(out: Path) -> dict:
    files = [p for sub in ("data", "shards", "dedup/duplicates.parquet", "dedup/spans.parquet",
                             "dedup/index")
             for p in sorted((out / sub).rglob("*")) if p.is_file()
             and (p.suffix in (".parquet", ".bin", ".idx", ".npy") or
                  p.parent.parent.name == "index")]
    return {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def group_gone(pgid: int, within: float = 15.0) -> bool:
    t0 = time.time()
    while time.time() - t0 < within:
        r = subprocess.run(["ps", "-o", "stat=", "-g", str(pgid)], capture_output=True, text=True)
        if all(s.startswith("Z") for s in r.stdout.split()):   # none, or reaped zombies only
            return True
        time.sleep(0.2)
    return False


def wait_for(proc: subprocess.Popen, ready, timeout: float = 120.0) -> bool:
    t0 = time.time()
    while time.time() - t0 < timeout:
        if ready():
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.02)
    return False


@pytest.fixture(scope="module")
def reference(corpus):
    out = corpus / "reference"
    run_to_end(pipeline_file(corpus, out))
    return digests(out)


def markers(pattern: str, at_least: int):
    def ready():
        return len(list(Path("/").glob(pattern.lstrip("/")))) >= at_least
    return ready


FUZZY = ["signatures", "candidates", "pairs", "select", "drop"]


def _soak(point: str):
    """A kill point that `make test` leaves to `-m slow`: each costs a run and a half (~25 s on
    2 cores), and a point kept in the default run kills the same stage at another step (the
    step runner's resume is one code path for every step)."""
    return pytest.param(point, marks=pytest.mark.slow)


@pytest.mark.parametrize("point", [
    "row/00-length_filter/10",                            # the read + row segment
    # exact_dedup's steps: also killed inside a run on object storage (tests/io/test_s3_output)
    _soak("step/exact_dedup/keys/7"), _soak("step/exact_dedup/losers/3"),
    "step/fuzzy_dedup/pairs/3",
    *[_soak(f"step/fuzzy_dedup/{s}/{0 if s == 'select' else 3}")
      for s in ("signatures", "candidates", "select", "drop")],
    "step-done/fuzzy_dedup/pairs",                         # between two steps
    "index/fuzzy_dedup",                                   # index written, not committed
    "step/span_dedup/count/1",
    *[_soak(f"step/span_dedup/{s}/{k}") for s, k in (("spans", 5), ("cut", 7))],
    _soak("shard-route/20"), _soak("shard-write/train/1"),
    "manifest",                                            # shards written, manifest not yet
])
def test_sigkill_of_the_process_group_then_rerun(corpus, reference, point):
    """A failpoint kills the driver and every worker (SIGKILL to the group) right after the
    named piece of work is written; the rerun resumes and gives the reference bytes."""
    out = corpus / ("kill-" + point.replace("/", "-"))
    pipe = pipeline_file(corpus, out)
    p = start(pipe, failpoints=point)
    _, err = p.communicate(timeout=300)
    assert p.returncode == -signal.SIGKILL, err[-2000:]
    assert group_gone(p.pid)
    assert not (out / "shards" / "manifest.json").exists()
    if point.startswith("index/"):   # every partition of the index, but no manifest yet
        assert not (out / "dedup" / "index" / "fuzzy_dedup" / "manifest.json").exists()
    run_to_end(pipe)
    assert digests(out) == reference
    summary = json.loads((out / "run.json").read_text())
    assert summary["status"] == "complete" and summary["accounting"]["balanced"]
    if point.startswith("row/"):      # the partitions written before the kill were kept
        assert summary["segments"][0]["reused"] >= 1
    if point.startswith("step/fuzzy_dedup/"):   # the steps before were not redone
        k = FUZZY.index(point.split("/")[2])
        steps = next(s for s in summary["stages"] if s["stage"] == "fuzzy_dedup")["steps"]
        assert [s["computed"] for s in steps[:k]] == [0] * k
        assert steps[k]["computed"] < steps[k]["tasks"] or steps[k]["tasks"] == 1


def bloom_pipe(corpus: Path, out: Path) -> Path:
    p = out.parent / f"{out.name}.yaml"
    p.write_text(f"input: {{path: {corpus / 'in'}, id_column: id}}\n"
                 f"stages: [{{stage: span_dedup, counting: bloom, min_words: 5}}]\n"
                 f"output: {{path: {out}}}\n")
    return p


@pytest.fixture(scope="module")
def bloom_reference(corpus):
    run_to_end(bloom_pipe(corpus, corpus / "bloom-reference"))
    return digests(corpus / "bloom-reference")


@pytest.mark.parametrize("point", ["step/span_dedup/bloom/0", "step/span_dedup/cut/12"])
def test_sigkill_inside_span_dedup_counting_with_bloom(corpus, bloom_reference, point):
    """span_dedup's Bloom-filter steps (the one bloom task, and the cut that reads its bits)
    resume to the bytes of a run never killed (the spans step is exact counting's, killed
    above)."""
    out = corpus / ("bloom-kill-" + point.replace("/", "-"))
    p = start(bloom_pipe(corpus, out), failpoints=point)
    _, err = p.communicate(timeout=300)
    assert p.returncode == -signal.SIGKILL, err[-2000:]
    run_to_end(bloom_pipe(corpus, out))
    assert digests(out) == bloom_reference
    # data, the span audit's files, the span index and its manifest
    assert sum("spans.parquet" in k for k in bloom_reference) == 37
    assert len(bloom_reference) == 40 + 37 + 40 + 1


def _children(pid: int | str) -> list[str]:
    return subprocess.run(["pgrep", "-P", str(pid)], capture_output=True,
                          text=True).stdout.split()


def worker_pids(driver: int) -> list[int]:
    """The driver's worker processes: spawned by it, or forked by its forkserver."""
    out = []
    for k in _children(driver):
        try:
            cmdline = open(f"/proc/{k}/cmdline").read()
        except OSError:
            continue
        if "spawn_main" in cmdline:
            out.append(int(k))
        elif "forkserver" in cmdline:
            out.extend(int(w) for w in _children(k))
    return out


def test_sigkill_of_one_worker_the_run_goes_on(corpus, reference):
    out = corpus / "kill-worker"
    p = start(pipeline_file(corpus, out))
    assert wait_for(p, markers(f"{out}/checkpoints/00-*/_done/part-*", 5))
    workers = worker_pids(p.pid)
    assert len(workers) == 2
    os.kill(workers[0], signal.SIGKILL)
    _, err = p.communicate(timeout=300)
    assert p.returncode == 0, err[-3000:]   # the nanny restarts it; Dask reruns its tasks
    assert digests(out) == reference


def test_sigkill_of_the_driver_alone_leaves_no_process(corpus, reference):
    out = corpus / "kill-driver"
    pipe = pipeline_file(corpus, out)
    p = start(pipe)
    assert wait_for(p, markers(f"{out}/checkpoints/00-*/_done/part-*", 5))
    os.kill(p.pid, signal.SIGKILL)
    p.communicate(timeout=60)
    assert group_gone(p.pid, within=30)   # the orphaned workers notice and exit
    run_to_end(pipe)
    assert digests(out) == reference


def test_ctrl_c_stops_cleanly_and_the_next_run_resumes(corpus, reference):
    out = corpus / "sigint"
    pipe = pipeline_file(corpus, out)
    p = start(pipe, sigint=True)
    assert wait_for(p, markers(f"{out}/checkpoints/00-*/_done/part-*", 5))
    os.killpg(p.pid, signal.SIGINT)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130, [ln for ln in err.splitlines() if "INFO" not in ln][-60:]
    assert err.strip().splitlines()[-1] == "interrupted — run the same command again to resume"
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert group_gone(p.pid)
    assert json.loads((out / "run.json").read_text())["status"] == "failed"
    run_to_end(pipe)
    assert digests(out) == reference


@pytest.mark.slow
def test_soak_random_kill_points(corpus, reference):
    """20 rounds: SIGKILL the group at a random moment, rerun, until a run completes; each
    round's final output must equal the reference."""
    import random

    rng = random.Random(int(os.environ.get("GPUPIPE_SOAK_SEED", "1")))
    log = []
    for round_ in range(int(os.environ.get("GPUPIPE_SOAK_ROUNDS", "20"))):
        out = corpus / f"soak-{round_}"
        pipe = pipeline_file(corpus, out)
        kills = 0
        while True:
            p = start(pipe)
            delay = rng.uniform(0.3, 9.0)
            try:
                p.wait(timeout=delay)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.communicate(timeout=60)
                assert group_gone(p.pid)
                kills += 1
                continue
            _, err = p.communicate()
            assert p.returncode == 0, err[-3000:]
            break
        assert digests(out) == reference, f"round {round_} after {kills} kill(s)"
        log.append(kills)
    print(f"soak: {len(log)} rounds, kills per round {log}, all byte-identical")
