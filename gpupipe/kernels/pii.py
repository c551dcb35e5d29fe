"""`pii_redact`'s prefilter: one scan per document that clears every document in which no
entity could be redacted, so the regular expressions and validators (on the host) see only the
rest. It must never clear a document with a redactable match; the conditions are the literal
parts every such match has (`gpupipe.stages.transforms.pii.ENTITIES`):

* ``@`` (e-mail); ``-----BEGIN `` (private key); a secret-key prefix (``AKIA``, ``ghp_``,
  ``xoxb-``, ...); two upper-case ASCII letters then two digits (IBAN);
* a run of at least 9 ASCII digits in which digit groups are separated by at most two of
  `` .-()+`` (card numbers: 13-19 digits, US SSN: 9, phone numbers: 10-15);
* a run whose digit groups are separated by single dots at least 3 times (IPv4);
* a hex digit, ``:``, up to four hex digits, ``:``, then a hex digit or ``:`` (the IPv6
  candidate scan, `gpupipe.stages.transforms.pii.CANDIDATES`).
"""

from __future__ import annotations

import numpy as np

from gpupipe.kernels.target import device, entry
from gpupipe.kernels.utf8 import pattern_bytes

#: literal starts of the secret-key patterns, plus the private-key header
LITERALS = ("-----BEGIN ", "AKIA", "ASIA", "ABIA", "ACCA", "ghp_", "gho_", "ghu_", "ghs_", "ghr_",
            "xoxa-", "xoxb-", "xoxp-", "xoxo-", "xoxs-", "xoxr-")


@device(inline=True)
def _digit(b):
    return 48 <= b <= 57


@device(inline=True)
def _hex(b):
    return (48 <= b <= 57) or (65 <= b <= 70) or (97 <= b <= 102)


@device
def _literal_at(data, i, end, lit, lit_off):
    """Whether one of the literals starts at ``data[i]``."""
    for p in range(lit_off.shape[0] - 1):
        a = lit_off[p]
        m = lit_off[p + 1] - a
        if i + m <= end:
            j = 0
            while j < m and data[i + j] == lit[a + j]:
                j += 1
            if j == m:
                return True
    return False


@device
def pii_candidate_doc(data, start, end, lit, lit_off):
    """Whether ``data[start:end]`` might hold a redactable entity (never a false "no")."""
    digits = 0      # digits in the current run
    gap = 0         # separator bytes since the last digit of the run (-1: no run)
    gap_dot = False
    dots = 0        # single-dot gaps in the current run
    run = False
    for i in range(start, end):
        b = data[i]
        if _digit(b):
            if not run:
                run = True
                digits = 0
                dots = 0
            elif gap == 1 and gap_dot:
                dots += 1
            digits += 1
            gap = 0
            gap_dot = False
            if digits >= 9 or dots >= 3:
                return True
            continue
        if b == 64:  # @
            return True
        if run and (b == 32 or b == 46 or b == 45 or b == 40 or b == 41 or b == 43):
            gap += 1
            gap_dot = b == 46 and gap == 1
            if gap > 2:
                run = False
        else:
            run = False
        if b == 58 and i > start and _hex(data[i - 1]):
            # the IPv6 candidate scan: hex ':' hex{0,4} ':' then a hex digit or another ':'
            j = i + 1
            while j < end and j < i + 5 and _hex(data[j]):
                j += 1
            if j + 1 < end and data[j] == 58 and (_hex(data[j + 1]) or data[j + 1] == 58):
                return True
        if 65 <= b <= 90 and i + 3 < end and 65 <= data[i + 1] <= 90 and _digit(data[i + 2]) \
                and _digit(data[i + 3]):
            return True
        # the literals start with '-', 'A', 'g' or 'x'
        if (b == 45 or b == 65 or b == 103 or b == 120) and _literal_at(data, i, end, lit,
                                                                        lit_off):
            return True
    return False


@entry
def _pii_cpu(offsets, data, lit, lit_off, out):
    for d in range(out.shape[0]):
        out[d] = pii_candidate_doc(data, offsets[d], offsets[d + 1], lit, lit_off)
    return out


def pii_candidates(offsets, data) -> np.ndarray:
    """Per string: whether `pii_redact` could change it (a superset; never a false "no")."""
    lit, lit_off = pattern_bytes(LITERALS)
    return _pii_cpu(offsets, data, lit, lit_off, np.empty(len(offsets) - 1, dtype=np.bool_))
