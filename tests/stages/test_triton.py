"""classify with runtime: triton against a real Triton Inference Server (nvidia-pytriton's bundled
tritonserver, started here from .venv-triton, which `make test` builds): the scores are the
server's own for each text, over gRPC and HTTP, with retries, and a server that cannot be
reached stops the run with its URL."""

from __future__ import annotations

import os
import socket
import subprocess
import time

import numpy as np
import pytest

import gpupipe as gp
from gpupipe.errors import SpecError, StageError
from gpupipe.stages import Classify
from gpupipe.stages.models import runtimes
from tests.conftest import REPO
from tests.stages.onnx_models import mean_pool_linear

SERVER_PY = REPO / ".venv-triton" / "bin" / "python"
TOKENIZER = str(REPO / "data" / "tokenizer.json")
tritonclient = pytest.importorskip("tritonclient.grpc")
if not (REPO / ".venv-triton" / ".installed").exists():
    pytest.skip("no Triton test server (make test builds .venv-triton)", allow_module_level=True)


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    d = tmp_path_factory.mktemp("triton")
    onnx_path = mean_pool_linear(d / "clf.onnx", vocab=8192, classes=3,
                                 weights=str(d / "clf.npz"))
    http, grpc, metrics = _free_ports(3)
    # the backend stub links the system libpython; give it the server Python's own
    libdir = subprocess.run([str(SERVER_PY), "-c", "import sysconfig; "
                             "print(sysconfig.get_config_var('LIBDIR'))"],
                            capture_output=True, text=True, check=True).stdout.strip()
    env = {**os.environ, "LD_LIBRARY_PATH": libdir}
    log = open(d / "server.log", "w")
    proc = subprocess.Popen([str(SERVER_PY), str(REPO / "tests" / "triton_server.py"),
                             str(d / "clf.npz"), "--http-port", str(http), "--grpc-port",
                             str(grpc), "--metrics-port", str(metrics), "--fail-first", "3"],
                            stdout=log, stderr=subprocess.STDOUT, env=env)
    client = tritonclient.InferenceServerClient(f"127.0.0.1:{grpc}")
    deadline = time.time() + 120
    while True:
        try:
            if client.is_model_ready("clf") and client.is_model_ready("flaky"):
                break
        except Exception:  # noqa: BLE001 - not up yet
            pass
        if proc.poll() is not None or time.time() > deadline:
            proc.kill()
            pytest.fail("the Triton server did not start:\n" + (d / "server.log").read_text()[-3000:])
        time.sleep(0.5)
    server_info = {"grpc": f"grpc://127.0.0.1:{grpc}", "http": f"http://127.0.0.1:{http}",
                   "onnx": onnx_path, "client": client}
    yield server_info
    del client, server_info["client"]    # closes the channel now, not at interpreter exit
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()


def _server_logits(client, texts: list[str], max_length: int = 128) -> np.ndarray:
    """The server called with tritonclient directly, one text per request (no padding)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(TOKENIZER)
    tok.enable_truncation(max_length)
    rows = []
    for t in texts:
        ids = np.array([tok.encode(t).ids or [1]], dtype=np.int64)
        inputs = []
        for name, arr in (("input_ids", ids), ("attention_mask", np.ones_like(ids))):
            x = tritonclient.InferInput(name, list(arr.shape), "INT64")
            x.set_data_from_numpy(arr)
            inputs.append(x)
        rows.append(client.infer("clf", inputs).as_numpy("logits")[0])
    return np.array(rows, dtype=np.float32)


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_triton_scores_are_the_server_s(server, sample_records, protocol):
    texts = [r["text"] for r in sample_records[:60]]
    stage = Classify(runtime="triton", url=server[protocol], model="clf", tokenizer=TOKENIZER,
                     labels=("a", "b", "c"), max_length=128, batch_tokens=2048)
    assert stage.check() == (f"model clf on Triton at {server[protocol]}, 3 classes → "
                             f"quality_label, quality_score")
    got = stage.scores(texts)
    want = runtimes.softmax(_server_logits(server["client"], texts))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    # the same model run by ONNX Runtime locally agrees
    local = Classify(runtime="onnx", model=server["onnx"], tokenizer=TOKENIZER, max_length=128)
    np.testing.assert_allclose(got, local.scores(texts), rtol=1e-4, atol=1e-5)


def test_triton_in_a_pipeline(server, client, tmp_path, sample_records):
    stage = Classify(runtime="triton", url=server["grpc"], model="clf", tokenizer=TOKENIZER,
                     labels=("a", "b", "c"), max_length=128, keep=("c",))
    res = gp.Pipeline(input={"path": "data/sample/*.jsonl.gz", "id_column": "id"},
                      stages=[stage], output=str(tmp_path / "o")).run(client=client,
                                                                      progress=False)
    out = res.to_pandas()
    assert set(out["quality_label"]) == {"c"}
    labels = np.array(["a", "b", "c"])[
        _server_logits(server["client"], [r["text"] for r in sample_records]).argmax(axis=1)]
    assert len(out) == int((labels == "c").sum())
    assert res.stage("classify")["drops"] == {"label_not_kept": int((labels != "c").sum())}


def test_retries_then_a_clear_failure(server, sample_records):
    texts = [r["text"] for r in sample_records[:3]]
    flaky = dict(runtime="triton", url=server["grpc"], model="flaky", tokenizer=TOKENIZER,
                 max_length=32, batch_tokens=10**6)
    with pytest.raises(StageError, match=r"Triton Inference Server at grpc://127\.0\.0\.1:\d+, "
                                         r"model 'flaky': request failed after 2 attempt\(s\)"):
        Classify(**flaky, retries=1).scores(texts)        # fails twice (two of three left)
    got = Classify(**flaky, retries=3).scores(texts)      # fails once more, then answers
    want = runtimes.softmax(_server_logits(server["client"], texts, max_length=32))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_unreachable_server_and_wrong_names_stop_before_any_work(server, tmp_path):
    port = _free_ports(1)[0]
    base = {"stage": "classify", "runtime": "triton", "model": "clf", "tokenizer": TOKENIZER}

    def refused(stage: dict, message: str):
        p = gp.Pipeline(input={"path": "data/sample/*.jsonl.gz"}, output=str(tmp_path / "o"),
                        stages=[stage])
        with pytest.raises(SpecError, match=message):
            p.run(workers=1, progress=False)
        assert not (tmp_path / "o" / "data").exists()

    refused({**base, "url": f"grpc://127.0.0.1:{port}"},
            rf"stage 0 \(classify\): cannot reach a Triton Inference Server at "
            rf"grpc://127\.0\.0\.1:{port}")
    refused({**base, "url": server["grpc"], "model": "nope"},
            r"has no ready model 'nope'")
    refused({**base, "url": server["http"], "input_ids_name": "ids"},
            r"the model has no input named 'ids'; its inputs are \['input_ids', "
            r"'attention_mask'\]")
    with pytest.raises(SpecError, match="runtime: triton needs url"):
        gp.Pipeline(input={"path": "data/sample/*.jsonl.gz"}, output="unused",
                    stages=[base])
