"""The pipeline schema: what a pipeline file may say, validated before any data is touched.

A pipeline file is YAML; the same structure can be built in Python. Every error is reported with
the file, the line, the offending key and, for typos, the closest valid name.
"""

from __future__ import annotations

import contextvars
import copy
import os
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ByteSize,
    ConfigDict,
    Discriminator,
    Field,
    PrivateAttr,
    Tag,
    ValidationError,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from gpupipe.errors import SpecError, did_you_mean
from gpupipe.io.formats import FORMATS
from gpupipe.io.formats import infer as infer_format
from gpupipe.shards.formats import FORMATS as SHARD_FORMATS
from gpupipe.stages.base import Stage
from gpupipe.stages.registry import all_stages, get_stage

_STRICT = ConfigDict(extra="forbid")
_RAW_ERRORS: contextvars.ContextVar[bool] = contextvars.ContextVar("raw_errors", default=False)


class InputSpec(BaseModel):
    """Where documents come from."""

    model_config = _STRICT
    format: Literal[tuple(FORMATS)] | None = Field(  # type: ignore[valid-type]
        None, description=f"{' | '.join(FORMATS)}; inferred from the file names when omitted")
    path: str | list[str] = Field(description="file, directory or glob (or a list of them)")
    text_column: str = Field("text", description="field holding the document text")
    id_column: str | None = Field(
        None, description="field holding a document id; when absent ids are '<file>:<line>'")
    on_error: Literal["fail", "skip"] = Field(
        "fail", description="bad records: stop with file and line (fail) or set aside (skip)")
    columns: list[str] = Field(
        default_factory=list,
        description="Parquet input: further columns to read and carry through the run "
                    "unchanged (e.g. an embedding computed elsewhere, for semantic_dedup)")
    storage_options: dict[str, Any] = Field(
        default_factory=dict,
        description="fsspec options for remote paths (s3://, gs://, http(s)://): e.g. "
                    "{endpoint_url: http://minio:9000} or {anon: true}; credentials also come "
                    "from the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, "
                    "AWS_ENDPOINT_URL)")
    blocksize: ByteSize | None = Field(
        ByteSize(256 * 2**20),
        description="uncompressed JSONL files larger than this are read as several "
                    "partitions, cut at line boundaries; WARC files (compressed or not, "
                    "default 64 MiB) at record starts; null: one partition per file")

    def paths(self) -> list[str]:
        return [self.path] if isinstance(self.path, str) else list(self.path)

    def carried_columns(self) -> list[str]:
        """The columns besides id and text the input carries through the run: its format's
        own (WARC: url, warc_date, ...) and ``columns``."""
        from gpupipe.io.formats import get

        return list(dict.fromkeys([*get(self.resolved_format()).columns, *self.columns]))

    def resolved_format(self) -> str:
        """``format``, or what the file names say (`gpupipe.io.formats.infer`)."""
        return self.format if self.format is not None else infer_format(
            self.paths(), self.storage_options)


class LocalClusterSpec(BaseModel):
    """A `distributed.LocalCluster` started in-process, sized to the machine."""

    model_config = _STRICT
    kind: Literal["local"] = "local"
    workers: Annotated[int | None, Field(ge=1)] = Field(
        None, description="worker processes (default: one per CPU core)")
    threads_per_worker: Annotated[int, Field(ge=1)] = 1
    memory_limit: str = Field("auto", description="per worker, e.g. '4GB'; 'auto' splits RAM")
    host: str = Field("127.0.0.1", description="interface the scheduler and workers listen "
                                              "on; localhost unless asked otherwise")
    dashboard_address: str = Field("127.0.0.1:0", description="where the Dask dashboard "
                                                              "listens (':0': every interface)")
    start_method: Literal["forkserver", "spawn"] = Field(
        "forkserver", description="how worker processes start: forked from one process that "
        "imported gpupipe once (forkserver, a fraction of a second), or each a new interpreter "
        "that imports everything itself (spawn, seconds); forkserver falls back to spawn when "
        "the environment changed since it started")


def _memory_size(value: Any) -> int | float:
    """Bytes ('24GB', 25769803776) or a fraction of the device's memory (0 < x <= 1)."""
    if isinstance(value, bool):
        raise ValueError("expected a size such as '24GB' or a fraction such as 0.8")
    if isinstance(value, (int, float)):
        if 0 < value <= 1:
            return float(value)
        if value > 1 and float(value).is_integer():
            return int(value)
        raise ValueError(f"expected bytes (> 1) or a fraction in (0, 1] (got {value!r})")
    if isinstance(value, str):
        try:
            return _memory_size(float(value))
        except ValueError:
            pass
        from pydantic import TypeAdapter

        try:
            return int(TypeAdapter(ByteSize).validate_python(value))
        except ValidationError:
            raise ValueError(f"expected a size such as '24GB' or a fraction such as 0.8 "
                             f"(got {value!r})") from None
    raise ValueError(f"expected a size such as '24GB' or a fraction such as 0.8 (got {value!r})")


MemorySize = Annotated[int | float, BeforeValidator(_memory_size),
                       WithJsonSchema({"anyOf": [{"type": "string"}, {"type": "number"}]})]


class CudaClusterSpec(BaseModel):
    """A `dask_cuda.LocalCUDACluster`: one worker per GPU of this machine (needs ``.[gpu]``)."""

    model_config = _STRICT
    kind: Literal["cuda"]
    devices: str | list[Annotated[int, Field(ge=0)]] | None = Field(
        None, description="GPUs to use (CUDA_VISIBLE_DEVICES), e.g. '0,1' or [0, 1]; "
                          "default: all")
    protocol: Literal["tcp", "ucx"] = Field(
        "tcp", description="ucx: UCX transport (NVLink / InfiniBand); needs distributed-ucxx")
    interface: str | None = Field(None, description="network interface, e.g. ib0")
    enable_infiniband: bool | None = Field(
        None, description="UCX over InfiniBand (protocol: ucx); null: UCX picks the transports "
                          "itself (dask-cuda >= 26.06 with distributed-ucxx)")
    enable_nvlink: bool | None = Field(
        None, description="UCX over NVLink (protocol: ucx); null: automatic, as above")
    enable_rdmacm: bool | None = Field(
        None, description="RDMA connection manager (protocol: ucx, with InfiniBand); null: "
                          "automatic")
    rmm_pool_size: MemorySize | None = Field(
        None, description="RMM memory pool per GPU: bytes ('24GB') or a fraction of the "
                          "device memory (0.8); null: no pool")
    rmm_async: bool = Field(False, description="use CUDA's async allocator (cudaMallocAsync)")
    enable_cudf_spill: bool = Field(
        True, description="let cuDF spill device buffers to host memory instead of failing "
                          "with out-of-memory")
    device_memory_limit: MemorySize | None = Field(
        None, description="per GPU, where Dask starts spilling (bytes or fraction); "
                          "null: dask-cuda's default")
    threads_per_worker: Annotated[int, Field(ge=1)] = 1
    memory_limit: str = Field("auto", description="host memory per worker")
    dashboard_address: str = Field("127.0.0.1:0", description="where the Dask dashboard "
                                                              "listens (':0': every interface)")
    partition_fraction: Annotated[float, Field(gt=0, le=0.5)] = Field(
        1 / 32, description="default input.blocksize as a fraction of one GPU's memory")

    @model_validator(mode="after")
    def _check(self):
        ucx_only = [k for k in ("enable_infiniband", "enable_nvlink", "enable_rdmacm")
                    if getattr(self, k) is not None]
        if ucx_only and self.protocol != "ucx":
            raise ValueError(f"{', '.join(ucx_only)} {'need' if len(ucx_only) > 1 else 'needs'} "
                             f"protocol: ucx")
        if self.enable_rdmacm and self.enable_infiniband is False:
            raise ValueError("enable_rdmacm needs InfiniBand (enable_infiniband: true or null)")
        if self.rmm_async and self.rmm_pool_size is not None:
            # dask-cuda 26.10 warns and says it will raise: the async allocator has its own pool
            raise ValueError("rmm_pool_size is not used with rmm_async: true (CUDA's async "
                             "allocator manages its own pool); remove one of them")
        if isinstance(self.devices, str):
            parts = [p.strip() for p in self.devices.split(",")]
            if not all(p.isdigit() or p.startswith(("GPU-", "MIG-")) for p in parts):
                raise ValueError(f"devices: {self.devices!r} is not a list of GPU indices or "
                                 f"UUIDs such as '0,1'")
        return self

    def visible_devices(self) -> str | None:
        if self.devices is None:
            return None
        if isinstance(self.devices, str):
            return ",".join(p.strip() for p in self.devices.split(","))
        return ",".join(str(d) for d in self.devices)


class AddressClusterSpec(BaseModel):
    """Attach to a running Dask scheduler by address."""

    model_config = _STRICT
    kind: Literal["address"]
    address: str = Field(description="e.g. tcp://10.0.0.1:8786")
    timeout: Annotated[float, Field(gt=0)] = 30.0
    min_workers: Annotated[int, Field(ge=1)] = Field(
        1, description="wait (up to timeout) until this many workers have joined")
    dedicated: bool = Field(
        False, description="the cluster runs this pipeline only, as a `gpupipe slurm` CPU "
        "job's does: a one-thread CPU worker under a nanny may then end itself to stop a page "
        "past extract_html's timeout (the nanny starts another), instead of extracting every "
        "page in a helper process, which costs about 20%")


class SchedulerFileClusterSpec(BaseModel):
    """Attach to a Dask scheduler through its scheduler file (Slurm, shared storage)."""

    model_config = _STRICT
    kind: Literal["scheduler_file"]
    path: str = Field(description="the file `dask scheduler --scheduler-file` wrote")
    timeout: Annotated[float, Field(gt=0)] = 30.0
    min_workers: Annotated[int, Field(ge=1)] = Field(
        1, description="wait (up to timeout) until this many workers have joined")
    dedicated: bool = Field(
        False, description="the cluster runs this pipeline only, as a `gpupipe slurm` CPU "
        "job's does: a one-thread CPU worker under a nanny may then end itself to stop a page "
        "past extract_html's timeout (the nanny starts another), instead of extracting every "
        "page in a helper process, which costs about 20%")


class KvikioSpec(BaseModel):
    """KvikIO settings applied on every worker (GPU reads and writes; inert on the CPU path)."""

    model_config = _STRICT
    compat_mode: Literal["auto", "on", "off"] | None = Field(
        None, description="on: POSIX I/O through host memory; off: GPUDirect Storage (cuFile) "
                          "only; auto: GDS when available")
    nthreads: Annotated[int | None, Field(ge=1)] = Field(
        None, description="threads of KvikIO's pool (parallel reads of one file)")
    task_size: ByteSize | None = Field(None, description="bytes per parallel read task")

    def env(self) -> dict[str, str]:
        """The KVIKIO_* environment variables KvikIO reads at start-up."""
        out = {}
        if self.compat_mode is not None:
            out["KVIKIO_COMPAT_MODE"] = self.compat_mode.upper()
        if self.nthreads is not None:
            out["KVIKIO_NTHREADS"] = str(self.nthreads)
        if self.task_size is not None:
            out["KVIKIO_TASK_SIZE"] = str(int(self.task_size))
        return out


class IoSpec(BaseModel):
    """I/O settings."""

    model_config = _STRICT
    kvikio: KvikioSpec = Field(default_factory=KvikioSpec)


def _cluster_kind(value: Any) -> str | None:
    if isinstance(value, dict):
        return value.get("kind", "local")  # `cluster: {workers: 4}` means a local cluster
    return getattr(value, "kind", None)


ClusterSpec = Annotated[
    Annotated[LocalClusterSpec, Tag("local")] | Annotated[CudaClusterSpec, Tag("cuda")]
    | Annotated[AddressClusterSpec, Tag("address")]
    | Annotated[SchedulerFileClusterSpec, Tag("scheduler_file")],
    Discriminator(_cluster_kind),
]


SPLITS = ("train", "valid", "test")


class SourceSpec(InputSpec):
    """One named input of ``inputs:``, with stages of its own (row-local) that run on its
    documents before the shared ones."""

    stages: list[Annotated[Stage, WithJsonSchema({"type": "object"})]] = Field(
        default_factory=list, description="row-local stages for this source only")

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    @field_validator("stages", mode="before")
    @classmethod
    def _build_stages(cls, value):
        if not isinstance(value, list):
            raise ValueError("expected a list of stages")
        return [build_stage(v, f"stages[{i}]") for i, v in enumerate(value)]


class MixtureSpec(BaseModel):
    """How the sources of ``inputs:`` are blended in the shards."""

    model_config = _STRICT
    weights: dict[str, Annotated[float, Field(gt=0)]] = Field(
        description="token share of each source in the output (normalised to sum to 1)")
    mode: Literal["materialize", "weights"] = Field(
        "materialize", description="materialize: one set of shards holding the shares; "
                                   "weights: shards per source and Megatron blend weights")
    total_tokens: Annotated[int | None, Field(ge=1)] = Field(
        None, description="materialize: tokens of the mixed train split; default: the largest "
                          "total that needs no source repeated")
    seed: int = Field(0, description="seed of the draw of documents (by id)")

    def shares(self) -> dict[str, float]:
        total = sum(self.weights.values())
        return {k: v / total for k, v in self.weights.items()}


class ShardSpec(BaseModel):
    """Training shards written after a ``tokenize`` stage (``<output>/shards/``)."""

    model_config = _STRICT
    num_shards: Annotated[int | None, Field(ge=1)] = Field(
        None, description="shards of the train split (other splits get a proportional number)")
    target_shard_tokens: Annotated[int | None, Field(ge=1)] = Field(
        None, description="instead of num_shards: about this many tokens per shard")
    seed: int = Field(1234, description="shard = hash64(seed, id) mod shards; order = that hash")
    splits: dict[Literal["train", "valid", "test"], Annotated[float, Field(ge=0, le=1)]] = Field(
        default_factory=lambda: {"train": 1.0},
        description="fraction of documents per split, by the same hash; sums to 1")
    format: Literal[tuple(SHARD_FORMATS)] = "megatron"  # type: ignore[valid-type]
    packing: Literal["none", "bfd"] = Field(
        "none", description="bfd: best-fit-decreasing packs of exactly seq_length tokens")
    seq_length: Annotated[int | None, Field(ge=2)] = None
    text: bool = Field(
        False, description="also store each document's text beside its tokens (formats "
                           "that hold it: mds, as a `text` column); not with packing")
    compression: str | None = Field(
        None, description="compress each shard file (formats that can: mds, with `zstd` or "
                          "`zstd:N`, N from 1 to 22, as MosaicML Streaming's MDSWriter does: "
                          "`P.mds.zstd`)")

    @model_validator(mode="after")
    def _check(self):
        if self.num_shards is not None and self.target_shard_tokens is not None:
            raise ValueError("give num_shards or target_shard_tokens, not both")
        if self.text and not SHARD_FORMATS[self.format].takes_text:
            able = [k for k, f in SHARD_FORMATS.items() if f.takes_text]
            raise ValueError(f"text: true needs a format that stores text ({', '.join(able)}); "
                             f"{self.format} holds tokens only")
        if self.compression is not None:
            if not SHARD_FORMATS[self.format].takes_compression:
                able = [k for k, f in SHARD_FORMATS.items() if f.takes_compression]
                raise ValueError(f"compression needs a format that compresses its files "
                                 f"({', '.join(able)}); {self.format} does not")
            from gpupipe.shards.formats.mds import zstd_level

            zstd_level(self.compression)
        if self.text and self.packing != "none":
            raise ValueError("text: true needs packing: none (a packed sequence holds pieces "
                             "of several documents)")
        total = sum(self.splits.values())
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"split fractions must sum to 1 (they sum to {total:g})")
        if self.packing == "bfd" and self.seq_length is None:
            raise ValueError("packing: bfd needs seq_length (tokens per packed sequence)")
        return self


class OutputSpec(BaseModel):
    """Where the run directory goes."""

    model_config = _STRICT
    path: str = Field(description="run directory (run.json, data/, checkpoints/, ...)")
    overwrite: bool = Field(
        False, description="delete an existing run directory first instead of resuming it")
    shards: ShardSpec | None = Field(
        None, description="training shards; written when the pipeline ends with tokenize")
    storage_options: dict[str, Any] | None = Field(
        None, description="options of the output filesystem when path is a URL (s3fs: "
                          "endpoint_url, key, secret, client_kwargs: {region_name}); "
                          "credentials can also come from the environment")
    staging: str | None = Field(
        None, description="when path is a URL: the local directory the run works in and "
                          "uploads from (default: staging/<name>-<hash> under "
                          "$GPUPIPE_STAGING, else ~/.cache/gpupipe); workers on several "
                          "hosts need it on a shared filesystem")
    sync_seconds: float = Field(
        60.0, ge=0, description="when path is a URL: upload what was committed this often "
                                "while the run works (0: only when a segment ends), so a "
                                "killed run resumes from the remote")


def build_stage(entry: Any, where: str = "stage") -> Stage:
    """A stage object from its pipeline-file mapping ``{"stage": name, **params}``."""
    if isinstance(entry, Stage):
        return entry
    if not isinstance(entry, dict):
        raise SpecError(f"{where}: expected a mapping like {{stage: length_filter, ...}}, "
                        f"got {type(entry).__name__}")
    if "stage" not in entry:
        raise SpecError(f"{where}: missing key 'stage' (the stage name)")
    params = dict(entry)
    cls = get_stage(params.pop("stage"))
    try:
        return cls(**params)
    except ValidationError as e:
        raise SpecError("\n".join(_format_errors(e, cls, where, {}))) from None


class PipelineSpec(BaseModel):
    """A validated pipeline: input, stages in order, output, execution settings."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)
    version: Literal[1] = Field(1, description="version of the pipeline-file format")
    name: str = Field("pipeline", description="a name for the run (logs, report, manifest)")
    input: InputSpec | None = Field(None, description="one source of documents")
    inputs: dict[Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]+$")], SourceSpec] | None = Field(
        None, description="instead of input: named sources, each with its own row-local "
                          "stages; documents carry a `source` column")
    mixture: MixtureSpec | None = Field(
        None, description="token shares of the sources of inputs: in the shards")
    backend: Literal["auto", "pandas", "cudf"] = Field(
        "auto", description="dataframe library of the partitions; auto: cuDF when a GPU "
                            "works, pandas otherwise")
    cluster: ClusterSpec = Field(
        default_factory=LocalClusterSpec,
        description="where tasks run: local (default), cuda, address or scheduler_file")
    stages: list[Annotated[Stage, WithJsonSchema({"type": "object"})]] = Field(
        default_factory=list, description="stages, run in order (see the stage reference)")
    output: OutputSpec = Field(description="the run directory and the shards")
    io: IoSpec = Field(default_factory=IoSpec, description="I/O settings")
    seed: int = Field(0, description="recorded in run.json; random choices take their own "
                                      "seeds (sample, fuzzy_dedup, output.shards, mixture)")
    _all_stages: list | None = PrivateAttr(default=None)

    def __init__(self, **data: Any):
        # Python construction reports problems like a pipeline file does (SpecError);
        # parse_pipeline formats them itself, with file and line numbers
        if _RAW_ERRORS.get():
            super().__init__(**data)
            return
        try:
            super().__init__(**data)
        except ValidationError as e:
            lines = _format_errors(e, type(self), None, {})
            raise SpecError("invalid pipeline: " + "; ".join(lines)) from None

    @field_validator("stages", mode="before")
    @classmethod
    def _build_stages(cls, value):
        if not isinstance(value, list):
            raise ValueError("expected a list of stages")
        return [build_stage(v, f"stages[{i}]") for i, v in enumerate(value)]

    @field_validator("output", mode="before")
    @classmethod
    def _output_path(cls, value):
        return {"path": os.fspath(value)} if isinstance(value, (str, os.PathLike)) else value

    @field_validator("input", mode="before")
    @classmethod
    def _input_path(cls, value):
        return {"path": os.fspath(value)} if isinstance(value, (str, os.PathLike)) else value

    @field_validator("inputs", mode="before")
    @classmethod
    def _inputs_paths(cls, value):
        if isinstance(value, dict):
            return {k: {"path": os.fspath(v)} if isinstance(v, (str, os.PathLike)) else v
                    for k, v in value.items()}
        return value

    @model_validator(mode="after")
    def _one_input(self):
        if (self.input is None) == (self.inputs is None):
            raise ValueError("give input (one source) or inputs (named sources), not both"
                             if self.input is not None else "input (or inputs) is required")
        if self.inputs is not None:
            if not self.inputs:
                raise ValueError("inputs: name at least one source")
            for name, src in self.inputs.items():
                for i, st in enumerate(src.stages):
                    if st.kind != "row" or st.is_sink:
                        raise ValueError(f"inputs.{name}.stages[{i}] ({st.stage_name}): a "
                                         f"source's own stages must be row-local filters or "
                                         f"transforms; put it in the shared stages")
        if self.mixture is not None:
            if self.inputs is None:
                raise ValueError("mixture needs inputs: (named sources) to blend")
            if set(self.mixture.weights) != set(self.inputs):
                raise ValueError(f"mixture.weights must name every source of inputs exactly "
                                 f"(inputs: {', '.join(self.inputs)}; weights: "
                                 f"{', '.join(self.mixture.weights)})")
            if self.sink_stage() is None:
                raise ValueError("mixture: the token shares need a tokenize stage at the end")
        return self

    def sources(self) -> dict[str, InputSpec]:
        """Every input by name (a single ``input:`` is named ``input``)."""
        return dict(self.inputs) if self.inputs is not None else {"input": self.input}

    def all_stages(self) -> list[Stage]:
        """What the runner executes: each source's own stages (wrapped so that they see only
        that source's documents), then the shared stages."""
        from gpupipe.stages.sources import ForSource

        if self.inputs is None:
            return self.stages
        if self._all_stages is None:
            self._all_stages = [ForSource(source=name, inner=st)
                                for name, src in self.inputs.items()
                                for st in src.stages] + list(self.stages)
        return self._all_stages

    @model_validator(mode="after")
    def _sink_last(self):
        sinks = [i for i, s in enumerate(self.stages) if s.is_sink]
        if sinks:
            if sinks != [len(self.stages) - 1]:
                name = self.stages[sinks[0]].stage_name
                raise ValueError(f"stages: {name} must be the last stage (the shards are "
                                 f"written from its output)")
            if self.output.shards is None:
                self.output.shards = ShardSpec()
        elif self.output.shards is not None:
            raise ValueError("output.shards needs a tokenize stage at the end of the pipeline")
        added: dict[str, int] = {}
        for i, st in enumerate(self.stages):
            for col in st.added_columns():
                if col in added:
                    raise ValueError(
                        f"stages[{i}] ({st.stage_name}) adds column {col!r}, which "
                        f"stages[{added[col]}] already adds; use one of them, or "
                        f"mode: drop for one of the filters")
                added[col] = i
        return self

    def sink_stage(self) -> Stage | None:
        """The stage that ends the run (`Stage.is_sink`: tokenize), or None."""
        return self.stages[-1] if self.stages and self.stages[-1].is_sink else None

    def to_dict(self) -> dict[str, Any]:
        """The resolved pipeline (every default filled in), as a pipeline file would say it."""
        data = self.model_dump(mode="json", exclude={"stages", "inputs"})
        data["stages"] = [s.to_dict() for s in self.stages]
        if self.inputs is not None:
            data["inputs"] = {k: {**v.model_dump(mode="json", exclude={"stages"}),
                                  "stages": [s.to_dict() for s in v.stages]}
                              for k, v in self.inputs.items()}
        order = ["version", "name", "input", "inputs", "backend", "cluster", "stages",
                 "mixture", "output", "io", "seed"]
        return {k: data[k] for k in order
                if k in data and not (k in ("input", "inputs", "mixture") and data[k] is None)}


# ---------------------------------------------------------------------------------------------
# Loading pipeline files


def load_yaml(path: str) -> tuple[dict, dict]:
    """The mapping in a pipeline file and a map from key paths to 1-based line numbers."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise SpecError(f"{path}: cannot read the pipeline file ({e.strerror})") from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        if node is not None:
            _check_expansion(node, path)
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else path
        problem = getattr(e, "problem", None) or str(e)
        raise SpecError(f"{where}: invalid YAML: {problem}") from None
    if not isinstance(data, dict):
        raise SpecError(f"{path}: a pipeline file must be a mapping with keys like "
                        f"'input', 'stages', 'output' (found {type(data).__name__})")
    lines: dict[tuple, int] = {}
    _collect_lines(node, (), lines)
    return data, lines


#: nodes a pipeline file may expand to once its aliases are followed (real files have hundreds)
MAX_YAML_NODES = 100_000


def _check_expansion(root, path: str) -> None:
    """Refuse a file whose aliases expand to more than `MAX_YAML_NODES` nodes ("billion
    laughs"): each alias re-uses a node, so the count is taken per distinct node, memoised."""
    sizes: dict[int, int] = {}
    open_: set[int] = set()
    stack = [(root, False)]
    while stack:
        node, done = stack.pop()
        if id(node) in sizes:
            continue
        children = ([v for pair in node.value for v in pair]
                    if isinstance(node, yaml.MappingNode) else
                    node.value if isinstance(node, yaml.SequenceNode) else [])
        if not done:
            if id(node) in open_:
                continue
            if any(id(c) in open_ for c in children):
                raise SpecError(f"{path}: a YAML alias refers to a value that contains it "
                                f"(a recursive structure); a pipeline file cannot be one")
            open_.add(id(node))
        if done:
            open_.discard(id(node))
            sizes[id(node)] = 1 + sum(sizes[id(c)] for c in children)
            if sizes[id(node)] > MAX_YAML_NODES:
                raise SpecError(f"{path}: the YAML expands to more than {MAX_YAML_NODES:,} "
                                f"values through its aliases (an alias bomb?); a pipeline file "
                                f"is a few hundred")
            continue
        stack.append((node, True))
        stack.extend((c, False) for c in children if id(c) not in sizes)


def _collect_lines(node, path: tuple, out: dict) -> None:
    out[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            k = key.value
            out[path + (k,)] = key.start_mark.line + 1
            _collect_lines(value, path + (k,), out)
            out[path + (k,)] = key.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _collect_lines(item, path + (i,), out)


def apply_overrides(data: dict, overrides: list[str] | None) -> dict:
    """Apply ``key.path=value`` overrides (values parsed as YAML) to a raw pipeline mapping.

    The first key may be a stage name used once in the pipeline: ``length_filter.min_words=50``.

    >>> apply_overrides({"output": {"path": "a"}}, ["output.path=b"])
    {'output': {'path': 'b'}}
    """
    data = copy.deepcopy(data)
    for item in overrides or []:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise SpecError(f"--set {item!r}: expected key=value, e.g. --set output.path=out/x")
        try:
            value = yaml.safe_load(raw) if raw != "" else ""
        except yaml.YAMLError:
            value = raw
        parts: list[Any] = key.split(".")
        stages = data.get("stages") if isinstance(data.get("stages"), list) else []
        names = [s.get("stage") if isinstance(s, dict) else None for s in stages]
        if parts[0] not in data and parts[0] in names:
            if names.count(parts[0]) > 1:
                raise SpecError(f"--set {item!r}: stage {parts[0]!r} appears more than once; "
                                f"use stages.N.{'.'.join(parts[1:])} with its position N")
            parts = ["stages", names.index(parts[0]), *parts[1:]]
        target = data
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            if isinstance(target, list):
                try:
                    idx = int(part)
                    target[idx]
                except (ValueError, IndexError):
                    raise SpecError(f"--set {item!r}: {part!r} is not a position in a list "
                                    f"of {len(target)}") from None
                if last:
                    target[idx] = value
                else:
                    target = target[idx]
            elif isinstance(target, dict):
                if last:
                    target[part] = value
                else:
                    target = target.setdefault(part, {})
            else:
                raise SpecError(f"--set {item!r}: {'.'.join(map(str, parts[:i]))} is not a mapping")
    return data


def parse_pipeline(data: dict, *, source: str = "<pipeline>", lines: dict | None = None, cls=None):
    """Validate a raw mapping into ``cls`` (a `PipelineSpec` subclass); `SpecError` lists every problem."""
    cls = cls or PipelineSpec
    lines = lines or {}
    messages: list[str] = []
    raw_stages = data.get("stages", [])
    stages: list[Stage] = []
    if raw_stages is None:
        raw_stages = []
    if not isinstance(raw_stages, list):
        messages.append(_at(source, lines, ("stages",)) + "'stages' must be a list of stage mappings")
        raw_stages = []
    for i, entry in enumerate(raw_stages):
        loc = ("stages", i)
        if not isinstance(entry, dict) or "stage" not in entry:
            messages.append(_at(source, lines, loc) + f"stages[{i}]: expected a mapping with a "
                            f"'stage' key naming a stage (`gpupipe stages` lists them)")
            continue
        params = dict(entry)
        name = params.pop("stage")
        try:
            stage_cls = get_stage(name)
        except SpecError as e:
            messages.append(_at(source, lines, loc + ("stage",)) + f"stages[{i}]: {e}")
            continue
        try:
            stages.append(stage_cls(**params))
        except ValidationError as e:
            messages.extend(_format_errors(e, stage_cls, f"stages[{i}] ({name})", lines,
                                           source=source, prefix=loc))
    rest = {k: v for k, v in data.items() if k != "stages"}
    spec = None
    token = _RAW_ERRORS.set(True)
    try:
        spec = cls.model_validate({**rest, "stages": stages})
    except ValidationError as e:
        messages[:0] = _format_errors(e, cls, None, lines, source=source, prefix=())
    finally:
        _RAW_ERRORS.reset(token)
    if messages:
        head = f"{source}: invalid pipeline ({len(messages)} problem{'s' * (len(messages) > 1)})"
        raise SpecError("\n".join([head] + [f"  {m}" for m in messages]))
    return spec


def _at(source: str, lines: dict, loc: tuple) -> str:
    for n in range(len(loc), -1, -1):
        if loc[:n] in lines:
            return f"{source}:{lines[loc[:n]]}: "
    return f"{source}: " if source else ""


def _dotted(loc: tuple) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


_MODEL_OF_FIELD = {"input": InputSpec, "output": OutputSpec, "io": IoSpec}
_NESTED_MODELS = {("output", "shards"): ShardSpec, ("io", "kvikio"): KvikioSpec}
_CLUSTERS = {"local": LocalClusterSpec, "cuda": CudaClusterSpec, "address": AddressClusterSpec,
             "scheduler_file": SchedulerFileClusterSpec}


def _allowed_keys(owner, loc: tuple) -> list[str]:
    """Valid keys of the mapping at ``loc`` inside ``owner`` (a model or stage class)."""
    if owner is not None and not issubclass(owner, BaseModel):  # a stage dataclass
        import dataclasses

        return [f.name for f in dataclasses.fields(owner)] + ["stage"]
    if not loc:
        return list(PipelineSpec.model_fields)
    if loc[0] in _MODEL_OF_FIELD and len(loc) == 1:
        return list(_MODEL_OF_FIELD[loc[0]].model_fields)
    if tuple(loc) in _NESTED_MODELS:
        return list(_NESTED_MODELS[tuple(loc)].model_fields)
    if loc[0] == "cluster" and len(loc) == 2 and loc[1] in _CLUSTERS:
        return list(_CLUSTERS[loc[1]].model_fields)
    return []


def _format_errors(err: ValidationError, owner, label: str | None, lines: dict, *,
                   source: str = "", prefix: tuple = ()) -> list[str]:
    is_stage = owner is not None and not issubclass(owner, BaseModel)
    out = []
    for e in err.errors(include_url=False):
        loc = tuple(e["loc"])
        # discriminated unions put the tag in the location: ("cluster", "local", "workers")
        if loc[:1] == ("cluster",) and len(loc) > 1 and loc[1] in _CLUSTERS:
            shown = ("cluster",) + loc[2:]
        else:
            shown = loc
        full = prefix + shown
        where = _at(source, lines, full) if source else ""
        name = _dotted(shown) if shown else ""
        what = f"{label}: " if label else ""
        kind = e["type"]
        if kind in ("extra_forbidden", "unexpected_keyword_argument"):
            key = str(loc[-1])
            allowed = _allowed_keys(owner if is_stage else None, loc[:-1] if not is_stage else ())
            hint = did_you_mean(key, allowed)
            valid = f" (valid: {', '.join(sorted(allowed))})" if allowed and not hint else ""
            out.append(f"{where}{what}unknown key {key!r}{hint}{valid}")
        elif kind in ("missing", "missing_keyword_argument"):
            out.append(f"{where}{what}missing required key {name!r}")
        elif kind == "union_tag_invalid":
            tag = e.get("ctx", {}).get("tag")
            hint = did_you_mean(tag, _CLUSTERS)
            out.append(f"{where}{what}{name}.kind: unknown cluster kind {tag!r}{hint} "
                       f"(valid: {', '.join(_CLUSTERS)})")
        elif kind == "value_error":
            msg = e["msg"].removeprefix("Value error, ")
            out.append(f"{where}{what}{name + ': ' if name else ''}{msg}")
        else:
            got = e.get("input")
            shown_input = "" if isinstance(got, (dict, list)) or got is None else f" (got {got!r})"
            out.append(f"{where}{what}{name}: {e['msg']}{shown_input}")
    return out


# ---------------------------------------------------------------------------------------------
# JSON Schema for editors


def json_schema() -> dict:
    """JSON Schema of pipeline files, with one entry per registered stage (for autocompletion)."""
    from pydantic import TypeAdapter

    schema = PipelineSpec.model_json_schema()
    defs = schema.setdefault("$defs", {})
    variants = []
    for name, cls in all_stages().items():
        sub = TypeAdapter(cls).json_schema(ref_template="#/$defs/{model}")
        defs.update(sub.pop("$defs", {}))
        sub["properties"] = {"stage": {"const": name, "description": cls.summary()},
                             **sub.get("properties", {})}
        sub["required"] = ["stage", *sub.get("required", [])]
        sub["title"] = name
        variants.append(sub)
    schema["properties"]["stages"] = {"type": "array", "items": {"oneOf": variants},
                                      "description": "stages, run in order"}
    schema["title"] = "gpupipe pipeline"
    return schema


__all__ = [
    "AddressClusterSpec",
    "InputSpec",
    "LocalClusterSpec",
    "OutputSpec",
    "PipelineSpec",
    "SchedulerFileClusterSpec",
    "ShardSpec",
    "apply_overrides",
    "build_stage",
    "json_schema",
    "load_yaml",
    "parse_pipeline",
]
