"""A real Triton Inference Server for the tests (nvidia-pytriton's bundled tritonserver, run by
the Python of .venv-triton: pytriton needs numpy < 2, so it cannot share gpupipe's venv).

Serves ``clf``: the mean-pool + linear classifier of tests/stages/onnx_models.py from its
weights (.npz), logits for [batch, tokens] int64 ``input_ids`` / ``attention_mask``; and
``flaky``, which fails its first ``--fail-first`` requests (retries).

    python tests/triton_server.py WEIGHTS --http-port P --grpc-port Q --metrics-port R
"""

from __future__ import annotations

import argparse

import numpy as np
from pytriton.decorators import batch
from pytriton.model_config import ModelConfig, Tensor
from pytriton.triton import Triton, TritonConfig


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("weights")
    ap.add_argument("--http-port", type=int, required=True)
    ap.add_argument("--grpc-port", type=int, required=True)
    ap.add_argument("--metrics-port", type=int, required=True)
    ap.add_argument("--fail-first", type=int, default=2)
    args = ap.parse_args()
    w = np.load(args.weights)
    e, lin, bias = w["E"], w["W"], w["b"]

    def logits(input_ids, attention_mask):
        m = attention_mask.astype(np.float32)[:, :, None]
        mean = (e[input_ids] * m).sum(axis=1) / m.sum(axis=1)
        return {"logits": (mean @ lin + bias).astype(np.float32)}

    failures = {"left": args.fail_first}

    @batch
    def clf(input_ids, attention_mask):
        return logits(input_ids, attention_mask)

    @batch
    def flaky(input_ids, attention_mask):
        if failures["left"] > 0:
            failures["left"] -= 1
            raise RuntimeError("flaky model: failing on purpose")
        return logits(input_ids, attention_mask)

    spec = dict(inputs=[Tensor(name="input_ids", dtype=np.int64, shape=(-1,)),
                        Tensor(name="attention_mask", dtype=np.int64, shape=(-1,))],
                outputs=[Tensor(name="logits", dtype=np.float32, shape=(lin.shape[1],))],
                config=ModelConfig(max_batch_size=16))
    config = TritonConfig(http_port=args.http_port, grpc_port=args.grpc_port,
                          metrics_port=args.metrics_port)
    with Triton(config=config) as triton:
        triton.bind(model_name="clf", infer_func=clf, **spec)
        triton.bind(model_name="flaky", infer_func=flaky, **spec)
        triton.serve()


if __name__ == "__main__":
    main()
