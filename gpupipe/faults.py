"""Failpoints: named places where a test can kill the run, to prove it resumes from anywhere.

``GPUPIPE_FAILPOINTS`` holds comma-separated ``fnmatch`` patterns. When a process (driver or
worker; workers inherit the environment) reaches a failpoint whose name matches, it kills its
whole process group with SIGKILL: what a crashed node or an OOM-killed job looks like. Without
the variable a failpoint costs one dictionary lookup.

Names: ``row/<segment>/<partition>`` (a row segment's partition is written),
``step/<stage>/<step>/<task>`` (a step's task is written), ``step-done/<stage>/<step>`` (the
step is complete), ``shard-route/<partition>``, ``shard-write/<split>/<shard>``,
``manifest`` (the shards are written, the manifest not yet).
"""

from __future__ import annotations

import fnmatch
import os
import signal

ENV = "GPUPIPE_FAILPOINTS"


def failpoint(name: str) -> None:
    patterns = os.environ.get(ENV)
    if not patterns:
        return
    if any(fnmatch.fnmatchcase(name, p.strip()) for p in patterns.split(",") if p.strip()):
        os.killpg(os.getpgrp(), signal.SIGKILL)
