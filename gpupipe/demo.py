"""``python -m gpupipe.demo RUN_DIR``: what `make demo` prints after the run."""

from __future__ import annotations

import json
import os
import sys
import textwrap


def main(run_dir: str) -> int:
    with open(os.path.join(run_dir, "run.json"), encoding="utf-8") as f:
        summary = json.load(f)
    data = summary["output"]["data"]
    files = sorted(f for f in os.listdir(data) if f.endswith(".parquet"))
    print(f"\nThe cleaned corpus is in {os.path.abspath(data)}/ ({len(files)} Parquet files, "
          f"{summary['output']['docs']:,} documents).")
    if files:
        import pyarrow.parquet as pq

        row = pq.read_table(os.path.join(data, files[0])).slice(0, 1).to_pylist()
        if row:
            snippet = textwrap.shorten(row[0]["text"], width=300, placeholder=" ...")
            print(f"First document ({row[0]['id']}):\n  {snippet}")
    print(f"Per-stage statistics: {os.path.abspath(os.path.join(run_dir, 'run.json'))}")
    print("Next: `.venv/bin/gpupipe explain pipelines/quickstart.yaml`, or edit the YAML and rerun.")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "out/quickstart"))
