"""The Unicode normalisation quick check: which strings might change under NFC / NFKC / NFD /
NFKD. Only those are normalised (on the host); the rest are known to be normal already."""

from __future__ import annotations

import functools
import unicodedata

import numpy as np

from gpupipe.kernels.target import device, entry
from gpupipe.kernels.utf8 import decode


@functools.cache
def stable_table(form: str) -> np.ndarray:
    """``table[cp]`` is True when BMP code point ``cp`` can never change under ``form``,
    whatever surrounds it (quick-check Yes, combining class 0, never the second half of a
    canonical composition). Built once per process from `unicodedata`."""
    seconds = set()
    for cp in range(0x10000):
        dec = unicodedata.decomposition(chr(cp))
        if dec and not dec.startswith("<"):
            parts = dec.split()
            if len(parts) == 2:
                seconds.add(int(parts[1], 16))
    table = np.zeros(0x10000, dtype=np.bool_)
    for cp in range(0x10000):
        if 0xD800 <= cp <= 0xDFFF or 0x1100 <= cp <= 0x11FF or cp in seconds:
            continue  # surrogates; Hangul jamo compose algorithmically
        c = chr(cp)
        # code points unassigned in Python's Unicode version may have a decomposition in the
        # newer Unicode that Arrow's normaliser knows: always let Arrow look at them
        table[cp] = (unicodedata.category(c) != "Cn" and unicodedata.combining(c) == 0
                     and unicodedata.is_normalized(form, c))
    return table


@device
def needs_normalization_doc(data, start, end, table):
    """Whether ``data[start:end]`` holds a code point that normalisation might change."""
    i = start
    while i < end:
        if data[i] < 0x80:  # ASCII never changes under any normal form
            i += 1
            continue
        cp, step = decode(data, i)
        i += step
        if cp >= table.shape[0] or not table[cp]:
            return True
    return False


@entry
def _needs_normalization_cpu(offsets, data, table, out):
    for d in range(out.shape[0]):
        out[d] = needs_normalization_doc(data, offsets[d], offsets[d + 1], table)
    return out


def needs_normalization(offsets, data, form: str) -> np.ndarray:
    """Per string: whether Unicode normalisation ``form`` might change it (never a false "no")."""
    return _needs_normalization_cpu(offsets, data, stable_table(form),
                                    np.empty(len(offsets) - 1, dtype=np.bool_))


def normalize(arr, form: str):
    """Unicode normalisation ``form`` of an Arrow string array, applied (by Arrow, on the host)
    only to the strings the quick check cannot clear: most text is already NFC."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from gpupipe.kernels.utf8 import utf8_buffers

    need = needs_normalization(*utf8_buffers(arr), form)
    if not need.any():
        return arr
    if need.all():
        return pc.utf8_normalize(arr, form=form)
    mask = pa.array(need)
    return pc.replace_with_mask(arr, mask, pc.utf8_normalize(arr.filter(mask), form=form))
