"""The CPU kernels compiled ahead of time (`gpupipe.kernels.aot`): a module built for some
kernels serves them bit for bit as numba's compiled code does, without compiling anything in
the process that loads it; one built from other sources is refused and numba compiles; and a
pipeline run with an empty numba cache compiles nothing with the package's module."""

from __future__ import annotations

import gzip
import json
import os
import pickle
import subprocess
import sys

import pytest

from gpupipe.kernels import aot
from tests.conftest import REPO

BIN = os.path.join(os.path.dirname(sys.executable), "gpupipe")

#: counts characters and words of real text in a fresh process; prints what it got and how the
#: process ran its kernels
PROBE = """
import gzip, json, sys
import numpy as np, pyarrow as pa
from gpupipe.kernels import aot, utf8
texts = [json.loads(l)["text"] for l in gzip.open(sys.argv[1], "rt")]
offsets, data = utf8.utf8_buffers(pa.array(texts, pa.large_string()))
chars, words = utf8.count_chars(offsets, data), utf8.count_words(offsets, data)
print(json.dumps({"docs": len(texts), "chars": int(chars.sum()), "words": int(words.sum()),
                  "digest": __import__("hashlib").sha256(chars.tobytes() + words.tobytes())
                  .hexdigest(), "state": aot.state()}))
"""
SAMPLE = str(REPO / "data" / "sample" / "python-docs-00.jsonl.gz")


def _probe(env) -> dict:
    r = subprocess.run([sys.executable, "-c", PROBE, SAMPLE], env=env, capture_output=True,
                       text=True, timeout=300, cwd=REPO)
    assert r.returncode == 0, r.stderr
    return {**json.loads(r.stdout), "stderr": r.stderr}


def _cached(cache) -> list[str]:
    return sorted(f for _, _, fs in os.walk(cache) for f in fs if f.endswith((".nbi", ".nbc")))


@pytest.fixture(scope="module")
def small_module(tmp_path_factory):
    """A module holding the kernels of `length_filter` only, built in a process of its own."""
    out = tmp_path_factory.mktemp("aot")
    build = ("import sys, json; from gpupipe.kernels import aot_build; "
             "print(json.dumps(aot_build.build(sys.argv[1], names=['count_chars_words'], "
             "progress=lambda m: None)))")
    r = subprocess.run([sys.executable, "-c", build, str(out)], capture_output=True, text=True,
                       timeout=600, cwd=REPO, env={**os.environ, "NUMBA_CACHE_DIR": str(
                           tmp_path_factory.mktemp("build-cache"))})
    assert r.returncode == 0, r.stderr
    built = json.loads(r.stdout)
    # count_chars and count_words, the two its sample's preparation calls, and the dedup
    # selection that no check calls
    assert built["names"] == ["gpupipe.kernels.graph.greedy",
                              "gpupipe.kernels.normalize._needs_normalization_cpu",
                              "gpupipe.kernels.utf8._count_chars_cpu",
                              "gpupipe.kernels.utf8._count_words_cpu",
                              "gpupipe.kernels.utf8._split_words"]
    assert built["exports"] == 5
    assert sorted(os.listdir(out)) == [os.path.basename(built["module"]), aot.INDEX]
    assert os.path.basename(built["module"]).startswith("_compiled-")
    return out


def test_a_module_serves_its_kernels_bit_for_bit_and_nothing_compiles(small_module, tmp_path):
    cache = tmp_path / "cache"
    env = {**os.environ, "GPUPIPE_AOT_DIR": str(small_module), "NUMBA_CACHE_DIR": str(cache)}
    got = _probe(env)
    assert got["state"]["kernels"] == "ahead-of-time"
    assert got["state"]["exports"] == 5 and got["state"]["module"].startswith(str(small_module))
    assert _cached(cache) == []                     # the process compiled nothing
    jit = _probe({**env, "GPUPIPE_AOT": "0"})
    assert jit["state"] == {"kernels": "jit", "why": "GPUPIPE_AOT=0"}
    assert _cached(cache)                           # numba compiled them this time
    assert (got["docs"], got["chars"], got["words"]) == (jit["docs"], jit["chars"], jit["words"])
    assert got["digest"] == jit["digest"]
    texts = [json.loads(line)["text"] for line in gzip.open(SAMPLE, "rt")]
    assert (got["docs"], got["chars"], got["words"]) == (400, 702_613, 93_997) == (
        len(texts), sum(map(len, texts)), sum(len(t.split()) for t in texts))


def test_a_module_built_from_other_sources_is_refused_and_numba_compiles(small_module,
                                                                          tmp_path):
    stale = tmp_path / "stale"
    stale.mkdir()
    for f in os.listdir(small_module):
        (stale / f).write_bytes((small_module / f).read_bytes())
    meta = pickle.loads((stale / aot.INDEX).read_bytes())
    meta["built_from"]["sources"] = "0" * 64     # an edited kernel
    meta["built_from"]["numba"] = "0.1.0"
    (stale / aot.INDEX).write_bytes(pickle.dumps(meta))
    env = {**os.environ, "GPUPIPE_AOT_DIR": str(stale), "NUMBA_CACHE_DIR": str(tmp_path / "c")}
    got = _probe(env)
    why = f"the ahead-of-time module in {stale} was built from other sources, numba"
    assert got["state"] == {"kernels": "jit", "why": why}
    assert why in got["stderr"] and "`gpupipe warmup --aot` or `make install`" in got["stderr"]
    assert got["words"] == 93_997
    (stale / aot.INDEX).write_bytes(b"not an index")
    got = _probe(env)
    assert got["state"]["kernels"] == "jit"
    assert got["state"]["why"].startswith(f"the ahead-of-time module in {stale} cannot be loaded "
                                          f"(UnpicklingError")
    assert got["words"] == 93_997


def test_warmup_says_the_module_leaves_nothing_to_compile(tmp_path):
    if aot.state()["kernels"] != "ahead-of-time":
        pytest.skip(f"the package's ahead-of-time module is not used: {aot.state()['why']}")
    cache = tmp_path / "cache"
    r = subprocess.run([BIN, "warmup", "--stages", "length_filter"], capture_output=True,
                       text=True, timeout=120, cwd=REPO,
                       env={**os.environ, "NUMBA_CACHE_DIR": str(cache)})
    assert r.returncode == 0, r.stderr
    assert r.stdout == (f"nothing to compile: the ahead-of-time module {aot.state()['module']} "
                        f"serves the CPU kernels in every process (GPUPIPE_AOT=0 gpupipe warmup "
                        f"fills numba's cache instead)\n")
    assert _cached(cache) == []


def test_warmup_aot_refuses_what_does_not_apply(tmp_path):
    r = subprocess.run([BIN, "warmup", "--aot", "--stages", "length_filter"],
                       capture_output=True, text=True, timeout=120, cwd=REPO)
    assert r.returncode == 2
    assert r.stderr.strip() == ("error: --aot compiles every CPU kernel; --stages does not "
                                "apply to it")
    r = subprocess.run([BIN, "warmup", "--out", str(tmp_path)], capture_output=True, text=True,
                       timeout=120, cwd=REPO)
    assert r.returncode == 2 and r.stderr.strip() == "error: --cpu and --out apply to --aot only"
    blocked = tmp_path / "file"
    blocked.write_text("")
    r = subprocess.run([BIN, "warmup", "--aot", "--out", str(blocked / "sub")],
                       capture_output=True, text=True, timeout=120, cwd=REPO)
    assert r.returncode == 2
    assert r.stderr.startswith(f"error: --aot: cannot write to {blocked / 'sub'} (Not a "
                               f"directory); give --out DIR and set GPUPIPE_AOT_DIR=DIR")


def test_a_run_with_an_empty_numba_cache_compiles_nothing(tmp_path):
    """english_web's stages (cleaning, language id, the Gopher, C4 and FineWeb filters, PII,
    exact and fuzzy dedup, tokenize) on 2 local workers, a cold machine but for the package's
    module: every kernel they call is in it, for the argument types they pass."""
    if not (aot.directory() / aot.INDEX).exists():
        pytest.skip("the package has no ahead-of-time module (make install builds it)")
    cache = tmp_path / "cache"
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache)}
    env.pop("GPUPIPE_AOT_DIR", None)
    r = subprocess.run([BIN, "run", str(REPO / "pipelines" / "english_web.yaml"), "--set",
                        f"output.path={tmp_path / 'out'}"], env=env, capture_output=True,
                       text=True, timeout=600, cwd=REPO)
    assert r.returncode == 0, r.stderr
    compiled = json.loads((tmp_path / "out" / "run.json").read_text())["compile"]
    assert compiled["code"] == ["ahead-of-time"]
    assert _cached(cache) == []


def test_the_dedup_selection_passes_the_types_the_module_holds():
    """pandas hands out read-only arrays (other argument types than writable ones): the
    selection of fuzzy and semantic dedup, which runs in the driver, copies them."""
    import numpy as np
    import pandas as pd

    from gpupipe.stages.dedup.fuzzy import keep_greedy

    if aot.state()["kernels"] != "ahead-of-time":
        pytest.skip(f"the package's ahead-of-time module is not used: {aot.state()['why']}")
    order = pd.Series([10, 11, 12], index=[2, 0, 1]).sort_values().index.to_numpy()
    fixed = pd.Series([False, False, True]).to_numpy()
    assert not order.flags.writeable and not fixed.flags.writeable
    kept, dup, best = keep_greedy(np.array([0, 1]), np.array([1, 2]), np.array([0.9, 0.8]),
                                  order, fixed)
    # 2 first, then 0 (no kept neighbour), then 1, tied to both kept: it goes for 0 (0.9)
    assert kept.tolist() == [True, False, True] and dup.tolist() == [-1, 0, -1]
    assert best.tolist() == [0.0, 0.9, 0.0]
    assert [key for key, _ in aot.misses()] == []
