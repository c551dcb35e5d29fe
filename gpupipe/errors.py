"""One exception hierarchy for everything gpupipe reports to a user.

Every message says what is wrong, where (file, line, stage, partition) and what to do about it.
The CLI prints ``str(error)`` and exits non-zero; it never shows a traceback for these.
"""

from __future__ import annotations


class GpupipeError(Exception):
    """Base class of every error gpupipe raises on purpose."""

    exit_code = 1

    def __reduce__(self):  # keep the message when the error travels from a Dask worker
        return (type(self), (str(self),))


class SpecError(GpupipeError):
    """The pipeline file or the Python pipeline definition is invalid (nothing was run)."""

    exit_code = 2


class InputError(GpupipeError):
    """Input data cannot be read under the chosen ``input.on_error`` policy."""


class BackendUnavailableError(GpupipeError):
    """The requested dataframe backend (e.g. cuDF) cannot be used on this machine."""


class ClusterError(GpupipeError):
    """The Dask cluster could not be started or reached."""


class StageError(GpupipeError):
    """A stage failed on a partition; the cause is chained as ``__cause__``."""


class OutputError(GpupipeError):
    """The output directory cannot be used (not a run directory, not writable, ...)."""


def closest(name: str, candidates) -> str | None:
    """The candidate most similar to ``name``, if any is close enough to be a likely typo.

    >>> closest("lenght_filter", ["length_filter", "sample"])
    'length_filter'
    """
    import difflib

    found = difflib.get_close_matches(str(name), list(candidates), n=1, cutoff=0.6)
    return found[0] if found else None


def did_you_mean(name: str, candidates) -> str:
    """`` — did you mean 'x'?`` for a likely typo of one of ``candidates``, else ``""``."""
    guess = closest(name, candidates)
    return f" — did you mean {guess!r}?" if guess else ""
