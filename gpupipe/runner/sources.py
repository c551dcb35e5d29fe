"""The input of a run as a source of partitions (`gpupipe.io`): one input, or named inputs
read as one, checked before any cluster starts."""

from __future__ import annotations

import dataclasses
import logging
import os

log = logging.getLogger(__name__)


def make_pipeline_source(pipeline):
    """The source of a pipeline: its input, or its named inputs read as one."""
    if pipeline.inputs is None:
        return make_source(pipeline.input, pipeline.cluster)
    from gpupipe.errors import InputError
    from gpupipe.io.multi import MultiSource

    sources = []
    for name, spec in pipeline.inputs.items():
        if spec.columns:
            from gpupipe.errors import SpecError

            raise SpecError(f"inputs.{name}.columns: carrying input columns is supported for a "
                            f"single input only (input.columns)")
        try:
            sources.append(make_source(spec, pipeline.cluster))
        except InputError as e:
            raise InputError(f"inputs.{name}: {str(e).replace('input.', f'inputs.{name}.')}") \
                from None
    return MultiSource(tuple(pipeline.inputs), tuple(sources))


def make_source(input_spec, cluster=None):
    """The source of one input spec: its files (expanded with the endings of its format,
    `gpupipe.io.formats`) opened by that format's source class."""
    from gpupipe.errors import InputError
    from gpupipe.io import formats
    from gpupipe.io.files import common_root, expand_paths

    fmt = formats.get(input_spec.resolved_format())
    odd: list[tuple[str, str]] = []
    files = tuple(expand_paths(input_spec.paths(), suffixes=fmt.suffixes, not_files=odd,
                               storage_options=input_spec.storage_options))
    if odd:
        listing = "; ".join(f"{p}: {why}" for p, why in odd[:5]) + (
            f" (and {len(odd) - 5} more)" if len(odd) > 5 else "")
        if input_spec.on_error == "fail" or not files:
            raise InputError(f"input.path matches {len(odd)} path(s) that cannot be read as "
                             f"files: {listing}" + (
                                 "; fix or remove them, or set `input.on_error: skip` to leave "
                                 "them out" if files else ""))
        log.warning("input: %d path(s) left out, not readable as files: %s", len(odd), listing)
    return fmt.source.open(files, root=common_root(list(files)),
                           text_column=input_spec.text_column, id_column=input_spec.id_column,
                           on_error=input_spec.on_error, left_out=tuple(odd),
                           columns=tuple(input_spec.columns),
                           blocksize=effective_blocksize(input_spec, cluster, fmt=fmt),
                           storage_options=input_spec.storage_options)


def effective_blocksize(input_spec, cluster=None, device_memory: int | None = None,
                        fmt=None) -> int | None:
    """``input.blocksize``; when not set, the format's own default (WARC: 64 MiB of the file,
    which holds several times that of HTML), else on a CUDA cluster a fraction of one GPU's
    memory (``cluster.partition_fraction``, 1/32 by default: room for a shuffle's copies)."""
    explicit = "blocksize" in input_spec.model_fields_set
    own = getattr(getattr(fmt, "source", None), "default_blocksize", None)
    if own is not None and not explicit:
        return own
    if getattr(cluster, "kind", None) == "cuda" and not explicit:
        if device_memory is None:
            from gpupipe.runner.cluster import device_memory_bytes

            device_memory = device_memory_bytes()
        if device_memory:
            return int(device_memory * cluster.partition_fraction)
    return int(input_spec.blocksize) if input_spec.blocksize is not None else None


def count_block_lines(client, source, bar):
    """Line numbers before every block of split files (needed for derived ids), in parallel."""
    from gpupipe.io.jsonl import count_newlines
    from gpupipe.io.multi import MultiSource

    if isinstance(source, MultiSource):
        return dataclasses.replace(source, sources=tuple(
            count_block_lines(client, s, bar) for s in source.sources))
    if not getattr(source, "needs_line_bases", lambda: False)():
        return source
    paths = [source.files[fi] for fi, _, _ in source.blocks]
    starts = [start for _, start, _ in source.blocks]
    ends = [end if end != -1 else os.path.getsize(p) for p, (_, _, end) in
            zip(paths, source.blocks)]
    bar.start("[input] count lines (ids of split files)", len(paths))
    futures = client.map(count_newlines, paths, starts, ends, pure=False)
    counts = [f.result() for f in futures]
    bar.advance(len(paths))
    return source.with_line_bases(counts)
