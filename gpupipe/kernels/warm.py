"""Compiling the CPU kernels before the data arrives: once per machine, spread over its workers.

numba compiles a kernel the first time a process calls it and caches the machine code on disk
(``cache=True``: in the package's ``__pycache__``, or ``NUMBA_CACHE_DIR``, or a per-user cache
directory when the package cannot be written). A process that finds the cache loads the code in
milliseconds; one that does not compiles for seconds. Left alone, every worker of a cold machine
compiles every kernel it meets, all at the same time: the same minute of CPU once per worker.

`warm` compiles (or loads) kernels by name, each through its `gpupipe.kernels.checks` routine on a
few synthetic texts, which gives the argument types the stages use. `plan` spreads the kernels a
pipeline needs over the workers of each host, the longest first, so a host compiles each kernel
once and its workers compile different ones at the same time; the data tasks then load them.
"""

from __future__ import annotations

import time

#: the kernels (`gpupipe.kernels.checks.CHECKS` names) each stage calls on the CPU
STAGE_KERNELS: dict[str, tuple[str, ...]] = {
    "normalize_text": ("normalize_quick_check", "text_cleanup"),
    "language_id": ("language_id", "langid_prepare_check"),
    "length_filter": ("count_chars_words",),
    "word_count_filter": ("count_chars_words", "word_tokens"),
    "symbol_ratio_filter": ("substrings",),
    "pii_redact": ("pii_prefilter",),
    "gopher_quality": ("gopher_quality",),
    "gopher_repetition": ("gopher_repetition",),
    "fineweb_quality": ("fineweb_quality",),
    "c4_quality": ("c4_quality",),
    "exact_dedup": ("xxh64",),
    "fuzzy_dedup": ("minhash_chars", "minhash_words"),
    "decontaminate": ("decontamination",),
    "span_dedup": ("span_units", "span_cut", "count_chars_words"),
    "tokenize": ("bpe",),
}

#: seconds each takes to compile on one core (measured, `gpupipe warmup` prints them): only the
#: order of the plan depends on them
COST: dict[str, float] = {
    "bpe": 10.5, "word_tokens": 4.8, "text_cleanup": 4.6, "c4_quality": 4.5, "span_units": 4.5,
    "gopher_repetition": 3.3, "minhash_chars": 3.2, "language_id": 2.3, "decontamination": 2.2,
    "gopher_quality": 2.2, "minhash_words": 1.6, "fineweb_quality": 1.4, "xxh64": 1.1,
    "span_cut": 1.1, "pii_prefilter": 0.8, "count_chars_words": 0.5, "substrings": 0.4,
    "langid_prepare_check": 0.2, "normalize_quick_check": 0.1,
}


def all_kernels() -> list[str]:
    from gpupipe.kernels.checks import CHECKS

    return [c.name for c in CHECKS]


def kernels_for(stage_names) -> list[str]:
    """The kernels the stages named use, each once, in a fixed order."""
    wanted = {k for s in stage_names for k in STAGE_KERNELS.get(s, ())}
    return [k for k in all_kernels() if k in wanted]


def warm(names) -> dict[str, float]:
    """Compile (or load from the cache) the kernels named; seconds each took, in this
    process."""
    from gpupipe.kernels.checks import CHECKS, synthetic_sample

    by_name = {c.name: c for c in CHECKS}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise ValueError(f"unknown kernel(s) {unknown}; known: {sorted(by_name)}")
    sample = synthetic_sample()
    out = {}
    for name in names:
        t0 = time.perf_counter()
        by_name[name].cpu(sample)
        out[name] = round(time.perf_counter() - t0, 3)
    return out


def warm_here(names) -> dict:
    """`warm` in a worker: ``{"seconds": ..., "code": ...}``, the second saying whether this
    process runs the ahead-of-time module (`gpupipe.kernels.aot`) or numba's compiled code,
    and why."""
    from gpupipe.kernels import aot

    seconds = warm(names)
    state = aot.state()
    code = state["kernels"] if state["kernels"] != "jit" else f"jit ({state['why']})"
    return {"seconds": seconds, "code": code}


def plan(names, workers: dict[str, str]) -> dict[str, list[str]]:
    """``worker address -> kernels`` to warm there: on each host (``workers``: address -> host)
    every kernel once, longest first onto the worker with the least work so far."""
    hosts: dict[str, list[str]] = {}
    for addr, host in sorted(workers.items()):
        hosts.setdefault(host, []).append(addr)
    out: dict[str, list[str]] = {a: [] for a in workers}
    order = sorted(names, key=lambda n: (-COST.get(n, 1.0), n))
    for addrs in hosts.values():
        load = {a: 0.0 for a in addrs}
        for name in order:
            a = min(addrs, key=lambda x: (load[x], x))
            out[a].append(name)
            load[a] += COST.get(name, 1.0)
    return {a: ks for a, ks in out.items() if ks}
