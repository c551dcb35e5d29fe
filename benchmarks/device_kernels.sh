#!/usr/bin/env bash
# The GPU check of the text kernels as ONE call on the lent GPU machine (the team's
# shared/device/README.md, mode 1: numba-cuda + CuPy there, no cuDF needed). Prepare here with
#     bash ../shared/device/pack.sh deps        # -> .whl/ (dask, pandas, pydantic, ...)
# then make one device call with carry [".whl"], timeout_s ~420, command:
#     bash benchmarks/device_kernels.sh
# It writes versions, `warmup --cuda` twice (compile, then the disk cache), check-gpu (every
# kernel CPU vs GPU, bit for bit) and bench_gpu.py (GPU vs one CPU thread, and the tokenize
# stage's device path against HF) to $OUT and prints their tails.
set -u
OUT=${OUT:-$(mktemp -d)}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || { echo "installing .whl/ failed"; exit 3; }
export PYTHONPATH=/tmp/site:$PWD
python3 - <<'PY' | tee "$OUT/versions.txt"
import sys

import numba
import numpy

try:
    import numba_cuda
    nc = numba_cuda.__version__
except Exception as e:  # report, do not stop
    nc = f"absent ({e})"
print("python", sys.version.split()[0], "numba", numba.__version__, "numba-cuda", nc,
      "numpy", numpy.__version__)
PY
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | tee "$OUT/gpu.txt"
# every CUDA kernel compiled into an empty disk cache, then loaded from it (seconds of each)
export NUMBA_CACHE_DIR=/tmp/gpupipe-numba-cache
for pass in cold warm; do
  timeout 150 python3 -m gpupipe.cli warmup --cuda --stages length_filter \
    > "$OUT/warmup_cuda_$pass.txt" 2>&1
  echo "warmup --cuda ($pass) exit $?"; tail -n 3 "$OUT/warmup_cuda_$pass.txt"
done
timeout 200 python3 -m gpupipe.cli check-gpu data/sample --sample 2000 \
  > "$OUT/check_gpu.txt" 2> "$OUT/check_gpu.err"
echo "check-gpu exit $?"
tail -n 20 "$OUT/check_gpu.txt"; tail -c 1500 "$OUT/check_gpu.err"
timeout 200 python3 benchmarks/bench_gpu.py --scale 20 --repeat 3 \
  > "$OUT/bench_gpu.json" 2> "$OUT/bench_gpu.err"
echo "bench_gpu exit $?"
python3 - "$OUT/bench_gpu.json" <<'PY' || tail -c 2000 "$OUT/bench_gpu.err"
import json, sys
r = json.load(open(sys.argv[1]))
print(r["device"], r["documents"], "docs", r["mb"], "MB")
for k, v in r["kernels"].items():
    print(f"{k:22s} mismatches {v['mismatches']}  gpu {v['gpu']['mb_per_s']:>9} MB/s  "
          f"cpu1 {v['cpu_one_thread']['mb_per_s']:>7} MB/s  x{v['ratio']}")
print("gopher pair", r["gopher_pair"], "minhash", r["minhash_nemo_preset"])
print("tokenize", r["tokenize"])
PY
