#!/usr/bin/env bash
# `backend: cudf` on the lent GPU machine, as the end of ONE call: mode 2 of the team's
# shared/device/README.md (RAPIDS 26.10 for CUDA 13 carried in pieces). Prepare and send the
# pieces as that page says (pack.sh deps, pack.sh rapids, then pack.sh next + one call per
# piece); append to the final call's command (carry [".whl"], timeout_s ~540):
#     && bash benchmarks/device_backend.sh
# It expects the final call's install in /tmp/site and writes to $OUT: versions, the cuDF
# contract and seam tests, the `gpu` tests (quickstart, english_web, web_dedup: cuDF on a
# LocalCUDACluster against pandas, byte for byte), and bench_gpu.py --pipeline (per-stage and
# end-to-end MB/s on both backends, same bytes or not). Nothing of this has run yet.
set -u
OUT=${OUT:-$(mktemp -d)}
export PYTHONPATH=/tmp/site:$PWD
python3 - <<'PY' 2>&1 | tee "$OUT/versions.txt"
import sys

import cudf
import dask
import dask_cuda
import numba

print("python", sys.version.split()[0], "cudf", cudf.__version__, "dask-cuda",
      dask_cuda.__version__, "dask", dask.__version__, "numba", numba.__version__,
      "check", int(cudf.Series([1, 2, 3]).sum()))
PY
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | tee "$OUT/gpu.txt"

timeout 60 python3 -m pytest -q -p no:cacheprovider tests/test_gpu_contract.py \
  tests/kernels/test_seam.py > "$OUT/contract.txt" 2>&1
echo "contract + seam tests exit $?"; tail -n 5 "$OUT/contract.txt"

timeout 300 python3 -m pytest -q -p no:cacheprovider -m gpu -x -rs tests/test_gpu_path.py \
  > "$OUT/gpu_tests.txt" 2>&1
echo "gpu tests exit $?"; tail -n 40 "$OUT/gpu_tests.txt"

timeout 150 python3 benchmarks/bench_gpu.py --pipeline pipelines/english_web.yaml --scale 5 \
  --workers 8 > "$OUT/bench_pipeline.json" 2> "$OUT/bench_pipeline.err"
echo "bench_gpu --pipeline exit $?"
head -c 4000 "$OUT/bench_pipeline.json"; tail -c 1500 "$OUT/bench_pipeline.err"
