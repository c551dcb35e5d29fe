"""Where a run's side outputs live in its directory (the contract of ``docs/formats.md``):
what dedup removed, ``dedup/duplicates.parquet/<stage label>-part-NNNNN.parquet`` (whole
documents) and ``dedup/spans.parquet/…`` (spans cut out of documents), and the index
a dedup stage leaves for later runs, ``dedup/index/<stage>/part-NNNNN.<suffix>`` with its
``manifest.json`` written last. The runner writes them (`gpupipe.runner.steps`); stages read
earlier runs' indexes through the same paths."""

from __future__ import annotations

import glob
import os
import shutil

from gpupipe.io.writer import write_json

INDEX_FORMAT = "gpupipe-dedup-index"


#: the audit tables: whole documents removed, spans cut out of documents
AUDITS = ("duplicates", "spans")


def audit_dir(output_dir: str, name: str = "duplicates") -> str:
    return os.path.join(output_dir, "dedup", f"{name}.parquet")


def audit_prefix(label: str) -> str:
    """A stage's audit files start with its label ``<position>:<stage>`` (``:`` -> ``-``)."""
    return label.replace(":", "-")


def audit_file(output_dir: str, label: str, i: int, name: str = "duplicates") -> str:
    return os.path.join(audit_dir(output_dir, name),
                        f"{audit_prefix(label)}-part-{i:05d}.parquet")


def clear_audit(output_dir: str, label: str) -> None:
    """Remove this stage's audit files of an earlier run (the partition count may differ)."""
    for name in AUDITS:
        for f in glob.glob(os.path.join(audit_dir(output_dir, name),
                                        f"{audit_prefix(label)}-part-*.parquet")):
            os.remove(f)


def index_dir(output_dir: str, stage_name: str) -> str:
    return os.path.join(output_dir, "dedup", "index", stage_name)


def index_file(output_dir: str, stage_name: str, i: int, suffix: str) -> str:
    return os.path.join(index_dir(output_dir, stage_name), f"part-{i:05d}.{suffix}")


def index_manifest(output_dir: str, stage_name: str) -> str:
    return os.path.join(index_dir(output_dir, stage_name), "manifest.json")


def clear_index(output_dir: str, stage_name: str) -> None:
    shutil.rmtree(index_dir(output_dir, stage_name), ignore_errors=True)


def commit_index(output_dir: str, stage_name: str, params: dict, partitions: int) -> None:
    """The index's manifest, written when every partition is: what a later run checks before
    it uses the index (`gpupipe.stages.dedup.common.open_indexes`)."""
    write_json({"format": INDEX_FORMAT, "version": 1, "stage": stage_name, "params": params,
                "partitions": partitions},
               index_manifest(output_dir, stage_name))
