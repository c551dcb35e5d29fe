"""What the cluster tests compare against: a pipeline's run on a local 2-worker cluster, and
the files of a run directory."""

from __future__ import annotations

import os
from pathlib import Path

import gpupipe as gp
from tests.conftest import REPO


def local_run(pipeline: str, directory: Path) -> Path:
    """``pipeline`` run on the embedded 2-worker cluster into ``directory/run``."""
    out = directory / "run"
    os.chdir(REPO)
    gp.Pipeline.from_yaml(pipeline, overrides=[f"output.path={out}"]).run(workers=2,
                                                                         progress=False)
    return out


def run_files(root: Path, subdirs: tuple[str, ...]) -> dict[str, bytes]:
    """Every file under ``root``'s ``subdirs`` (manifest.json aside), with the run directory's
    path replaced (the Megatron argument files name it)."""
    return {str(p.relative_to(root)): p.read_bytes().replace(str(root).encode(), b"<run>")
            for sub in subdirs for p in sorted((root / sub).rglob("*"))
            if p.is_file() and p.name != "manifest.json"}
