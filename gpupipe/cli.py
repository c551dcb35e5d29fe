"""``gpupipe`` command line: run | validate | explain | stages | schema."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time

from gpupipe._version import __version__
from gpupipe.errors import BackendUnavailableError, GpupipeError, SpecError


def _load(args):
    from gpupipe.pipeline import Pipeline

    return Pipeline.from_yaml(args.pipeline, overrides=args.set)


def _cluster_keys(path: str, overrides: list[str]) -> dict[str, str]:
    """``cluster.kind`` and ``cluster.start_method`` as the pipeline file and ``--set`` give
    them, read without importing the stages (``{}`` when the file does not say or does not
    parse: the full load reports that). YAML nodes only, so no alias is expanded."""
    import yaml

    out: dict[str, str] = {}
    try:
        with open(path, encoding="utf-8") as f:
            node = yaml.compose(f, Loader=yaml.SafeLoader)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        node = None
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if key.value == "cluster" and isinstance(value, yaml.MappingNode):
                out.update((k.value, v.value) for k, v in value.value
                           if isinstance(v, yaml.ScalarNode))
    for o in overrides:
        key, _, value = o.partition("=")
        if key.strip().startswith("cluster."):
            out[key.strip()[len("cluster."):]] = value.strip()
    return out


def cmd_run(args) -> int:
    overrides = list(args.set or [])
    if args.output:
        overrides.append(f"output.path={args.output}")
    if args.overwrite:
        overrides.append("output.overwrite=true")
    args.set = overrides
    keys = _cluster_keys(args.pipeline, overrides)
    if not (args.address or args.scheduler_file) and keys.get("kind", "local") == "local" \
            and keys.get("start_method", "forkserver") == "forkserver":
        from gpupipe.runner import forkserver

        # the workers' imports happen in the background while this process loads the pipeline
        forkserver.start()
    from gpupipe.spec import AddressClusterSpec, SchedulerFileClusterSpec

    pipeline = _load(args)
    attach = {"min_workers": args.min_workers} if args.min_workers else {}
    if args.timeout:
        attach["timeout"] = args.timeout
    if args.dedicated:
        attach["dedicated"] = True
    if args.address:
        pipeline = pipeline.model_copy(update={"cluster": AddressClusterSpec(
            kind="address", address=args.address, **attach)})
    elif args.scheduler_file:
        pipeline = pipeline.model_copy(update={"cluster": SchedulerFileClusterSpec(
            kind="scheduler_file", path=args.scheduler_file, **attach)})
    elif attach:
        raise SpecError("--min-workers, --timeout and --dedicated need --address or "
                        "--scheduler-file")
    result = pipeline.run(workers=args.workers, progress="log" if args.no_progress else None)
    print(result.table())
    acc = result.summary["accounting"]
    out = result.summary["output"]
    added = f" + pieces added {acc['added']:,}" if acc.get("added") else ""
    print(f"records in {acc['records_in']:,}{added} = kept {acc['docs_out']:,} + dropped "
          f"{acc['dropped']:,} + rejected {acc['rejected']:,}")
    print(f"output: {out['data']}  ({out['docs']:,} documents in {out['partitions']} Parquet "
          f"file(s))")
    shards = result.summary.get("shards")
    if shards and not shards["totals"]:
        print(f"shards: none written to {shards['directory']} — no document reached the "
              f"tokenize stage (see the drops above)")
    elif shards:
        parts = ", ".join(f"{s}: {t['shards']} shard(s), {t['documents']:,} docs, "
                          f"{t['tokens']:,} tokens" for s, t in shards["totals"].items())
        print(f"shards: {shards['directory']}  ({shards['format']}, {shards['dtype']}; {parts})")
        from gpupipe.shards import formats

        if formats.of_manifest(shards["format"]).writes_data_args:
            print(f"        Megatron: --data-args-path {shards['data_args']}  or "
                  f"--per-split-data-args-path {shards['directory']}/per_split_data_args.json")
    print(f"stats:  {out['path']}/run.json   ({result.summary['seconds']:.1f}s)")
    if out.get("remote"):
        print(f"remote: {out['remote']}  (the run directory, uploaded; the paths above are its "
              f"local staging copy)")
    return 0


def cmd_validate(args) -> int:
    pipeline = _load(args)
    print(f"{args.pipeline}: valid — {len(pipeline.stages)} stage(s): "
          f"{', '.join(s.stage_name for s in pipeline.stages) or 'none'}")
    if args.resolved:
        print(pipeline.to_yaml(), end="")
    return 0


def cmd_explain(args) -> int:
    print(_load(args).explain())
    return 0


def cmd_stages(args) -> int:
    import dataclasses

    from gpupipe.stages.registry import PLUGIN_ERRORS, PLUGIN_STAGES, all_stages

    stages = all_stages()
    if args.json:
        out = {}
        for name, cls in stages.items():
            out[name] = {"kind": cls.kind, "summary": cls.summary(), "reasons": list(cls.reasons),
                         "parameters": {f.name: _default(f) for f in dataclasses.fields(cls)},
                         "plugin": PLUGIN_STAGES.get(name)}
        print(json.dumps(out, indent=2, default=str))
        for label, err in PLUGIN_ERRORS.items():
            print(f"plugin {label} failed to load: {err}", file=sys.stderr)
        return 0
    from pydantic import TypeAdapter

    if args.name and args.name not in stages:
        from gpupipe.stages.registry import get_stage

        get_stage(args.name)  # raises with a did-you-mean suggestion
    for name, cls in stages.items():
        if args.name and name != args.name:
            continue
        origin = f"  (plugin {PLUGIN_STAGES[name]})" if name in PLUGIN_STAGES else ""
        print(f"{name}  [{cls.kind}]  {cls.summary()}{origin}")
        props = TypeAdapter(cls).json_schema().get("properties", {})
        for f in dataclasses.fields(cls):
            print(f"    {f.name}: {_type_name(props.get(f.name, {}))} = {_default(f)!r}")
        if cls.reasons:
            print(f"    drop reasons: {', '.join(cls.reasons)}")
        print()
    for label, err in PLUGIN_ERRORS.items():
        print(f"plugin {label} failed to load: {err}")
    return 0


def _default(f):
    import dataclasses

    from gpupipe.stages.base import field_default

    value = field_default(f)
    return "<required>" if value is dataclasses.MISSING else value


def _type_name(prop: dict) -> str:
    """A short type description from a JSON Schema property: 'integer >= 0 | null'."""
    if "anyOf" in prop:
        return " | ".join(_type_name(p) for p in prop["anyOf"])
    if "enum" in prop:
        return " | ".join(repr(v) for v in prop["enum"])
    if "const" in prop:
        return repr(prop["const"])
    name = prop.get("type", "any")
    for key, op in (("minimum", ">="), ("exclusiveMinimum", ">"), ("maximum", "<="),
                    ("exclusiveMaximum", "<")):
        if key in prop:
            name += f" {op} {prop[key]}"
    return name


def cmd_server(args) -> int:
    import subprocess

    from gpupipe import server

    sock = os.path.abspath(args.socket) if args.socket else server.socket_path()
    if args.action == "status" or (args.action == "start" and not args.foreground):
        info = server.request({"op": "ping"}, sock)
        if info is not None:
            print(f"gpupipe server {info['pid']} at {sock}: up "
                  f"{time.time() - info['started']:.0f} s, {info['served']} command(s) served, "
                  f"{info['running']} running")
            return 0
        if args.action == "status":
            print(f"no gpupipe server at {sock}")
            return 3
    if args.action == "stop":
        info = server.request({"op": "stop"}, sock)
        if info is None:
            print(f"no gpupipe server at {sock}")
            return 0
        end = time.monotonic() + args.wait
        while os.path.exists(sock) and time.monotonic() < end:
            time.sleep(0.05)
        running = f", after the {info['running']} command(s) running" if info["running"] else ""
        if os.path.exists(sock):
            print(f"gpupipe server {info['pid']} stops{running}")
        else:
            print(f"gpupipe server {info['pid']} stopped ({info['served']} command(s) served)")
        return 0
    if args.foreground:
        server.preload()
        return server.serve(main, sock, args.idle_timeout)
    # start: the same command in the foreground, in a session of its own, logging to a file
    os.makedirs(os.path.dirname(sock), mode=0o700, exist_ok=True)
    log_file = server.log_path(sock)
    cmd = [sys.executable, "-m", "gpupipe.cli", "server", "start", "--foreground",
           "--socket", sock, "--idle-timeout", str(args.idle_timeout)]
    t0 = time.monotonic()
    with open(log_file, "ab") as log_f:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log_f, stderr=log_f,
                                cwd=os.path.dirname(sock), start_new_session=True)
    while (info := server.request({"op": "ping"}, sock)) is None:
        if proc.poll() is not None or time.monotonic() - t0 > args.wait:
            with open(log_file, encoding="utf-8", errors="replace") as f:
                tail = f.read()[-2000:]
            if proc.poll() is None:
                proc.terminate()
            print(f"error: the gpupipe server did not start (see {log_file}):\n{tail}",
                  file=sys.stderr)
            return 1
        time.sleep(0.05)
    if info["pid"] != proc.pid:   # another start won the race; ours gave way
        print(f"gpupipe server {info['pid']} at {sock}: already running")
        return 0
    idle = f"{args.idle_timeout:g} s idle" if args.idle_timeout > 0 else "never idle"
    print(f"gpupipe server {proc.pid} started in {time.monotonic() - t0:.1f} s at {sock} "
          f"(log {log_file}); gpupipe commands in this environment now run in it. It stops "
          f"after {idle}, or on `gpupipe server stop`.")
    return 0


def cmd_report(args) -> int:
    from gpupipe.report import write_report

    if not os.path.exists(os.path.join(args.run_dir, "run.json")):
        print(f"error: {args.run_dir} is not a gpupipe run directory (no run.json)",
              file=sys.stderr)
        return 2
    print(write_report(args.run_dir))
    return 0


def cmd_schema(args) -> int:
    from gpupipe.spec import json_schema

    print(json.dumps(json_schema(), indent=2))
    return 0


def cmd_docs(args) -> int:
    from gpupipe import docgen

    if args.check:
        stale = docgen.stale(args.docs_dir)
        for path in stale:
            print(f"stale: {path} differs from what the code generates", file=sys.stderr)
        if stale:
            print("run `gpupipe docs` (make docs) and commit the result", file=sys.stderr)
            return 1
        print(f"{args.docs_dir}: the generated reference is current")
        return 0
    for path in docgen.write(args.docs_dir):
        print(path)
    return 0


def cmd_train_tokenizer(args) -> int:
    import itertools

    from gpupipe.io import formats
    from gpupipe.io.files import common_root, expand_paths
    from gpupipe.io.tokenizer import train_bpe

    files = expand_paths(args.input, suffixes=formats.all_suffixes())
    root = common_root(files)

    def texts():   # each file read by the format its name says
        for f in files:
            source = formats.of_path(f).source(files=(f,), root=root,
                                               text_column=args.text_column, on_error="skip")
            yield from source.read(0).frame["text"].tolist()

    stream = itertools.islice(texts(), args.max_documents) if args.max_documents else texts()
    specials = tuple(dict.fromkeys(["<|endoftext|>", "<|pad|>", *(args.special_token or [])]))
    logging.getLogger("gpupipe").info("training byte-level BPE (vocab %d) on %d file(s)",
                                      args.vocab_size, len(files))
    tok = train_bpe(stream, vocab_size=args.vocab_size, min_frequency=args.min_frequency,
                    special_tokens=specials, style=args.style)
    import os

    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    tok.save(args.output, pretty=False)
    print(f"wrote {args.output}: vocab {tok.get_vocab_size()}, special tokens {list(specials)}")
    return 0


def cmd_inspect(args) -> int:
    from gpupipe.shards.inspect import decode_document, verify

    manifest, problems = verify(args.shards, hashes=not args.no_hash)
    print(f"{args.shards}: {manifest['format']}, dtype {manifest['dtype']}, tokenizer "
          f"{manifest['tokenizer']['path']} (vocab {manifest['tokenizer']['vocab_size']}, "
          f"eod {manifest['tokenizer']['eod_id']}), seed {manifest['seed']}")
    for split, t in manifest["totals"].items():
        print(f"  {split:5s}  {t['shards']:4d} shard(s)  {t['documents']:>10,} documents  "
              f"{t['tokens']:>14,} tokens")
    if args.doc:
        prefix, _, k = args.doc.rpartition(":")
        if not prefix or not k.isdigit():
            raise SpecError(f"--doc {args.doc!r}: expected PREFIX:K, e.g. train/train-00000:0")
        ids, text = decode_document(args.shards, prefix, int(k), args.tokenizer)
        print(f"\n{prefix}:{k}  ({len(ids)} tokens, first ids {ids[:12]})\n{text}")
    if problems:
        print(f"\n{len(problems)} problem(s):", file=sys.stderr)
        for p in problems:
            print(f"  {p}", file=sys.stderr)
        return 1
    print("ok: every shard matches the manifest" + (" (sizes and invariants; hashes skipped)"
                                                   if args.no_hash else ""))
    return 0


def cmd_slurm(args) -> int:
    import os

    from gpupipe.slurm import SlurmOptions, from_cluster, python_for, render

    pipeline = _load(args)  # a broken pipeline is reported now, not after the job starts
    network = from_cluster(pipeline.cluster, protocol=args.protocol, interface=args.interface,
                           rmm_pool_size=args.rmm_pool_size)
    if args.cpu:   # GPU worker settings do not apply to dask worker
        network.update(rmm_pool_size=None, worker_flags=())
    opts = SlurmOptions(
        pipeline=args.pipeline, nodes=args.nodes, gpus_per_node=args.gpus_per_node,
        cpu=args.cpu, cpus_per_node=args.cpus_per_node, workers_per_node=args.workers_per_node,
        partition=args.partition, time=args.time, account=args.account, job_name=args.job_name,
        container_image=args.container_image, container_mounts=args.container_mounts,
        workdir=args.workdir, overrides=tuple(args.set or ()), worker_ttl=args.worker_ttl,
        python=python_for(args.python, args.gpupipe, bool(args.container_image)), **network)
    script = render(opts, pipeline.name)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(script)
        os.chmod(args.output, 0o755)
        print(f"wrote {args.output}; submit with: sbatch {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(script)
    return 0


def cmd_io_bench(args) -> int:
    from gpupipe.io.files import expand_paths
    from gpupipe.iobench import format_report, run

    paths = list(expand_paths(args.paths, suffixes=None))
    report = run(paths, repeat=args.repeat, methods=args.method)
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0


KERNELS_INSTALL = ("pip install 'gpupipe[kernels-cu12]' (numba-cuda and CuPy for CUDA 12 "
                   "drivers; kernels-cu13 for CUDA 13), or 'gpupipe[gpu]' for cuDF as well")


def cmd_warmup(args) -> int:
    """Compile the CPU kernels, so that no run on this machine (or image) compiles: into numba's
    cache, or with ``--aot`` into an extension module that any process loads whatever its cache.
    ``--cuda``: the CUDA kernels too, for this machine's GPU."""
    if args.cuda:
        _warmup_cuda_check()
    if args.aot and args.stages:
        raise SpecError("--aot compiles every CPU kernel; --stages does not apply to it")
    if not args.aot and (args.cpu != "generic" or args.out):
        raise SpecError("--cpu and --out apply to --aot only")

    if args.aot:
        _warmup_aot(args)
    else:
        _warmup_jit(args)
    if args.cuda:
        from gpupipe.kernels import gpu

        device = gpu.usable()[1]
        print(f"compiling {len(gpu.KERNELS)} CUDA kernels for {device}", flush=True)
        t0 = time.perf_counter()
        done = gpu.warm(lambda r: print(
            f"  {r['cuda_kernel']:<32} {r['seconds']:7.2f} s"
            f"{'  (cache)' if r['from_cache'] else ''}", flush=True))
        print(f"ok: {len(done)} CUDA kernels in {time.perf_counter() - t0:.1f} s")
    return 0


def _warmup_jit(args) -> None:
    import numba

    from gpupipe.kernels.warm import all_kernels, kernels_for, warm

    stages = [s.strip() for s in (args.stages or "").split(",") if s.strip()]
    if stages:
        from gpupipe.stages.registry import all_stages

        unknown = [s for s in stages if s not in all_stages()]
        if unknown:
            raise SpecError(f"--stages: unknown stage(s) {', '.join(unknown)} "
                            f"(`gpupipe stages` lists them)")
    names = kernels_for(stages) if stages else all_kernels()
    if not names:
        raise SpecError(f"--stages {args.stages!r}: none of these stages has CPU kernels; "
                        f"stages with kernels: {', '.join(sorted(_stage_kernels()))}")
    from gpupipe.kernels import aot

    state = aot.state()
    if state["kernels"] == "ahead-of-time":
        print(f"nothing to compile: the ahead-of-time module {state['module']} serves "
              f"the CPU kernels in every process (GPUPIPE_AOT=0 gpupipe warmup fills numba's "
              f"cache instead)")
        return
    where = numba.config.CACHE_DIR or "the package's __pycache__ directories (numba's per-user "\
        "cache directory where those cannot be written; NUMBA_CACHE_DIR sets another)"
    print(f"compiling {len(names)} CPU kernels into {where}", flush=True)
    t0 = time.perf_counter()
    for name in names:
        s = warm([name])[name]
        print(f"  {name:<24} {s:7.2f} s", flush=True)
    print(f"ok: {len(names)} kernels in {time.perf_counter() - t0:.1f} s "
          f"(a second warmup loads them from the cache)")


def _warmup_aot(args) -> None:
    import tempfile
    from pathlib import Path

    from gpupipe.kernels import aot, aot_build

    out = Path(args.out) if args.out else aot.directory()
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=out, prefix=".probe-")
        probe.close()
    except OSError as e:
        raise SpecError(f"--aot: cannot write to {out} ({e.strerror}); give --out DIR and set "
                        f"GPUPIPE_AOT_DIR=DIR for the runs") from None
    print(f"compiling every CPU kernel ahead of time into {out}", flush=True)
    try:
        built = aot_build.build(out, cpu=args.cpu, progress=lambda m: print(m, flush=True))
    except RuntimeError as e:
        raise SpecError(f"--aot: {e}") from None
    print(f"ok: {built['entries']} entry points ({built['exports']} variants) in "
          f"{built['module']} ({built['seconds']:.0f} s; {built['aot_seconds']:.0f} s of it "
          f"the ahead-of-time compile)")
    if args.out and Path(args.out).resolve() != aot.directory().resolve():
        print(f"runs use it with GPUPIPE_AOT_DIR={Path(args.out).resolve()}")


def _warmup_cuda_check() -> None:
    """``warmup --cuda`` stops before compiling anything where no GPU can run the kernels: CUDA
    machine code is compiled for the device's compute capability."""
    try:
        from gpupipe.kernels import gpu
    except ImportError as e:
        raise SpecError(f"warmup --cuda: numba-cuda is not installed ({e}); "
                        f"{KERNELS_INSTALL}") from None
    why = gpu.cannot_warm()
    if why is not None:
        raise SpecError(f"warmup --cuda: no usable GPU ({why}). CUDA kernels are compiled "
                        f"for the GPU that runs them: run it on the GPU node (in a container, "
                        f"once at start, with NUMBA_CACHE_DIR on a volume the runs share). "
                        f"'gpupipe check-gpu --compile-only' checks that they compile without "
                        f"a GPU")


def _stage_kernels() -> dict:
    from gpupipe.kernels.warm import STAGE_KERNELS

    return STAGE_KERNELS


def cmd_check_gpu(args) -> int:
    import importlib.util
    import os
    import subprocess

    for name in ("sample", "max_doc_bytes"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise SpecError(f"--{name.replace('_', '-')}: expected at least 1, got {value}")
    if importlib.util.find_spec("numba_cuda") is None:
        raise BackendUnavailableError(f"check-gpu needs numba-cuda, which is not installed: "
                                      f"{KERNELS_INSTALL}")
    if args.compile_only:
        from gpupipe.kernels.gpu import compile_ptx

        archs = [a.strip() for a in args.arch.split(",") if a.strip()]
        try:
            records = compile_ptx(archs)
        except ValueError as e:
            raise SpecError(f"--arch: {e}") from None
        except RuntimeError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        for r in records:
            print(f"  {r['cuda_kernel']:<28} {r['arch']:>6}  {r['ptx_bytes']:>8,} bytes of PTX")
        kernels = len({r["cuda_kernel"] for r in records})
        print(f"ok: {kernels} CUDA kernels compile for {', '.join(archs)} (no GPU was used)")
        return 0
    argv = [args.path, "--sample", str(args.sample or (50 if args.simulate else 1000))]
    max_bytes = args.max_doc_bytes or (1000 if args.simulate else None)
    if max_bytes:
        argv += ["--max-doc-bytes", str(max_bytes)]
    for k in args.kernel or ():
        argv += ["--kernel", k]
    if args.json:
        argv.append("--json")
    if args.simulate:
        # the simulator replaces numba.cuda only if set before numba is imported: a new process
        if not args.json:
            print(f"simulating the GPU side on the CPU (NUMBA_ENABLE_CUDASIM=1); documents cut "
                  f"to {max_bytes} bytes", file=sys.stderr)
        env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1"}
        return subprocess.run([sys.executable, "-m", "gpupipe.gpu_check", *argv],
                              env=env).returncode
    from gpupipe.kernels.gpu import usable

    ok, why = usable()
    if not ok:
        print(f"error: check-gpu: no usable GPU here ({why}).\n  On a GPU machine install the "
              f"GPU kernels: {KERNELS_INSTALL}.\n  Without a GPU: --simulate runs the GPU side "
              f"in numba's CUDA simulator, --compile-only compiles every kernel to PTX.",
              file=sys.stderr)
        return 2
    from gpupipe.gpu_check import main as check_main

    return check_main(argv)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="gpupipe", description="LLM training-data pipelines on "
                                 "pandas or cuDF, distributed with Dask.")
    ap.add_argument("--version", action="version", version=f"gpupipe {__version__}")
    ap.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def with_pipeline(p):
        p.add_argument("pipeline", help="pipeline file (YAML)")
        p.add_argument("--set", action="append", metavar="KEY=VALUE",
                       help="override a value, e.g. --set length_filter.min_words=50 "
                            "or --set input.on_error=skip (repeatable)")
        return p

    p = with_pipeline(sub.add_parser("run", help="run a pipeline"))
    p.add_argument("-o", "--output", help="run directory (overrides output.path)")
    p.add_argument("-w", "--workers", type=int, help="local cluster worker processes")
    p.add_argument("--overwrite", action="store_true", help="start over instead of resuming")
    p.add_argument("--address", help="attach to a running Dask scheduler at this address")
    p.add_argument("--scheduler-file", help="attach to a Dask scheduler via its scheduler file")
    p.add_argument("--min-workers", type=int, metavar="N",
                   help="with --address/--scheduler-file: wait until N workers have joined")
    p.add_argument("--timeout", type=float, metavar="SECONDS",
                   help="with --address/--scheduler-file: how long to wait for the scheduler "
                        "and the workers (default 30)")
    p.add_argument("--dedicated", action="store_true",
                   help="with --address/--scheduler-file: the cluster runs this pipeline only "
                        "(a gpupipe slurm job's): its one-thread workers may end to stop a page "
                        "past extract_html's timeout, and their nannies start new ones")
    p.add_argument("--no-progress", action="store_true", help="log lines instead of a live progress bar")
    p.set_defaults(func=cmd_run)

    p = with_pipeline(sub.add_parser("validate", help="check a pipeline file without running it"))
    p.add_argument("--resolved", action="store_true", help="print it with every default filled in")
    p.set_defaults(func=cmd_validate)

    p = with_pipeline(sub.add_parser("explain", help="show the execution plan"))
    p.set_defaults(func=cmd_explain)

    p = sub.add_parser("stages", help="list registered stages, parameters and drop reasons")
    p.add_argument("name", nargs="?", help="show only this stage")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_stages)

    p = sub.add_parser("train-tokenizer", help="train a byte-level BPE tokenizer on JSONL/Parquet")
    p.add_argument("input", nargs="+", help="files, directories or globs")
    p.add_argument("-o", "--output", required=True, help="tokenizer.json to write")
    p.add_argument("--vocab-size", type=int, default=32000)
    p.add_argument("--min-frequency", type=int, default=2)
    p.add_argument("--text-column", default="text")
    p.add_argument("--max-documents", type=int, help="train on the first N documents only")
    p.add_argument("--special-token", action="append", help="extra special token (repeatable)")
    p.add_argument("--style", choices=["gpt2", "llama3", "qwen2"], default="gpt2",
                   help="pre-tokenizer and options as GPT-2's, Llama 3's or Qwen 2.5's "
                        "tokenizer.json (default gpt2)")
    p.set_defaults(func=cmd_train_tokenizer)

    p = sub.add_parser("inspect", help="verify shards against their manifest, decode documents")
    p.add_argument("shards", help="shard directory (or the run directory holding shards/)")
    p.add_argument("--doc", metavar="PREFIX:K", help="decode document K of a shard, "
                   "e.g. train/train-00000:0")
    p.add_argument("--tokenizer", help="tokenizer.json (default: the one in the manifest)")
    p.add_argument("--no-hash", action="store_true", help="skip sha256 checks (faster)")
    p.set_defaults(func=cmd_inspect)

    p = with_pipeline(sub.add_parser(
        "slurm", help="write an sbatch script: Dask scheduler + workers + the pipeline's driver"))
    p.add_argument("--nodes", type=int, default=1)
    p.add_argument("--gpus-per-node", type=int, default=1)
    p.add_argument("--cpu", action="store_true", help="CPU workers (dask worker) instead of GPUs")
    p.add_argument("--cpus-per-node", type=int, help="--cpu: CPUs to request per node")
    p.add_argument("--workers-per-node", type=int,
                   help="--cpu: worker processes per node (default: --cpus-per-node)")
    p.add_argument("--partition")
    p.add_argument("--time", help="e.g. 04:00:00")
    p.add_argument("--account")
    p.add_argument("--job-name")
    p.add_argument("--container-image", help="run every step in this image (pyxis/enroot)")
    p.add_argument("--container-mounts", help="pyxis mounts (default: the submit directory)")
    p.add_argument("--protocol", choices=["tcp", "ucx"],
                   help="default: the pipeline's cluster section (kind: cuda), else tcp")
    p.add_argument("--interface", help="network interface, e.g. ib0 (default: the pipeline's "
                   "cluster section)")
    p.add_argument("--rmm-pool-size", help="GPU workers: RMM pool per GPU, e.g. 70GB or 0.9 "
                   "(default: the pipeline's cluster section)")
    p.add_argument("--workdir", help="shared directory for the scheduler file "
                   "(default: ./.gpupipe-slurm/$SLURM_JOB_ID)")
    p.add_argument("--worker-ttl", help="drop a worker silent this long and rerun its tasks "
                   "elsewhere (default: 20s over tcp, 15s over ucx; distributed's own: 5 minutes)")
    p.add_argument("--python", help="the Python on the nodes whose environment has gpupipe: "
                   "every step runs with it, dask too (default: the interpreter of --gpupipe, "
                   "else this one; python3 in a container)")
    p.add_argument("--gpupipe", help="the gpupipe console script on the nodes: its environment "
                   "runs every step (instead of --python)")
    p.add_argument("-o", "--output", help="write the script here (default: print it)")
    p.set_defaults(func=cmd_slurm)

    p = sub.add_parser("io-bench", help="read throughput of files: posix, pyarrow, KvikIO/cuDF")
    p.add_argument("paths", nargs="+", help="files, directories or globs")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--method", action="append", help="only this method (repeatable): posix, "
                   "pyarrow, pyarrow_parquet, kvikio, cudf_parquet")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_io_bench)

    p = sub.add_parser("check-gpu", help="run every text kernel on the CPU and on the GPU and "
                       "compare them bit for bit (a self-test for a new cluster)")
    p.add_argument("path", nargs="?", default="data",
                   help="JSONL / Parquet files, a directory or a glob (default: data)")
    p.add_argument("--sample", type=int, metavar="N",
                   help="documents to compare (default 1000; 50 with --simulate)")
    p.add_argument("--max-doc-bytes", type=int, metavar="B",
                   help="cut documents to B bytes (default: whole; 1000 with --simulate)")
    p.add_argument("--kernel", action="append", help="only this kernel (repeatable)")
    p.add_argument("--simulate", action="store_true",
                   help="run the GPU side in numba's CUDA simulator (any machine; slow)")
    p.add_argument("--compile-only", action="store_true",
                   help="only compile every CUDA kernel to PTX (no GPU needed)")
    p.add_argument("--arch", default="sm_80,sm_90",
                   help="--compile-only: architectures (default sm_80,sm_90)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_check_gpu)

    p = sub.add_parser("warmup", help="compile every CPU kernel into numba's cache (image "
                       "builds, new nodes): no run on this machine compiles afterwards")
    p.add_argument("--stages", help="only the kernels of these stages (comma-separated)")
    p.add_argument("--cuda", action="store_true",
                   help="also compile every CUDA kernel for this machine's GPU (numba-cuda's "
                        "disk cache; needs the GPU)")
    p.add_argument("--aot", action="store_true",
                   help="compile every CPU kernel ahead of time into an extension module in "
                        "the package (or --out), which every process loads instead of "
                        "compiling, whatever its numba cache (make install does it)")
    p.add_argument("--cpu", choices=("generic", "host"), default="generic",
                   help="--aot: for any CPU of this architecture (default) or this one only")
    p.add_argument("--out", help="--aot: the directory to write it to (default: the package "
                                 "directory, or GPUPIPE_AOT_DIR, which runs read it from)")
    p.set_defaults(func=cmd_warmup)

    p = sub.add_parser("server", help="a warm process that runs gpupipe commands without "
                       "starting Python and the worker processes' imports anew (start | stop "
                       "| status)")
    p.add_argument("action", choices=("start", "stop", "status"))
    p.add_argument("--idle-timeout", type=float, default=3600, metavar="SECONDS",
                   help="start: stop after this long without a command (default 3600; 0: "
                        "never)")
    p.add_argument("--socket", help="its Unix socket (default: $GPUPIPE_SERVER_SOCKET, else one "
                                    "per Python environment; the commands find it the same way)")
    p.add_argument("--foreground", action="store_true",
                   help="start: serve in this process (for a service manager) instead of in "
                        "the background")
    p.add_argument("--wait", type=float, default=60, metavar="SECONDS",
                   help="start / stop: how long to wait for it (default 60)")
    p.set_defaults(func=cmd_server)

    p = sub.add_parser("report", help="(re)build <run>/report.html from a run directory")
    p.add_argument("run_dir", help="the run directory (holding run.json)")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("docs", help="write the generated reference (pipeline file, stages) "
                                    "under docs/reference/")
    p.add_argument("--docs-dir", default="docs", help="the docs directory (default: docs)")
    p.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 when a generated file is stale")
    p.set_defaults(func=cmd_docs)

    p = sub.add_parser("schema", help="print the JSON Schema of pipeline files")
    p.set_defaults(func=cmd_schema)
    return ap


def _configure_logging(verbose: bool) -> None:
    import dask

    # distributed installs its own handlers at import, from this config: keep it quiet unless -v
    dask.config.set({"logging.distributed": "info" if verbose else "error"})
    if "distributed" in sys.modules:   # imported already (the warm server): set it directly
        logging.getLogger("distributed").setLevel(logging.INFO if verbose else logging.ERROR)
    # gcsfs logs each request it gives up on with a traceback, then raises: the run's error
    # names the URL and the cause once, without it
    logging.getLogger("gcsfs").setLevel(logging.DEBUG if verbose else logging.CRITICAL)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s", "%H:%M:%S"))
    log = logging.getLogger("gpupipe")
    log.handlers[:] = [handler]
    log.setLevel(logging.DEBUG if verbose else logging.INFO)
    log.propagate = False


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _configure_logging(args.verbose)
    try:
        return args.func(args)
    except GpupipeError as e:  # SpecError exits 2, the others 1 (exit_code per class)
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("interrupted — run the same command again to resume", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `gpupipe stages | head`: the reader left; stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def entry() -> None:
    """The ``gpupipe`` command: in the warm server if one serves this environment
    (`gpupipe.server`), else `main`; then an exit that skips the cyclic garbage collector's
    passes over everything the command imported (numpy, pandas, pyarrow, distributed: about
    0.4 s of a small run on 2 cores, freeing memory the process is about to return anyway).
    atexit handlers, module finalizers and file closing run as usual."""
    import gc

    from gpupipe import server

    code = server.forward(sys.argv[1:])   # a warm server runs it (`gpupipe server start`)
    if code is None:
        code = main()
    gc.disable()
    gc.freeze()
    sys.exit(code)


if __name__ == "__main__":
    entry()
