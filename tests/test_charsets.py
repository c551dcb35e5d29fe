"""The character class table agrees with Python's own predicates on every code point."""

from __future__ import annotations

import numpy as np

from gpupipe.charsets import (
    ALPHA,
    DATATROVE_TERMINAL,
    DIGIT,
    LINEBREAK,
    LOWER,
    SPACE,
    UPPER,
    char_table,
    chars_table,
)


def test_table_matches_python_str_predicates_everywhere():
    table = char_table()
    cps = [cp for cp in range(0x110000) if not 0xD800 <= cp < 0xE000]
    chars = [chr(cp) for cp in cps]
    bits = table[np.array(cps)]
    for flag, pred in ((ALPHA, str.isalpha), (SPACE, str.isspace), (DIGIT, str.isdigit),
                       (UPPER, str.isupper), (LOWER, str.islower)):
        expected = np.fromiter(map(pred, chars), dtype=bool, count=len(chars))
        got = (bits & flag) != 0
        assert (got == expected).all(), [hex(cps[i]) for i in np.flatnonzero(got != expected)[:5]]


def test_linebreaks_are_those_of_splitlines():
    table = char_table()
    breaks = {cp for cp in range(0x110000) if not 0xD800 <= cp < 0xE000
              and len(("a" + chr(cp) + "b").splitlines()) == 2}
    assert breaks == set(np.flatnonzero(table & LINEBREAK).tolist())


def test_terminal_punctuation_and_user_sets():
    terminal = {c for lo, hi in DATATROVE_TERMINAL for c in range(lo, hi + 1)}
    assert {ord(c) for c in ".!?。"} <= terminal and ord(",") not in terminal
    t = chars_table("ab")
    assert t[ord("a")] == t[ord("b")] == 1 and t[ord("c")] == 0
