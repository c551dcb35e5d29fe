"""Planning: split the stage list into fused row-local segments and global stages."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os

from gpupipe.stages.base import Stage


@dataclasses.dataclass(frozen=True)
class Segment:
    """One materialisation step: fused row-local stages (one task per partition) or a global stage."""

    index: int
    kind: str  # "row" | "global"
    stages: tuple[Stage, ...]
    #: positions of the stages in the pipeline's stage list
    positions: tuple[int, ...]
    reads_input: bool
    final: bool

    @property
    def name(self) -> str:
        if self.stages:
            return f"{self.index:02d}-{self.stages[-1].stage_name}"
        return f"{self.index:02d}-read"

    def directory(self, output: str) -> str:
        return os.path.join(output, "data") if self.final else os.path.join(
            output, "checkpoints", self.name)

    def work_directory(self, output: str) -> str:
        """Intermediate checkpoints of a global stage (kept while its fingerprint holds)."""
        return os.path.join(output, "checkpoints", self.name + ".work")

    def stats_directory(self, output: str) -> str:
        return os.path.join(output, "stats", self.name)


def rejected_directory(output: str, stages: list[Stage], position: int) -> str:
    """Where the rows a filter drops are kept: ``rejected/<stage>/`` (``<stage>-<position>``
    when the pipeline uses the same stage more than once)."""
    name = stages[position].stage_name
    if sum(st.stage_name == name for st in stages) > 1:
        name = f"{name}-{position}"
    return os.path.join(output, "rejected", name)


def plan(stages: list[Stage]) -> list[Segment]:
    """Row-local stages between global stages fuse into one segment; each global stage is one.

    The first segment always reads the input (with the row-local stages that follow it).
    """
    groups: list[tuple[str, list[tuple[int, Stage]]]] = [("row", [])]
    for pos, st in enumerate(stages):
        if st.kind == "global":
            groups.append(("global", [(pos, st)]))
            groups.append(("row", []))
        else:
            groups[-1][1].append((pos, st))
    # drop empty row groups, except the first one (it reads the input)
    groups = [g for k, g in enumerate(groups) if g[0] == "global" or g[1] or k == 0]
    segments = []
    for k, (kind, members) in enumerate(groups):
        segments.append(Segment(
            index=k,
            kind=kind,
            stages=tuple(s for _, s in members),
            positions=tuple(p for p, _ in members),
            reads_input=k == 0,
            final=k == len(groups) - 1,
        ))
    return segments


def fingerprints(segments: list[Segment], input_identity: dict, version: str) -> list[str]:
    """A fingerprint per segment covering the input and every stage up to it.

    A checkpoint is reused only when its fingerprint matches, so editing stage 3 recomputes
    stages 3.. and keeps the work of stages 0-2.
    """
    from gpupipe.io.files import redact_options

    # credentials (storage_options) are not part of the result: new ones recompute nothing
    h = hashlib.sha256(json.dumps({"input": redact_options(input_identity, drop=True),
                                   "gpupipe": version}, sort_keys=True, default=str).encode())
    out = []
    for seg in segments:
        h.update(json.dumps([redact_options({**s.to_dict(), **({"_identity": s.identity()}
                                                                if s.identity() else {})},
                                            drop=True)
                             for s in seg.stages], sort_keys=True, default=str).encode())
        out.append(h.copy().hexdigest()[:16])
    return out


def stage_backends(stages: list[Stage], backend: str) -> list[tuple[str, bool]]:
    """Per stage: (backend it runs on, whether a conversion from ``backend`` is inserted before
    it). A stage without a native path for the run's backend runs on pandas, converted."""
    return [(st.runs_on(backend), st.runs_on(backend) != backend) for st in stages]


def conversions(segments: list[Segment], backend: str) -> dict[int, str]:
    """Stage position -> ``"device->host"`` or ``"host->device"`` for every stage before which
    the runner copies a partition between the GPU and the host in a run on ``backend``.

    A row segment reads its input straight onto the backend of its first stage and writes from
    wherever its last stage left the partition; a global stage reads its input (a Parquet
    checkpoint) on its own backend. So copies happen only between two fused stages that run on
    different backends."""
    out: dict[int, str] = {}
    if backend == "pandas":
        return out
    for seg in segments:
        if seg.kind != "row" or not seg.stages:
            continue
        where = seg.stages[0].runs_on(backend)
        for pos, st in zip(seg.positions[1:], seg.stages[1:]):
            on = st.runs_on(backend)
            if on != where:
                out[pos] = "device->host" if on == "pandas" else "host->device"
            where = on
    return out
