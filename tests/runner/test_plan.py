from __future__ import annotations

from gpupipe.runner.plan import fingerprints, plan
from gpupipe.stages import LengthFilter, NormalizeText, Repartition

N, L, R = NormalizeText(), LengthFilter(min_words=5), Repartition(npartitions=2)


def shape(stages):
    return [(s.kind, [st.stage_name for st in s.stages], s.final) for s in plan(stages)]


def test_row_local_stages_fuse_into_one_segment():
    assert shape([N, L]) == [("row", ["normalize_text", "length_filter"], True)]


def test_global_stage_is_a_boundary():
    assert shape([N, R, L]) == [
        ("row", ["normalize_text"], False),
        ("global", ["repartition"], False),
        ("row", ["length_filter"], True),
    ]


def test_leading_and_trailing_global():
    assert shape([R]) == [("row", [], False), ("global", ["repartition"], True)]
    assert shape([]) == [("row", [], True)]


def test_checkpoint_names_and_positions():
    segs = plan([N, R, L, L])
    assert [s.name for s in segs] == ["00-normalize_text", "01-repartition", "02-length_filter"]
    assert segs[2].positions == (2, 3)
    assert segs[0].directory("o") == "o/checkpoints/00-normalize_text"
    assert segs[2].directory("o") == "o/data"


def test_fingerprint_changes_from_edited_stage_on():
    a = fingerprints(plan([N, R, L]), {"f": 1}, "0")
    b = fingerprints(plan([N, R, LengthFilter(min_words=6)]), {"f": 1}, "0")
    c = fingerprints(plan([N, R, L]), {"f": 2}, "0")
    assert a[:2] == b[:2] and a[2] != b[2]
    assert all(x != y for x, y in zip(a, c))
