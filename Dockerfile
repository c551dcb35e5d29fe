# gpupipe on the RAPIDS base image: cuDF, dask-cudf, dask-cuda, KvikIO and UCX come with the image
# (conda); gpupipe and its CPU dependencies are added with pip, pinned to the same dask/pandas.
#
#   docker build -t gpupipe:gpu .
#   docker run --rm --gpus all -v "$PWD:/work" -w /work gpupipe:gpu \
#       gpupipe run pipelines/english_web.yaml --set cluster.kind=cuda
#   # CDI (Podman, or Docker with CDI enabled):
#   docker run --rm --device nvidia.com/gpu=all -v "$PWD:/work" -w /work gpupipe:gpu gpupipe --help
#
# Keep RAPIDS_VERSION equal to the RAPIDS pins of the `gpu` extra in pyproject.toml.
ARG RAPIDS_VERSION=26.10
ARG CUDA_VERSION=12
ARG PYTHON_VERSION=3.12
FROM rapidsai/base:${RAPIDS_VERSION}-cuda${CUDA_VERSION}-py${PYTHON_VERSION}

# the image runs as its non-root user `rapids`, who owns the conda environment; the source tree is
# handed to that user because pip builds in it
USER root
COPY pyproject.toml README.md /opt/gpupipe/
COPY gpupipe /opt/gpupipe/gpupipe
COPY pipelines /opt/gpupipe/pipelines
COPY data /opt/gpupipe/data
RUN chown -R rapids /opt/gpupipe
USER rapids
WORKDIR /opt/gpupipe
# not the [gpu] extra: the image's conda environment already has RAPIDS, and pip wheels of the
# same libraries would shadow it
# the CPU kernels compiled ahead of time at build time into the installed package
# (`gpupipe warmup --aot`: numba's ahead-of-time compiler, which needs a C compiler), so that no
# container compiles them. The CUDA kernels need the GPU to compile (a build sees none):
# `gpupipe warmup --cuda` once when the container starts, with NUMBA_CACHE_DIR on a volume, does
# them (numba needs to be able to write to that cache: a user other than `rapids` adds to it)
USER root
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev \
 && rm -rf /var/lib/apt/lists/*
USER rapids
ENV NUMBA_CACHE_DIR=/opt/gpupipe/numba-cache
RUN pip install --no-cache-dir . \
 && gpupipe --version \
 && python -c "import cudf, dask_cuda, kvikio; print('RAPIDS', cudf.__version__)" \
 && gpupipe warmup --aot \
 && mkdir -p /opt/gpupipe/numba-cache && chmod -R a+rwX /opt/gpupipe/numba-cache

# UCX over InfiniBand needs locked memory: run with --ulimit memlock=-1 (and --device
# /dev/infiniband --cap-add IPC_LOCK --network host on multi-node jobs)
ENV PYTHONUNBUFFERED=1
CMD ["gpupipe", "--help"]
