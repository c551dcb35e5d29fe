"""What the forkserver of local workers imports once, before it forks any
(`gpupipe.runner.forkserver`): distributed, pandas, pyarrow, the built-in stages and the task
runner, and numba's CPU target, which takes most of a second to set up in each process. A
worker forked from it starts with all of that in memory. Plugins are not imported here: a
worker imports the one a pipeline names when it unpickles the stage, as it would without this.

Nothing here may fail the server: a worker forked from a server that lacks a module imports it
itself.
"""

import logging

log = logging.getLogger(__name__)

try:
    import distributed  # noqa: F401
    import pandas  # noqa: F401
    import pyarrow  # noqa: F401

    import gpupipe.runner.steps  # noqa: F401
    import gpupipe.runner.tasks  # noqa: F401
    import gpupipe.stages  # noqa: F401
    from gpupipe.kernels.warm import warm

    # the smallest kernel: numba's CPU target is then set up (from its cache: milliseconds)
    warm(["normalize_quick_check"])
except Exception as e:  # pragma: no cover - the workers import what they need themselves
    log.warning("the worker forkserver could not preload everything: %s: %s",
                type(e).__name__, e)
