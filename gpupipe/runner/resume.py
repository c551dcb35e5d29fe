"""Resuming: what a run's checkpoints depend on (input files, fingerprints), what changed
since the last run, and the state files of segments."""

from __future__ import annotations

import json
import os
import shutil


def input_identity(pipeline, source) -> dict:
    from gpupipe.io.files import file_identity

    files = [file_identity(f, getattr(sub, "storage_options", None))
             for sub in getattr(source, "sources", (source,)) for f in sub.files]
    if pipeline.inputs is None:
        spec = pipeline.input.model_dump(mode="json", exclude={"path"})
    else:
        spec = {k: v.model_dump(mode="json", exclude={"path", "stages"})
                for k, v in pipeline.inputs.items()}
    return {"input": spec, "files": files}


def describe_changes(run_json: str, pipeline: dict, inputs: dict, fingerprint: str) -> list[str]:
    """What differs from the run recorded in ``run_json`` (none when there is none, or it had
    the same fingerprint): input files added, removed or modified, and changed settings."""
    try:
        with open(run_json, encoding="utf-8") as f:
            old = json.load(f)
    except (OSError, ValueError):
        return []
    if old.get("fingerprint") == fingerprint:
        return []
    lines = []
    before = {k: tuple(v) for k, v in (old.get("input_files") or {}).items()}
    now = {k: tuple(v) for k, v in inputs.items()}
    if before or "input_files" in old:
        added = sorted(set(now) - set(before))
        removed = sorted(set(before) - set(now))
        changed = sorted(f for f in set(now) & set(before) if now[f] != before[f])
        for what, files in (("added", added), ("removed", removed), ("modified", changed)):
            if files:
                lines.append(f"input files {what}: {', '.join(files[:3])}"
                             + (f" and {len(files) - 3} more" if len(files) > 3 else ""))
    old_p = old.get("pipeline") or {}
    for key in sorted(set(old_p) | set(pipeline)):
        if key in ("output",) or old_p.get(key) == pipeline.get(key):
            continue
        if key == "stages":
            a, b = old_p.get(key) or [], pipeline.get(key) or []
            for k in range(max(len(a), len(b))):
                x, y = (a[k] if k < len(a) else None), (b[k] if k < len(b) else None)
                if x == y:
                    continue
                if x is None or y is None or x.get("stage") != y.get("stage"):
                    lines.append(f"stages[{k}] is now {(y or {}).get('stage', 'gone')} (was "
                                 f"{(x or {}).get('stage', 'absent')})")
                else:
                    diffs = [f"{p}: {x.get(p)!r} -> {y.get(p)!r}" for p in sorted(set(x) | set(y))
                             if x.get(p) != y.get(p)]
                    lines.append(f"stages[{k}] {y['stage']}: {'; '.join(diffs)}")
        else:
            lines.append(f"{key} changed")
    return lines or ["the fingerprint differs, though the recorded settings and input files "
                     "do not (another gpupipe version, an earlier run a dedup stage reads, an "
                     "edited eval set, or a run directory from before input files were "
                     "recorded)"]


def load_state(directory: str) -> dict | None:
    try:
        with open(os.path.join(directory, "_segment.json"), encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def reset(*dirs: str) -> None:
    for d in dirs:
        if os.path.isdir(d):
            shutil.rmtree(d)


def work_dir(work: str, fp: str) -> str:
    """A global stage's intermediate checkpoints (signatures, bucket edges, ...), kept across
    runs while the stage's fingerprint (``fp``, with the partition and bucket counts) is
    unchanged, so an interrupted stage resumes; otherwise cleared, so no file of another
    partitioning is ever read."""
    marker = os.path.join(work, "_fingerprint")
    try:
        with open(marker, encoding="utf-8") as f:
            same = f.read().strip() == fp
    except OSError:
        same = False
    if not same:
        reset(work)
        os.makedirs(work)
        with open(marker, "w", encoding="utf-8") as f:
            f.write(fp + "\n")
    return work
