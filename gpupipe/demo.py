"""``python -m gpupipe.demo RUN_DIR``: what `make demo` prints after the run."""

from __future__ import annotations

import json
import os
import sys
import textwrap


def main(run_dir: str) -> int:
    with open(os.path.join(run_dir, "run.json"), encoding="utf-8") as f:
        summary = json.load(f)
    out = summary["output"]
    print(f"\nCleaned documents: {os.path.abspath(out['data'])}/ ({out['docs']:,} documents, "
          f"Parquet)")
    shards = summary.get("shards")
    if shards:
        from gpupipe.shards import formats
        from gpupipe.shards.inspect import decode_document
        from gpupipe.shards.writer import read_manifest

        manifest = read_manifest(shards["directory"])
        fmt = formats.of_manifest(manifest["format"])
        print(f"Training shards:   {os.path.abspath(shards['directory'])}/")
        for s in manifest["shards"]:
            print(f"  {s['prefix']}{'/'.join(fmt.suffixes)}  {s['documents']:6,} docs  "
                  f"{s['tokens']:9,} tokens")
        first = manifest["shards"][0]["prefix"]
        if fmt.reader is not None:
            ids, text = decode_document(shards["directory"], first, 0)
            print(f"Decoded {first}:0 ({len(ids)} tokens):\n  "
                  + textwrap.shorten(text, width=300, placeholder=" ..."))
        if fmt.writes_data_args:
            print(f"Megatron-LM / NeMo: --data-args-path {os.path.abspath(shards['data_args'])}")
        print(f"Verify: .venv/bin/gpupipe inspect {shards['directory']}")
    print(f"Per-stage statistics: {os.path.abspath(os.path.join(run_dir, 'run.json'))}")
    print(f"Run report (open in a browser): {os.path.abspath(os.path.join(run_dir, 'report.html'))}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "out/quickstart"))
