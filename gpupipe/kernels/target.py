"""One kernel source, two targets.

A per-document routine is written once, in the subset of Python that both numba targets
compile: scalars and arrays in, no lists, dicts or allocation inside, scratch space passed in by
the caller. `device` compiles it with ``numba.njit`` for the CPU; a CUDA kernel (`gpupipe.kernels
.gpu`) calls the very same function, which numba-cuda then compiles for the GPU. There is no
second copy of any algorithm, so both targets give the same bits (the float code in `langid`
keeps that true where a GPU would fuse a multiply and an add).

Under the CUDA simulator (``NUMBA_ENABLE_CUDASIM=1`` set before numba is imported) a routine
called from a simulated kernel runs as plain Python on the simulator's arrays, and stays compiled
for the CPU launchers of the same process, so both can be compared bit for bit.
"""

from __future__ import annotations

import threading
import warnings

import numba
import numpy as np
from numba.core import types
from numba.core.extending import overload
from numba.core.typing.typeof import typeof_impl

from gpupipe.kernels import aot

#: the CUDA simulator replaces numba.cuda in this process
SIMULATOR = bool(numba.config.ENABLE_CUDASIM)
if SIMULATOR:
    # simulated routines do their wrapping uint arithmetic on numpy scalars, which warn
    warnings.filterwarnings("ignore", message="overflow encountered in scalar",
                            category=RuntimeWarning)

_U64 = np.uint64


class SimulatedRoutine:
    """A routine in a simulator process: compiled when called with host arrays (by a CPU
    launcher or from Python), plain Python when called from a simulated CUDA kernel."""

    def __init__(self, py_func, cpu):
        self.py_func = py_func
        self.cpu = cpu
        self.__name__ = py_func.__name__
        self.__doc__ = py_func.__doc__

    def __call__(self, *args):
        if _in_simulated_kernel():
            return self.py_func(*args)
        return self.cpu(*args)


def _in_simulated_kernel() -> bool:
    from numba.cuda.simulator.kernel import BlockThread

    return isinstance(threading.current_thread(), BlockThread)


def _fake_array_types():
    from numba.cuda.simulator.cudadrv.devicearray import (
        FakeCUDAArray,
        FakeWithinKernelCUDAArray,
    )

    return FakeCUDAArray, FakeWithinKernelCUDAArray


@typeof_impl.register(SimulatedRoutine)
def _typeof_simulated(val, c):
    # compiled callers (the CPU launchers) see the compiled routine
    return types.Dispatcher(val.cpu)


def device(fn=None, *, inline: bool = False):
    """Compile the per-document routine ``fn`` for the CPU; CUDA kernels call the same object.
    ``inline=True`` inlines it into its callers (numba IR level) for small hot helpers.

    >>> @device
    ... def twice(x):
    ...     return 2 * x
    >>> twice(21)
    42
    """
    if fn is None:
        return lambda f: device(f, inline=inline)
    cpu = _njit(fn, nogil=True, inline="always" if inline else "never")
    return SimulatedRoutine(fn, cpu) if SIMULATOR else cpu


def _njit(fn, **options):
    try:
        return numba.njit(cache=True, **options)(fn)
    except RuntimeError:  # defined where numba cannot cache (a notebook cell, a doctest)
        return numba.njit(**options)(fn)


class Entry:
    """A CPU kernel's entry point: a compiled function that Python calls (a launcher), never
    another compiled function. Called with argument types that the ahead-of-time module
    (`gpupipe.kernels.aot`) holds, it runs that machine code; otherwise numba compiles it on
    first use, as ``numba.njit(cache=True, nogil=True)`` does (`jit`)."""

    def __init__(self, fn, options):
        self.py_func = fn
        self.jit = _njit(fn, nogil=True, **options)
        self.key = f"{fn.__module__}.{fn.__qualname__}"
        self.__name__, self.__qualname__, self.__doc__ = fn.__name__, fn.__qualname__, fn.__doc__
        self.__module__ = fn.__module__

    def __call__(self, *args):
        served = aot.compiled(self.key)
        if served:
            argtypes = tuple(map(numba.typeof, args))
            fn = served.get(argtypes)
            if fn is not None:
                return fn(*args)
            aot.missed(self.key, argtypes)
        return self.jit(*args)

    def __repr__(self) -> str:
        return f"<kernel entry {self.key}>"


#: every `Entry`, in definition order (what `gpupipe.kernels.aot_build.build` compiles)
ENTRIES: list[Entry] = []


def entry(fn=None, **options):
    """Make ``fn`` a CPU kernel's entry point (`Entry`): a launcher calls it with arrays and
    scalars. ``options`` are numba's (``boundscheck=False``)."""
    if fn is None:
        return lambda f: entry(f, **options)
    e = Entry(fn, options)
    ENTRIES.append(e)
    return e


def mul_rn(x, y):
    """``x * y`` rounded on its own: a GPU never fuses it with a following add into an FMA
    (which rounds once, not twice, and would change the bits of float sums)."""
    return x * y


@overload(mul_rn, target="cpu")
def _mul_rn_cpu(x, y):
    return lambda x, y: x * y  # numba's CPU target does not contract without fastmath


def register_cuda_mul_rn():
    """The CUDA lowering of `mul_rn` (called by `gpupipe.kernels.gpu`, which alone imports
    numba.cuda: a CPU run never pays for importing it)."""
    from numba.cuda import libdevice

    @overload(mul_rn, target="cuda")
    def _mul_rn_cuda(x, y):
        if isinstance(x, types.Float) and x.bitwidth == 64:
            return lambda x, y: libdevice.dmul_rn(x, y)
        return lambda x, y: libdevice.fmul_rn(x, y)


@device
def table_mask(m):
    """Mask of the smallest table (power of two, >= 16) at most half full with ``m`` keys
    (`table_size` of ``m`` slots always holds it)."""
    size = 16
    while size < 2 * m:
        size <<= 1
    return size - 1


def max_len(offsets) -> int:
    """Length of the longest string plus one (scratch size of a CPU launcher)."""
    return int(np.diff(offsets).max()) + 1 if len(offsets) > 1 else 1


def table_size(maxlen: int) -> int:
    """Slots of an open-addressing table for up to ``maxlen`` keys (a power of two, half full)."""
    return 1 << max(4, int(2 * maxlen).bit_length())
