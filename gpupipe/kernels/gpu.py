"""CUDA kernels and their launchers: one thread per document, each calling the same routine the
CPU launcher calls (`gpupipe.kernels.target`).

A launcher takes the UTF-8 view of a string column as host numpy arrays (copied to the device)
or as device arrays (anything with ``__cuda_array_interface__``, e.g. the offsets child and chars
data of a cuDF string column, zero-copy; see `gpupipe.backends.cudf.column_buffers`). It cuts the documents into chunks
of at most ``chunk_bytes`` of text, gives every document of a chunk its own slice of scratch (as
long as the document, tables twice that), and returns numpy arrays shaped like the CPU
launcher's.

Why one thread per document and not one warp: the routines are sequential scans with
data-dependent branches (a tokenizer, hash tables), which a warp could only share by being
rewritten, and one source for both targets is the point. Long documents are the price: a chunk
takes as long as its longest document, which `bench_gpu.py` measures.

`compile_ptx` compiles every kernel for given architectures with no GPU present; `usable` says
whether a GPU can run them. Only this module imports ``numba.cuda``.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator

import numpy as np
from numba import cuda, types

from gpupipe.charsets import char_table
from gpupipe.kernels import (
    bpe,
    clean,
    contamination,
    hashing,
    langid,
    normalize,
    pii,
    quality,
    repetition,
    spans,
    utf8,
    words,
)
from gpupipe.kernels.aot import sources_digest
from gpupipe.kernels.target import SIMULATOR, max_len, register_cuda_mul_rn

if not SIMULATOR:
    register_cuda_mul_rn()

THREADS = 32 if SIMULATOR else 128
# 64 MiB of text per launch. gopher_repetition, the largest, takes up to ~200 bytes of scratch
# per byte of text (spans, prefix hashes, tables twice the length): ~12 GiB per launch; pass a
# smaller chunk_bytes on a small GPU
CHUNK_BYTES = 1 << 26


# --------------------------------------------------------------------------- availability

@functools.lru_cache(maxsize=1)
def usable() -> tuple[bool, str]:
    """(True, device name) when a GPU runs a kernel here (or the simulator is on)."""
    if SIMULATOR:
        return True, "CUDA simulator (NUMBA_ENABLE_CUDASIM=1)"
    try:
        if not cuda.is_available():
            return False, "no CUDA driver or GPU is visible to numba-cuda"
        out = cuda.device_array(4, dtype=np.int64)
        _probe[1, 4](out)
        if list(out.copy_to_host()) != [0, 1, 4, 9]:
            return False, "a test kernel returned a wrong result"
        dev = cuda.get_current_device()
        name = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
        return True, f"{name} (compute capability {dev.compute_capability[0]}."\
                     f"{dev.compute_capability[1]})"
    except Exception as e:  # no driver, no device, a broken install
        return False, f"{type(e).__name__}: {e}"


@cuda.jit
def _probe(out):
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] = i * i


# --------------------------------------------------------------------------- kernels and types

# argument types, as the launchers pass them: C-contiguous arrays and scalars. `OFF` stands for
# a string column's offsets: int64 from a host Arrow array, int32 (or int64) from a cuDF column
OFF = object()
B1, U8, U16, I32, I64, U32, U64, F32 = (types.boolean[::1], types.uint8[::1], types.uint16[::1],
                                        types.int32[::1], types.int64[::1], types.uint32[::1],
                                        types.uint64[::1], types.float32[::1])
B2, I64_2, U32_2, U64_2, F32_2 = (types.boolean[:, ::1], types.int64[:, ::1],
                                  types.uint32[:, ::1], types.uint64[:, ::1],
                                  types.float32[:, ::1])
I64_3 = types.int64[:, :, ::1]
b1, i64, u32, u64 = types.boolean, types.int64, types.uint32, types.uint64

#: every CUDA kernel with the argument types its launcher passes (what `compile_ptx` compiles)
KERNELS: list[tuple] = []


def kernel(*signatures: tuple):
    """``cuda.jit`` a kernel with numba-cuda's disk cache (`_SourceKeyedCache`), and record the
    argument types it is launched with (one tuple per variant; `OFF` is compiled for int64 and
    int32 offsets)."""

    def wrap(fn):
        jitted = cuda.jit(fn)
        if not SIMULATOR:
            jitted._cache = _SourceKeyedCache(jitted.py_func)   # what cache=True would set
        KERNELS.append((jitted, signatures))
        return jitted

    return wrap


if not SIMULATOR:
    from numba.cuda.dispatcher import CUDACache

    class _SourceKeyedCache(CUDACache):
        """numba-cuda's kernel cache (machine code per signature and compute capability, in
        ``NUMBA_CACHE_DIR``, the package's ``__pycache__`` or numba's per-user directory), with
        an entry also keyed by `sources_digest`: an edit to a routine in another module of the
        package recompiles, where numba alone would load the stale kernel."""

        def _index_key(self, sig, codegen):
            return (*super()._index_key(sig, codegen), ("gpupipe.kernels", sources_digest()))


def cannot_warm() -> str | None:
    """Why `warm` cannot compile here (no usable GPU, or the simulator, which compiles
    nothing), or None."""
    if SIMULATOR:
        return "the CUDA simulator is on (NUMBA_ENABLE_CUDASIM=1)"
    ok, device = usable()
    return None if ok else device


def warm(progress=None) -> list[dict]:
    """Compile every kernel of `KERNELS`, each declared variant, for the current GPU into the
    disk cache (or load it from there): what ``gpupipe warmup --cuda`` runs on a GPU node, so
    no run there compiles. One record per kernel: ``{cuda_kernel, variants, seconds,
    from_cache}``; ``progress(record)`` is called after each. Raises RuntimeError where
    `cannot_warm` says why not."""
    import time

    why = cannot_warm()
    if why is not None:
        raise RuntimeError(f"no usable GPU: {why}")
    out = []
    for jitted, signatures in KERNELS:
        sigs = [s for declared in signatures for s in _expand(declared)]
        hits = sum(jitted.stats.cache_hits.values())
        t0 = time.perf_counter()
        for sig in sigs:
            jitted.compile(sig)
        record = {"cuda_kernel": jitted.py_func.__name__, "variants": len(sigs),
                  "seconds": round(time.perf_counter() - t0, 3),
                  "from_cache": sum(jitted.stats.cache_hits.values()) - hits == len(sigs)}
        out.append(record)
        if progress is not None:
            progress(record)
    return out


def _expand(signature: tuple) -> list[tuple]:
    if OFF not in signature:
        return [signature]
    return [tuple(width if t is OFF else t for t in signature) for width in (I64, I32)]


@contextlib.contextmanager
def _no_device(cc: tuple[int, int]):
    """Compiling a call to a device function asks numba-cuda for the current device's compute
    capability; with no GPU, it is told ``cc``."""
    import numba.cuda.dispatcher as dispatcher

    class _Device:
        compute_capability = cc

    saved = dispatcher.get_current_device
    dispatcher.get_current_device = lambda: _Device
    try:
        yield
    finally:
        dispatcher.get_current_device = saved


def _compute_capability(arch: str) -> tuple[int, int]:
    digits = arch.removeprefix("sm_").removeprefix("compute_")
    if not digits.isdigit() or len(digits) < 2:
        raise ValueError(f"architecture {arch!r}: expected sm_XY, e.g. sm_80 or sm_90")
    return int(digits[:-1]), int(digits[-1])


def kernel_ptx(jitted, arch: str) -> list[str]:
    """The PTX of ``jitted`` (a kernel of `KERNELS`) for ``arch``, one per declared variant."""
    cc = _compute_capability(arch)
    (signatures,) = [sigs for k, sigs in KERNELS if k is jitted]
    out = []
    with _no_device(cc):
        for sig in (s for declared in signatures for s in _expand(declared)):
            try:
                ptx, _ = cuda.compile_ptx(jitted.py_func, sig, cc=cc)
            except Exception as e:
                raise RuntimeError(f"CUDA kernel {jitted.py_func.__name__} does not compile "
                                   f"for {arch} with ({', '.join(map(str, sig))}): {e}") from e
            out.append(ptx)
    return out


def compile_ptx(archs: list[str], jobs: int | None = None) -> list[dict]:
    """Compile every kernel of `KERNELS`, each declared variant, to PTX for ``archs``
    (``["sm_80", "sm_90"]``); no GPU needed. One record per kernel, variant and architecture:
    ``{cuda_kernel, arch, ptx_bytes}``; raises on the first typing or lowering error, naming the
    kernel. ``jobs``: processes compiling in parallel (default: one per CPU; 1 compiles here)."""
    import os

    for a in archs:
        _compute_capability(a)
    tasks = [(jitted.py_func.__name__, arch) for arch in archs for jitted, _ in KERNELS]
    jobs = min(len(tasks), jobs or os.cpu_count() or 1)
    if jobs > 1:
        import concurrent.futures
        import multiprocessing

        # spawned: a fork of a process with threads (a Dask client, a notebook) can deadlock
        with concurrent.futures.ProcessPoolExecutor(
                jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            sizes = list(pool.map(_ptx_sizes, tasks))
    else:
        sizes = [_ptx_sizes(t) for t in tasks]
    return [{"cuda_kernel": name, "arch": arch, "ptx_bytes": n}
            for (name, arch), variants in zip(tasks, sizes) for n in variants]


def _ptx_sizes(task: tuple[str, str]) -> list[int]:
    name, arch = task
    return [len(ptx) for ptx in kernel_ptx(globals()[name], arch)]


def _launch(kernel, n: int, *args) -> None:
    if n == 0:
        return
    kernel[(n + THREADS - 1) // THREADS, THREADS](*args)


# --------------------------------------------------------------------------- buffers

def _is_device(x) -> bool:
    if SIMULATOR:
        from gpupipe.kernels.target import _fake_array_types

        return isinstance(x, _fake_array_types())
    return hasattr(x, "__cuda_array_interface__")


def to_device(x):
    """A device array of ``x`` (zero-copy for a device array; a copy of host memory)."""
    if _is_device(x):   # the simulator's device arrays are its own (no as_cuda_array there)
        return x if SIMULATOR else cuda.as_cuda_array(x)
    x = np.ascontiguousarray(x)
    if x.size == 0 and x.ndim == 1:  # no zero-byte device allocation: a view of one element
        return cuda.to_device(np.zeros(1, x.dtype))[:0]
    return cuda.to_device(x)


def _zeros(shape, dtype):
    if SIMULATOR:  # a fill kernel would run one Python thread per element
        return cuda.to_device(np.zeros(shape, dtype))
    out = cuda.device_array(shape, dtype=dtype)
    if out.size:
        _fill_zero[max(1, (out.size + 255) // 256), 256](out.reshape(out.size))
    return out


def _empty(shape, dtype):
    return cuda.device_array(shape, dtype=dtype)


@cuda.jit
def _fill_zero(x):
    i = cuda.grid(1)
    if i < x.shape[0]:
        x[i] = 0


def to_host(x) -> np.ndarray:
    return x if isinstance(x, np.ndarray) else x.copy_to_host()


def _chunks(offsets: np.ndarray, chunk_bytes: int) -> Iterator[tuple[int, int]]:
    """Document ranges [a, b) with at most ``chunk_bytes`` of text each (a longer document is a
    chunk of its own)."""
    n = len(offsets) - 1
    a = 0
    while a < n:
        limit = offsets[a] + chunk_bytes
        b = int(np.searchsorted(offsets, limit, side="right")) - 1
        b = min(max(b, a + 1), n)
        yield a, b
        a = b


def _regions(offsets: np.ndarray, a: int, b: int, table: bool = False) -> np.ndarray:
    """Start of each document's scratch slice in a chunk (+ the total at the end): as long as
    the document plus one, or (``table``) the hash table size for that many keys."""
    lens = np.diff(offsets[a: b + 1]).astype(np.int64) + 1
    if table:
        lens = np.maximum(16, 1 << np.ceil(np.log2(np.maximum(2 * lens, 1))).astype(np.int64))
    reg = np.zeros(len(lens) + 1, np.int64)
    np.cumsum(lens, out=reg[1:])
    return reg


def _host_offsets(offsets) -> np.ndarray:
    return np.asarray(to_host(offsets) if _is_device(offsets) else offsets, dtype=np.int64)


# --------------------------------------------------------------------------- kernels

@kernel((OFF, U8, I64))
def _count_chars_kernel(offsets, data, out):
    d = cuda.grid(1)
    if d < out.shape[0]:
        out[d] = utf8.count_chars_doc(data, offsets[d], offsets[d + 1])


@kernel((OFF, U8, I64))
def _count_words_kernel(offsets, data, out):
    d = cuda.grid(1)
    if d < out.shape[0]:
        out[d] = utf8.count_words_doc(data, offsets[d], offsets[d + 1])


@kernel((OFF, U8, B1, B1))
def _needs_normalization_kernel(offsets, data, table, out):
    d = cuda.grid(1)
    if d < out.shape[0]:
        out[d] = normalize.needs_normalization_doc(data, offsets[d], offsets[d + 1], table)


@kernel((OFF, U8, U16, b1, I64, I32, I64, I64, I64, I64, I64))
def _count_tokens_kernel(offsets, data, T, nonsymbol_only, reg, cp, ts, te, ss, se, out):
    d = cuda.grid(1)
    if d < out.shape[0]:
        r0 = reg[d]
        r1 = reg[d + 1]
        out[d] = words.count_tokens_doc(data, offsets[d], offsets[d + 1], T, nonsymbol_only,
                                        cp[r0:r1], ts[r0:r1], te[r0:r1], ss[r0:r1], se[r0:r1])


@kernel((OFF, U8, U16, I32, I64, I64, I32, I64, I64, I64, I64, B2, I64_2))
def _gopher_quality_kernel(offsets, data, T, stop_cp, stop_off, reg, cp, ts, te, ss, se, seen,
                           out):
    d = cuda.grid(1)
    if d < out.shape[0]:
        r0 = reg[d]
        r1 = reg[d + 1]
        quality.gopher_quality_doc(data, offsets[d], offsets[d + 1], T, stop_cp, stop_off,
                                   cp[r0:r1], ts[r0:r1], te[r0:r1], ss[r0:r1], se[r0:r1],
                                   seen[d], out[d])


@kernel((OFF, U8, U16, U8, b1, i64, I64, I64, I32, I64, I64, I64, I64, U64, I64,
         U64, I64, I64_2))
def _fineweb_kernel(offsets, data, T, stop_table, use_table, short_len, reg, treg, cp, ts, te,
                    ss, se, seg_h, seg_l, keys, used, out):
    d = cuda.grid(1)
    if d < out.shape[0]:
        r0 = reg[d]
        r1 = reg[d + 1]
        t0 = treg[d]
        t1 = treg[d + 1]
        quality.fineweb_doc(data, offsets[d], offsets[d + 1], T, stop_table, use_table,
                            short_len, cp[r0:r1], ts[r0:r1], te[r0:r1], ss[r0:r1], se[r0:r1],
                            seg_h[r0:r1], seg_l[r0:r1], keys[t0:t1], used[t0:t1], out[d])


@kernel((OFF, U8, U16, I64, I64, U64, I64, I64, I32, I64, I64, I64, I64, U64, I64,
         U64, U64, U64, I64, U64, I64, I64, I64, I64_2, I64_2, I64_2))
def _gopher_repetition_kernel(offsets, data, T, top_ns, dup_ns, power, reg, treg, cp, ts, te,
                              ss, se, seg_h, seg_l, cprefix, tprefix, prefix, wstart, keys, cnt,
                              used, slot, base, top, dup):
    d = cuda.grid(1)
    if d < base.shape[0]:
        r0 = reg[d]
        r1 = reg[d + 1]
        t0 = treg[d]
        t1 = treg[d + 1]
        repetition.gopher_repetition_doc(
            data, offsets[d], offsets[d + 1], T, top_ns, dup_ns, power, cp[r0:r1], ts[r0:r1],
            te[r0:r1], ss[r0:r1], se[r0:r1], seg_h[r0:r1], seg_l[r0:r1], cprefix[r0:r1],
            tprefix[r0:r1], prefix[r0:r1], wstart[r0:r1], keys[t0:t1], cnt[t0:t1], used[t0:t1],
            slot[r0:r1], base[d], top[d], dup[d])


@kernel((OFF, U8, U16, i64, b1, b1, i64, b1, b1, b1, b1, I32, I64, i64, I64, I32, I64, I64,
         I64, I64, I32, U8, i64, U8, I64, I64_2))
def _c4_kernel(offsets, data, T, max_word_length, remove_citations, terminal_punct, min_words,
               lorem, javascript, curly, policy, policy_cp, policy_off, min_sentences, reg, cp,
               ts, te, ss, se, buf, out, base, codes, ends, counts):
    d = cuda.grid(1)
    if d < codes.shape[0]:
        r0 = reg[d]
        r1 = reg[d + 1]
        code, end = quality.c4_doc(
            data, offsets[d], offsets[d + 1], T, max_word_length, remove_citations,
            terminal_punct, min_words, lorem, javascript, curly, policy, policy_cp, policy_off,
            min_sentences, cp[r0:r1], ts[r0:r1], te[r0:r1], ss[r0:r1], se[r0:r1], buf[r0:r1],
            out, offsets[d] - base, counts[d])
        codes[d] = code
        ends[d] = end


@kernel((OFF, U8, u64, U64))
def _xxh64_kernel(offsets, data, seed, out):
    d = cuda.grid(1)
    if d < out.shape[0]:
        out[d] = hashing.xxh64(data, offsets[d], offsets[d + 1], seed)


@kernel((OFF, U8, i64, u32, U32, U32, U32_2, b1), (OFF, U8, i64, u64, U64, U64, U64_2, b1))
def _minhash_kernel(offsets, data, width, seed, a, b, out, bits64):
    d = cuda.grid(1)
    if d < out.shape[0]:
        hashing.minhash_doc(data, offsets[d], offsets[d + 1], width, seed, a, b, out[d], bits64)


@kernel((OFF, OFF, U8, i64, u64, U64, U64, I64, U8, U64_2, b1))
def _minhash_ngrams_kernel(list_offsets, offsets, data, ngrams, seed, a, b, reg, buf, out,
                           bits64):
    r = cuda.grid(1)
    if r < out.shape[0]:
        hashing.minhash_ngrams_doc(list_offsets, r, offsets, data, ngrams, seed, a, b, out[r],
                                   bits64, buf[reg[r]:reg[r + 1]])


@kernel((OFF, U8, I32, U64, U64, U64, i64, I64, U64, U64, I64, I64_2, I64_3, U64_2,
         I64, U64, I64))
def _contamination_kernel(offsets, data, fold, keys, masks, bloom, shift, lengths, bpow, ring_p,
                          ring_s, set_hits, regions, region_masks, hits, hit_sets, nreg):
    d = cuda.grid(1)
    if d < hits.shape[0]:
        r = bpow.shape[0]
        hits[d], hit_sets[d], nreg[d] = contamination.scan_doc(
            data, offsets[d], offsets[d + 1], fold, keys, masks, bloom, shift, lengths, bpow,
            ring_p[d * r:(d + 1) * r], ring_s[d * r:(d + 1) * r], set_hits[d], regions[d],
            region_masks[d])


@kernel((OFF, U8, U32, I64, I32, F32_2, F32, F32, I64, I32, I32, I64, F32_2))
def _langid_kernel(offsets, data, nextmove, rowbase, out_feat, ptc, prior, log1p, treg, keys,
                   cnt, touched, scores):
    d = cuda.grid(1)
    if d < scores.shape[0]:
        t0 = treg[d]
        t1 = treg[d + 1]
        langid.langid_scores_doc(data, offsets[d], offsets[d + 1], nextmove, rowbase, out_feat,
                                 ptc, prior, log1p, keys[t0:t1], cnt[t0:t1], touched[t0:t1],
                                 scores[d])


# --------------------------------------------------------------------------- launchers

def _one_per_doc(kernel, dtype, offsets, data, *args) -> np.ndarray:
    """Launch a kernel that writes one ``dtype`` value per document and needs no scratch."""
    n = len(offsets) - 1
    out = _zeros(n, dtype)
    _launch(kernel, n, to_device(offsets), to_device(data), *args, out)
    return to_host(out)


def count_chars(offsets, data) -> np.ndarray:
    """`gpupipe.kernels.utf8.count_chars` on the GPU."""
    return _one_per_doc(_count_chars_kernel, np.int64, offsets, data)


def count_words(offsets, data) -> np.ndarray:
    """`gpupipe.kernels.utf8.count_words` on the GPU."""
    return _one_per_doc(_count_words_kernel, np.int64, offsets, data)


@kernel((OFF, U8, U8, I64, I64))
def _count_substrings_kernel(offsets, data, pat, pat_off, out):
    d = cuda.grid(1)
    if d < out.shape[0]:
        out[d] = utf8.count_substrings_doc(data, offsets[d], offsets[d + 1], pat, pat_off)


def count_substrings(offsets, data, patterns) -> np.ndarray:
    """`gpupipe.kernels.utf8.count_substrings` on the GPU."""
    pat, pat_off = utf8.pattern_bytes(patterns)
    return _one_per_doc(_count_substrings_kernel, np.int64, offsets, data, to_device(pat),
                        to_device(pat_off))


@kernel((OFF, U8, U8, I64, B1))
def _pii_kernel(offsets, data, lit, lit_off, out):
    d = cuda.grid(1)
    if d < out.shape[0]:
        out[d] = pii.pii_candidate_doc(data, offsets[d], offsets[d + 1], lit, lit_off)


def pii_candidates(offsets, data) -> np.ndarray:
    """`gpupipe.kernels.pii.pii_candidates` on the GPU."""
    lit, lit_off = utf8.pattern_bytes(pii.LITERALS)
    return _one_per_doc(_pii_kernel, np.bool_, offsets, data, to_device(lit), to_device(lit_off))


@kernel((OFF, U8, B1, B1))
def _langid_prepare_kernel(offsets, data, table, out):
    d = cuda.grid(1)
    if d < out.shape[0]:
        out[d] = langid.needs_prepare_doc(data, offsets[d], offsets[d + 1], table)


def langid_needs_prepare(offsets, data) -> np.ndarray:
    """`gpupipe.kernels.langid.langid_needs_prepare` on the GPU."""
    return _one_per_doc(_langid_prepare_kernel, np.bool_, offsets, data,
                        to_device(normalize.stable_table("NFC")))


def needs_normalization(offsets, data, form: str) -> np.ndarray:
    """`gpupipe.kernels.normalize.needs_normalization` on the GPU."""
    return _one_per_doc(_needs_normalization_kernel, np.bool_, offsets, data,
                        to_device(normalize.stable_table(form)))


def _per_chunk(offsets, chunk_bytes):
    """(device offsets, host offsets, chunk ranges)."""
    host = _host_offsets(offsets)
    return to_device(offsets), host, list(_chunks(host, chunk_bytes))


def _scratch(size: int):
    """Device scratch of a tokenizing routine: code points, token spans, suffix stack."""
    return (_empty(size, np.int32), _empty(size, np.int64), _empty(size, np.int64),
            _empty(size, np.int64), _empty(size, np.int64))


def count_tokens(offsets, data, nonsymbol_only: bool, *,
                 chunk_bytes: int = CHUNK_BYTES) -> np.ndarray:
    """`gpupipe.kernels.words.count_tokens` on the GPU."""
    off, host, chunks = _per_chunk(offsets, chunk_bytes)
    dat, T = to_device(data), to_device(char_table())
    out = _zeros(len(host) - 1, np.int64)
    for a, b in chunks:
        reg = _regions(host, a, b)
        sc = _scratch(int(reg[-1]))
        _launch(_count_tokens_kernel, b - a, off[a: b + 1], dat, T, nonsymbol_only,
                to_device(reg), *sc, out[a:b])
    return to_host(out)


def gopher_quality_features(offsets, data, stop_words: list[str], *,
                            chunk_bytes: int = CHUNK_BYTES) -> np.ndarray:
    """`gpupipe.kernels.quality.gopher_quality_features` on the GPU."""
    off, host, chunks = _per_chunk(offsets, chunk_bytes)
    dat, T = to_device(data), to_device(char_table())
    stop_cp, stop_off = (to_device(x) for x in quality.pattern_table(stop_words))
    out = _zeros((len(host) - 1, quality.GQ_MEASURES), np.int64)
    for a, b in chunks:
        reg = _regions(host, a, b)
        seen = _zeros((b - a, max(len(stop_words), 1)), np.bool_)
        _launch(_gopher_quality_kernel, b - a, off[a: b + 1], dat, T, stop_cp, stop_off,
                to_device(reg), *_scratch(int(reg[-1])), seen, out[a:b])
    return to_host(out)


def fineweb_features(offsets, data, stop_chars: str | None, short_len: int, *,
                     chunk_bytes: int = CHUNK_BYTES) -> np.ndarray:
    """`gpupipe.kernels.quality.fineweb_features` on the GPU."""
    off, host, chunks = _per_chunk(offsets, chunk_bytes)
    dat, T = to_device(data), to_device(char_table())
    table = to_device(quality.fineweb_stop_table(stop_chars))
    out = _zeros((len(host) - 1, quality.FW_MEASURES), np.int64)
    for a, b in chunks:
        reg, treg = _regions(host, a, b), _regions(host, a, b, table=True)
        size, tsize = int(reg[-1]), int(treg[-1])
        _launch(_fineweb_kernel, b - a, off[a: b + 1], dat, T, table, stop_chars is not None,
                short_len, to_device(reg), to_device(treg), *_scratch(size),
                _empty(size, np.uint64), _empty(size, np.int64), _zeros(tsize, np.uint64),
                _empty(tsize, np.int64), out[a:b])
    return to_host(out)


def gopher_repetition_features(offsets, data, top_ns, dup_ns, *,
                               chunk_bytes: int = CHUNK_BYTES):
    """`gpupipe.kernels.repetition.gopher_repetition_features` on the GPU."""
    off, host, chunks = _per_chunk(offsets, chunk_bytes)
    dat, T = to_device(data), to_device(char_table())
    top_ns = np.asarray(top_ns, np.int64)
    dup_ns = np.asarray(dup_ns, np.int64)
    n = len(host) - 1
    base = _zeros((n, 7), np.int64)
    top = _zeros((n, len(top_ns)), np.int64)
    dup = _zeros((n, len(dup_ns)), np.int64)
    power = to_device(repetition.rolling_powers(max_len(host)))
    tn, dn = to_device(top_ns), to_device(dup_ns)
    for a, b in chunks:
        reg, treg = _regions(host, a, b), _regions(host, a, b, table=True)
        size, tsize = int(reg[-1]), int(treg[-1])
        _launch(_gopher_repetition_kernel, b - a, off[a: b + 1], dat, T, tn, dn, power,
                to_device(reg), to_device(treg), *_scratch(size), _empty(size, np.uint64),
                _empty(size, np.int64), _empty(size, np.uint64), _empty(size, np.uint64),
                _empty(size, np.uint64), _empty(size, np.int64), _zeros(tsize, np.uint64),
                _empty(tsize, np.int64), _empty(tsize, np.int64), _empty(size, np.int64),
                base[a:b], top[a:b], dup[a:b])
    return to_host(base), to_host(top), to_host(dup)


def c4_rewrite(offsets, data, *, max_word_length: int, remove_citations: bool,
               terminal_punct: bool, min_words: int, lorem: bool, javascript: bool, curly: bool,
               policy: bool, policy_substrings, min_sentences: int,
               chunk_bytes: int = CHUNK_BYTES):
    """`gpupipe.kernels.quality.c4_rewrite` on the GPU (the same four results)."""
    off, host, chunks = _per_chunk(offsets, chunk_bytes)
    dat, T = to_device(data), to_device(char_table())
    pol_cp, pol_off = (to_device(x) for x in quality.pattern_table(
        [p.lower() for p in policy_substrings]))
    n = len(host) - 1
    total = int(host[-1] - host[0])
    out = _empty(max(total, 1), np.uint8)
    codes = _zeros(n, np.uint8)
    ends = _zeros(n, np.int64)
    counts = _zeros((n, quality.C4_LINE_RULES), np.int64)
    for a, b in chunks:
        reg = _regions(host, a, b)
        size = int(reg[-1])
        _launch(_c4_kernel, b - a, off[a: b + 1], dat, T, max_word_length, remove_citations,
                terminal_punct, min_words, lorem, javascript, curly, policy, pol_cp, pol_off,
                min_sentences, to_device(reg), *_scratch(size), _empty(size, np.int32), out,
                int(host[0]), codes[a:b], ends[a:b], counts[a:b])
    codes, ends, counts = to_host(codes), to_host(ends), to_host(counts)
    starts = host[:-1] - host[0]
    text, new_off = _compact(out, total, starts, np.where(codes == 0, ends - starts, 0))
    return codes, text, new_off, counts


def _compact(out, total: int, starts: np.ndarray, lens: np.ndarray):
    """(UTF-8 data, int64 offsets) on the host of documents that each wrote ``lens[d]`` bytes at
    ``starts[d]`` of ``out`` (the start of their own input range)."""
    new_off = np.zeros(len(starts) + 1, np.int64)
    np.cumsum(lens, out=new_off[1:])
    mark = np.zeros(total + 1, np.int64)
    np.add.at(mark, starts, 1)
    np.add.at(mark, starts + lens, -1)
    keep = np.cumsum(mark[:-1]) > 0
    text = to_host(out)[:total][keep] if total else np.zeros(0, np.uint8)
    return text, new_off


@kernel((OFF, U8, B1, b1, b1, b1, b1, b1, i64, b1, U8, i64, I64, B1))
def _clean_kernel(offsets, data, pre_only, newlines, remove_control, unicode_spaces, collapse,
                  lines, max_blank, strip, out, base, ends, changed):
    d = cuda.grid(1)
    if d < ends.shape[0]:
        end, ch = clean.clean_doc(data, offsets[d], offsets[d + 1], out, offsets[d] - base,
                                  pre_only[d], newlines, remove_control, unicode_spaces,
                                  collapse, lines, max_blank, strip)
        ends[d] = end
        changed[d] = ch


def clean_text(offsets, data, pre_only, *, newlines: bool, remove_control: bool,
               unicode_spaces: bool, collapse_spaces: bool, strip_lines: bool,
               max_blank_lines: int | None, strip: bool, chunk_bytes: int = CHUNK_BYTES):
    """`gpupipe.kernels.clean.clean_text` on the GPU (the same three results, on the host)."""
    off, host, chunks = _per_chunk(offsets, chunk_bytes)
    dat, pre = to_device(data), to_device(np.asarray(pre_only, dtype=np.bool_))
    n = len(host) - 1
    total = int(host[-1] - host[0])
    out = _empty(max(total, 1), np.uint8)
    ends, changed = _zeros(n, np.int64), _zeros(n, np.bool_)
    keep = -1 if max_blank_lines is None else int(max_blank_lines)
    for a, b in chunks:
        _launch(_clean_kernel, b - a, off[a: b + 1], dat, pre[a:b], newlines, remove_control,
                unicode_spaces, collapse_spaces, strip_lines, keep, strip, out, int(host[0]),
                ends[a:b], changed[a:b])
    starts = host[:-1] - host[0]
    text, new_off = _compact(out, total, starts, to_host(ends) - starts)
    return new_off, text, to_host(changed)


def xxh64_strings(offsets, data, seed: int = 0) -> np.ndarray:
    """`gpupipe.kernels.hashing.xxh64_strings` on the GPU."""
    return _one_per_doc(_xxh64_kernel, np.uint64, offsets, data, np.uint64(seed))


def minhash(offsets, data, *, seed: int, a, b, width: int, bits: int = 32) -> np.ndarray:
    """`gpupipe.kernels.hashing.minhash` on the GPU, from the UTF-8 view of the strings."""
    if width < 2:
        raise ValueError("width must be at least 2 (as in cuDF)")
    seed, a, b = hashing.minhash_params(seed, a, b, bits)
    n = len(offsets) - 1
    out = _empty((n, len(a)), a.dtype)
    _launch(_minhash_kernel, n, to_device(offsets), to_device(data), width, seed, to_device(a),
            to_device(b), out, bits == 64)
    return to_host(out)


@functools.lru_cache(maxsize=1)
def _fold_on_device():
    return to_device(contamination.fold_table())


def contamination_scan(offsets, data, keys, masks, bloom, lengths, nsets: int,
                       max_regions: int) -> tuple[np.ndarray, ...]:
    """`gpupipe.kernels.contamination.contamination_scan` on the GPU (the index arrays are
    copied to the device per call: a few MiB)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    n = len(offsets) - 1
    if n == 0 or len(keys) == 0:
        return contamination.contamination_scan(np.zeros(n + 1, np.int64), np.zeros(0, np.uint8),
                                                keys, masks, bloom, lengths, nsets, max_regions)
    r = int(lengths.max()) + 1
    fold = _fold_on_device()
    outs = (_zeros((n, nsets), np.int64), _zeros((n, max_regions, 2), np.int64),
            _zeros((n, max_regions), np.uint64), _zeros(n, np.int64), _zeros(n, np.uint64),
            _zeros(n, np.int64))
    _launch(_contamination_kernel, n, to_device(offsets), to_device(data), fold,
            to_device(keys), to_device(masks), to_device(bloom), 64 - contamination.BLOOM_BITS,
            to_device(lengths), to_device(contamination.powers(r - 1)), _empty(n * r, np.uint64),
            _empty(n * r, np.int64), *outs)
    set_hits, regions, region_masks, hits, hit_sets, nreg = (to_host(x) for x in outs)
    return hits, hit_sets, nreg, set_hits, regions, region_masks


def minhash_ngrams(list_offsets, offsets, data, *, ngrams: int, seed: int, a, b,
                   bits: int = 32) -> np.ndarray:
    """`gpupipe.kernels.hashing.minhash_ngrams` on the GPU, from a list<string> column's
    buffers (`gpupipe.kernels.hashing.list_buffers`)."""
    seed, a, b = hashing.minhash_params(seed, a, b, bits)
    lo = _host_offsets(list_offsets)
    eo = _host_offsets(offsets)
    row_bytes = eo[lo[1:]] - eo[lo[:-1]]
    reg = np.zeros(len(lo), np.int64)
    np.cumsum(row_bytes + 1, out=reg[1:])
    n = len(lo) - 1
    out = _empty((n, len(a)), a.dtype)
    _launch(_minhash_ngrams_kernel, n, to_device(list_offsets), to_device(offsets),
            to_device(data), ngrams, seed, to_device(a), to_device(b), to_device(reg),
            _empty(max(int(reg[-1]), 1), np.uint8), out, bits == 64)
    return to_host(out)


def langid_scores(offsets, data, model=None, *, chunk_bytes: int = CHUNK_BYTES) -> np.ndarray:
    """`gpupipe.kernels.langid.langid_scores` on the GPU."""
    m = model or langid.langid_model()
    off, host, chunks = _per_chunk(offsets, chunk_bytes)
    dat = to_device(data)
    arrays = [to_device(x) for x in (m.nextmove, m.rowbase, m.out_feat, m.ptc, m.prior)]
    log1p = to_device(langid.log1p_table(max_len(host)))
    scores = _empty((len(host) - 1, len(m.prior)), np.float32)
    for a, b in chunks:
        treg = _regions(host, a, b, table=True)
        tsize = int(treg[-1])
        _launch(_langid_kernel, b - a, off[a: b + 1], dat, *arrays, log1p, to_device(treg),
                _zeros(tsize, np.int32), _zeros(tsize, np.int32), _empty(tsize, np.int64),
                scores[a:b])
    return to_host(scores)


def langid_identify(offsets, data, model=None) -> tuple[np.ndarray, np.ndarray]:
    """(class index, probability): scores on the GPU, the softmax on the host (as on CPU)."""
    return langid.pick(langid_scores(offsets, data, model), model)


# --------------------------------------------------------------------------- span dedup

@kernel((OFF, U8, i64, i64, I32, U8, U16, I64, I64, I32, I64, I64, I64, I64, I64, U64, U64,
         I64, I64))
def _span_units_kernel(offsets, data, unit, span, table, classes, T, reg, sreg, cp, ts, te, ss,
                       se, ends, uh, wh, nunits, nwin):
    d = cuda.grid(1)
    if d < nunits.shape[0]:
        r0 = reg[d]
        r1 = reg[d + 1]
        s0 = sreg[d]
        s1 = sreg[d + 1]
        n = spans.split_doc(data, offsets[d], offsets[d + 1], unit, table, classes, T,
                            cp[s0:s1], ts[s0:s1], te[s0:s1], ss[s0:s1], se[s0:s1],
                            ends[r0:r1], uh[r0:r1])
        nunits[d] = n
        nwin[d] = spans.doc_windows(uh[r0:r1], n, span, wh[r0:r1])


def _gather(values: np.ndarray, reg: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The first ``counts[d]`` values of each document's region ``reg[d]:`` (on the host)."""
    idx = np.repeat(reg[:-1] - np.cumsum(counts) + counts, counts) + np.arange(counts.sum())
    return values[idx]


def span_units(offsets, data, unit: str, span: int, table: np.ndarray, *,
               chunk_bytes: int = CHUNK_BYTES):
    """`gpupipe.kernels.spans.span_units` on the GPU (the same four arrays, on the host)."""
    off, host, chunks = _per_chunk(offsets, chunk_bytes)
    n = len(host) - 1
    if n == 0:
        return spans.span_units(host, np.zeros(0, np.uint8), unit, span, table)
    dat, classes = to_device(data), to_device(spans.CLASS_TABLE)
    tab, T = to_device(table), to_device(char_table())
    nunits, nwin = _zeros(n, np.int64), _zeros(n, np.int64)
    ends_all, wh_all = [], []
    for a, b in chunks:
        reg = _regions(host, a, b)
        size = int(reg[-1])
        # the sentence unit tokenizes: scratch as long as each document; the others need none
        sreg = reg if unit == "sentence" else np.zeros(b - a + 1, np.int64)
        ends, uh, wh = _empty(size, np.int64), _empty(size, np.uint64), _empty(size, np.uint64)
        _launch(_span_units_kernel, b - a, off[a: b + 1], dat, spans.UNITS[unit], span, tab,
                classes, T, to_device(reg), to_device(sreg), *_scratch(max(int(sreg[-1]), 1)),
                ends, uh, wh, nunits[a:b], nwin[a:b])
        nu, nw = to_host(nunits[a:b]), to_host(nwin[a:b])
        ends_all.append(_gather(to_host(ends), reg, nu))
        wh_all.append(_gather(to_host(wh), reg, nw))
    return (to_host(nunits), np.concatenate(ends_all).astype(np.int64), to_host(nwin),
            np.concatenate(wh_all).astype(np.uint64))


@kernel((OFF, U8, I64, I64, B1, U8, U8, i64, I64, B1))
def _cut_units_kernel(offsets, data, unit_off, ends, cut, classes, out, base, lens, changed):
    d = cuda.grid(1)
    if d < lens.shape[0]:
        u0 = unit_off[d]
        u1 = unit_off[d + 1]
        length, ch = spans.cut_doc(data, offsets[d], offsets[d + 1], ends[u0:u1], u1 - u0,
                                   cut[u0:u1], classes, out, offsets[d] - base)
        lens[d] = length
        changed[d] = ch


def cut_units(offsets, data, nunits, ends, cut):
    """`gpupipe.kernels.spans.cut_units` on the GPU (the same three results, on the host)."""
    host = _host_offsets(offsets)
    n = len(host) - 1
    unit_off = np.zeros(n + 1, np.int64)
    np.cumsum(np.asarray(nunits, np.int64), out=unit_off[1:])
    total = int(host[-1] - host[0]) if n else 0
    out = _empty(max(total, 1), np.uint8)
    lens, changed = _zeros(n, np.int64), _zeros(n, np.bool_)
    _launch(_cut_units_kernel, n, to_device(offsets), to_device(data), to_device(unit_off),
            to_device(np.asarray(ends, np.int64)), to_device(np.asarray(cut, np.bool_)),
            to_device(spans.CLASS_TABLE), out,
            int(host[0]) if n else 0, lens, changed)
    lens = to_host(lens)
    starts = host[:-1] - host[0]
    text, new_off = _compact(out, total, starts, lens)
    return new_off, text, to_host(changed)


@kernel((OFF, U8, i64, U8, B1, U8, I64, I32, I32, U64, I64, i64, b1, U64, I64, i64, U8, I64,
         I32, i64, i64, I64, I32, I64, I64, I64, I32, i64, i64, I64))
def _bpe_kernel(offsets, data, mode, classes, sp_first, sp_bytes, sp_off, sp_ids, byte_id, mkeys,
                mvals, mmask, ignore_merges, vkeys, vrows, vmask, vbytes, voff, vids, bos, eod,
                reg, ids, heap, nxt, prv, out, base, first, lens):
    d = cuda.grid(1)
    if d < lens.shape[0]:
        r0 = reg[d]
        r1 = reg[d + 1]
        lens[d] = bpe.encode_doc(data, offsets[d], offsets[d + 1], mode, classes, sp_first,
                                 sp_bytes, sp_off, sp_ids, byte_id, mkeys, mvals, mmask,
                                 ignore_merges, vkeys, vrows, vmask, vbytes, voff, vids, bos, eod,
                                 ids[r0:r1], heap[3 * r0:3 * r1], nxt[r0:r1], prv[r0:r1], out,
                                 offsets[d] - base + 2 * (first + d))


@functools.lru_cache(maxsize=4)
def _bpe_tables_on_device(tables):
    return tuple(to_device(x) if isinstance(x, np.ndarray) else x for x in tables.kernel_args())


def bpe_encode(offsets, data, tables, bos: int = -1, eod: int = -1, *,
               chunk_bytes: int = CHUNK_BYTES) -> tuple[np.ndarray, np.ndarray]:
    """`gpupipe.kernels.bpe.encode` on the GPU: (int32 ids flat, count per document), on the
    host. A document writes its ids into its own range of the output (its bytes plus two), and
    the ranges are packed at the end."""
    off, host, chunks = _per_chunk(offsets, chunk_bytes)
    n = len(host) - 1
    if n == 0:
        return np.zeros(0, np.int32), np.zeros(0, np.int64)
    dat = to_device(data)
    args = _bpe_tables_on_device(tables)
    total = int(host[-1] - host[0]) + 2 * n
    out = _empty(total, np.int32)
    lens = _zeros(n, np.int64)
    for a, b in chunks:
        reg = _regions(host, a, b)
        m = int(reg[-1])
        _launch(_bpe_kernel, b - a, off[a: b + 1], dat, *args, np.int64(bos), np.int64(eod),
                to_device(reg), _empty(m, np.int32), _empty(3 * m, np.int64),
                _empty(m, np.int64), _empty(m, np.int64), out, int(host[0]), a, lens[a:b])
    lens = to_host(lens)
    starts = host[:-1] - host[0] + 2 * np.arange(n)
    ids, _ = _compact(out, total, starts, lens)
    return ids, lens
