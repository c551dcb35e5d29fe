"""The `gpupipe` command as a user types it (real subprocesses, real data)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

GPUPIPE = os.path.join(os.path.dirname(sys.executable), "gpupipe")


def cli(*args, cwd=None):
    return subprocess.run([GPUPIPE, *args], capture_output=True, text=True, cwd=cwd,
                          timeout=300)


def test_validate_ok():
    r = cli("validate", "pipelines/quickstart.yaml")
    assert r.returncode == 0 and "valid" in r.stdout


def test_validate_broken_file_one_message_exit_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(open("pipelines/quickstart.yaml").read().replace(
        "stage: length_filter", "stage: gopher_qualty_filter").replace("min_words", "min_wrds"))
    r = cli("validate", str(bad))
    assert r.returncode == 2
    assert "Traceback" not in r.stderr and r.stdout == ""
    assert r.stderr.count("error:") == 1
    assert "unknown stage 'gopher_qualty_filter'" in r.stderr and f"{bad}:" in r.stderr


def test_validate_resolved_prints_defaults():
    r = cli("validate", "pipelines/quickstart.yaml", "--resolved")
    assert "max_blank_lines: 2" in r.stdout and "on_error: fail" in r.stdout


def test_explain_shows_fusing_and_boundaries(tmp_path):
    p = tmp_path / "p.yaml"
    p.write_text(open("pipelines/quickstart.yaml").read().replace(
        "  - stage: length_filter", "  - stage: repartition\n    npartitions: 2\n"
                                    "  - stage: length_filter"))
    r = cli("explain", str(p))
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "[0] row-local, fused: read jsonl  →  normalize_text()" in out
    assert "[1] global" in out and "repartition(npartitions=2)" in out
    assert "[2] row-local, fused: read checkpoint  →  length_filter(min_words=20)" in out
    assert "checkpoints/01-repartition/" in out and "backend  pandas" in out


def test_explain_names_the_tokenizer_engine_and_a_fallback(tmp_path):
    r = cli("explain", "pipelines/quickstart.yaml")
    assert r.returncode == 0, r.stderr
    assert ("tokenize: engine: gpupipe (byte-level BPE, gpt2 pre-tokenizer; same ids as "
            "tokenizers on 22 check texts)") in r.stdout
    spec = json.load(open("data/tokenizer.json"))
    spec["normalizer"] = {"type": "Lowercase"}
    (tmp_path / "tok.json").write_text(json.dumps(spec))
    p = tmp_path / "p.yaml"
    p.write_text(open("pipelines/quickstart.yaml").read().replace(
        "data/tokenizer.json", str(tmp_path / "tok.json")))
    r = cli("explain", str(p))
    assert r.returncode == 0, r.stderr
    assert ("tokenize: engine: huggingface (gpupipe's engine declined: normalizer 'Lowercase' "
            "(the engine implements none, NFC or NFKC))") in r.stdout
    r = cli("run", str(p), "--set", "tokenize.engine=gpupipe", "--output", str(tmp_path / "o"))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "engine: gpupipe cannot encode with" in r.stderr and "Lowercase" in r.stderr


def test_stages_and_schema():
    r = cli("stages")
    assert "length_filter  [row]" in r.stdout and "too_few_words" in r.stdout
    assert "repartition  [global]" in r.stdout
    info = json.loads(cli("stages", "--json").stdout)
    assert info["length_filter"]["parameters"]["min_words"] is None
    r = cli("stages", "lenght_filter")
    assert r.returncode == 2 and "did you mean 'length_filter'" in r.stderr
    schema = json.loads(cli("schema").stdout)
    assert schema["title"] == "gpupipe pipeline"


def test_run_quickstart(tmp_path):
    out = tmp_path / "run"
    r = cli("run", "pipelines/quickstart.yaml", "-o", str(out), "-w", "1", "--no-progress",
            "--set", "length_filter.min_words=40")
    assert r.returncode == 0, r.stderr
    assert "length_filter" in r.stdout and "too_few_words" in r.stdout
    assert f"output: {out}/data" in r.stdout
    summary = json.loads((out / "run.json").read_text())
    assert summary["pipeline"]["stages"][1]["min_words"] == 40
    assert summary["accounting"]["balanced"]
    assert "[0] read → normalize_text → length_filter" in r.stderr  # progress lines
    demo = subprocess.run([sys.executable, "-m", "gpupipe.demo", str(out)], capture_output=True,
                          text=True)
    assert "Decoded train/train-00000:0" in demo.stdout and "Training shards" in demo.stdout
    assert "shards: " in r.stdout and "--data-args-path" in r.stdout
    r = cli("inspect", str(out), "--doc", "train/train-00001:2")
    assert r.returncode == 0, r.stderr
    assert "ok: every shard matches the manifest" in r.stdout and "tokens, first ids" in r.stdout


@pytest.mark.parametrize("policy, code", [("fail", 1), ("skip", 0)])
def test_run_bad_input_policies(tmp_path, policy, code):
    data = tmp_path / "in.jsonl"
    data.write_bytes(b'{"text": "a fine line of text"}\n{"text": \n')
    p = tmp_path / "p.yaml"
    p.write_text(f"input: {{path: {data}, on_error: {policy}}}\noutput: {{path: {tmp_path}/o}}\n"
                 f"cluster: {{workers: 1}}\n")
    r = cli("run", str(p), "--no-progress")
    assert r.returncode == code, r.stderr
    assert "Traceback" not in r.stderr
    if policy == "fail":
        assert f"{data} line 2: malformed JSON" in r.stderr and "on_error: skip" in r.stderr
    else:
        assert "rejected malformed_json=1" in r.stdout
        assert "records in 2 = kept 1 + dropped 0 + rejected 1" in r.stdout


def test_attach_options_without_a_cluster_to_attach_to(tmp_path):
    """``--dedicated`` (like ``--min-workers`` and ``--timeout``) says something of a cluster
    the run attaches to: without ``--address`` or ``--scheduler-file`` it is an error, before
    anything runs."""
    r = cli("run", "pipelines/quickstart.yaml", "--dedicated", "-o", str(tmp_path / "run"))
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == ("error: --min-workers, --timeout and --dedicated need --address or "
                        "--scheduler-file\n")
    assert not (tmp_path / "run").exists()
