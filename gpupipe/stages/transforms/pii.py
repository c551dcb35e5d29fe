"""pii_redact: replace personal data and secrets in the text with placeholder tokens.

Each entity kind is a pattern, and for most kinds a validator that a match must pass (Luhn for
card numbers, mod-97 for IBANs, ``ipaddress`` for IPs, the SSA's rules for SSNs, digit counts for
phone numbers). A compiled prefilter (`gpupipe.kernels.pii`, the same source on the GPU) first clears every
document with nothing a pattern could redact; the patterns then run as one vectorised RE2 scan
per kind over the remaining documents (Arrow ``match_substring_regex``), and only those with a
candidate are rewritten, match by match, with the validators. Patterns are written in the syntax RE2 and Python share.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from typing import ClassVar, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpupipe.backends.dispatch import kernels_for, string_column, take_text, text_buffers
from gpupipe.frame import TEXT
from gpupipe.stages.base import Transform, stage

Kind = Literal["private_key", "secret_key", "email", "iban", "credit_card", "us_ssn", "phone",
               "ipv6", "ipv4"]


def _luhn(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _card(m: re.Match, text: str) -> bool:
    raw = m.group(0)
    seps = {c for c in raw if not c.isdigit()}
    if len(seps) > 1:
        return False
    digits = "".join(c for c in raw if c.isdigit())
    if not 13 <= len(digits) <= 19 or not _luhn(digits):
        return False
    # issuer prefixes (Visa, Mastercard, Amex, Discover, JCB, Diners): an arbitrary long
    # number that happens to pass Luhn is not a card number
    two, four = int(digits[:2]), int(digits[:4])
    return (digits[0] == "4" or 51 <= two <= 55 or 2221 <= four <= 2720 or two in (34, 37)
            or four == 6011 or two == 65 or 3528 <= four <= 3589 or two in (36, 38)
            or 300 <= int(digits[:3]) <= 305)


def _iban(m: re.Match, text: str) -> bool:
    s = m.group(0).replace(" ", "")
    if not 15 <= len(s) <= 34:
        return False
    moved = s[4:] + s[:4]
    return int("".join(str(int(c, 36)) for c in moved)) % 97 == 1


def _ssn(m: re.Match, text: str) -> bool:
    area, group, serial = m.group(0).split("-")
    return area not in ("000", "666") and area[0] != "9" and group != "00" and serial != "0000"


def _standalone_number(m: re.Match, text: str) -> bool:
    """Not part of a longer dotted or dashed number (version 1.2.3.4.5, date-like runs)."""
    a, b = m.span()
    before = text[a - 2: a] if a >= 2 else text[:a]
    after = text[b: b + 2]
    if len(before) == 2 and before[1] in ".-" and before[0].isdigit():
        return False
    if len(after) == 2 and after[0] in ".-" and after[1].isdigit():
        return False
    return not (a and (text[a - 1].isalnum() or text[a - 1] in "_")) and not (
        b < len(text) and (text[b].isalnum() or text[b] in "_"))


def _ipv4(m: re.Match, text: str) -> bool:
    if not _standalone_number(m, text):
        return False
    head = text[max(0, m.start() - 8): m.start()].lower()
    return not re.search(r"\b(?:version|v|ver\.?)\s*$", head)


def _ipv6(m: re.Match, text: str) -> bool:
    raw = m.group(0)
    a, b = m.span()
    if (a and (text[a - 1].isalnum() or text[a - 1] == ":")) or (
            b < len(text) and (text[b].isalnum() or text[b] == ":")):
        return False
    try:
        ipaddress.IPv6Address(raw)
    except ValueError:
        return False
    # a real address has several hex digits (``a::b``, ``std::`` and times are not addresses)
    return sum(c in "0123456789abcdefABCDEF" for c in raw) >= 5 and raw.count(":") >= 2


_DIGIT_GROUPS = re.compile(r"[0-9]+")


def _phone(m: re.Match, text: str) -> bool:
    if not _standalone_number(m, text):
        return False
    a, b = m.span()
    if text[b: b + 1] == " " and text[b + 1: b + 2].isdigit() or (
            text[a - 1: a] == " " and text[a - 2: a - 1].isdigit() and a >= 2):
        return False  # one group of a longer run of numbers
    raw = m.group(0)
    digits = sum(c.isdigit() for c in raw)
    if not 10 <= digits <= 15:
        return False
    if raw.startswith(("+", "(")):
        return True
    groups = tuple(len(g) for g in _DIGIT_GROUPS.findall(raw))
    seps = {c for c in raw if c in ".- "}
    if len(seps) != 1:
        return False
    if "." in seps:  # dotted numbers are versions unless they look exactly like 555.123.4567
        return groups == (3, 3, 4)
    return groups in ((3, 3, 4), (3, 4, 4), (2, 4, 4))


def _always(m: re.Match, text: str) -> bool:
    return True


#: kind -> (pattern, validator); applied in this order (multi-line keys before e-mails, ...)
ENTITIES: dict[str, tuple[str, Callable[[re.Match, str], bool]]] = {
    "private_key": (r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----",
                    _always),
    "secret_key": (r"\b(?:(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}|gh[pousr]_[A-Za-z0-9]{36}"
                   r"|xox[abposr]-[A-Za-z0-9-]{10,})\b", _always),
    "email": (r"[A-Za-z0-9][A-Za-z0-9._%+-]*@[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
              r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*\.[A-Za-z]{2,}", _always),
    "iban": (r"\b[A-Z]{2}[0-9]{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?\b", _iban),
    "credit_card": (r"\b[0-9](?:[ -]?[0-9]){12,18}\b", _card),
    "us_ssn": (r"\b[0-9]{3}-[0-9]{2}-[0-9]{4}\b", _ssn),
    "phone": (r"(?:\+[0-9]{1,3}[ .-]?)?(?:\([0-9]{2,4}\)[ .-]?|[0-9]{2,4}[ .-])[0-9]{3,4}"
              r"[ .-][0-9]{3,4}\b", _phone),
    "ipv6": (r"[0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){2,7}", _ipv6),
    "ipv4": (r"\b(?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}"
             r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\b", _ipv4),
}

#: where a kind's pattern is loose (it must find compressed forms), a stricter scan that every
#: redacted match still satisfies picks the candidate documents
CANDIDATES = {
    # two groups with digits around a colon pair: 2001:db8:..., fe80::1, ...:ab:cd
    "ipv6": r"[0-9A-Fa-f]{1,4}:[0-9A-Fa-f]{0,4}:[0-9A-Fa-f]{1,4}"
            r"|[0-9A-Fa-f]{1,4}:[0-9A-Fa-f]{1,4}::",
}

DEFAULT_TOKENS = {
    "private_key": "<PRIVATE_KEY>", "secret_key": "<SECRET_KEY>", "email": "<EMAIL>",
    "iban": "<IBAN>", "credit_card": "<CREDIT_CARD>", "us_ssn": "<US_SSN>", "phone": "<PHONE>",
    "ipv6": "<IP_ADDRESS>", "ipv4": "<IP_ADDRESS>",
}
_COMPILED = {k: re.compile(p) for k, (p, _) in ENTITIES.items()}


def redact(text: str, kinds: list[str], tokens: dict[str, str], counts: dict[str, int]) -> str:
    """``text`` with every validated match of ``kinds`` replaced; adds to ``counts``."""
    for kind in kinds:
        validate = ENTITIES[kind][1]
        found = 0

        def sub(m: re.Match, text=text, validate=validate, kind=kind) -> str:
            nonlocal found
            if validate(m, text):
                found += 1
                return tokens[kind]
            return m.group(0)

        text = _COMPILED[kind].sub(sub, text)
        counts[kind] = counts.get(kind, 0) + found
    return text


@stage("pii_redact")
class PiiRedact(Transform):
    """Replace e-mail addresses, IPv4/IPv6 addresses, phone numbers, credit-card numbers
    (Luhn-checked), IBANs (mod-97), US SSNs and secret keys (AWS access keys, GitHub and Slack
    tokens, private-key blocks) with tokens such as ``<EMAIL>``.

    ``entities`` picks the kinds; ``tokens`` overrides replacement tokens per kind. Counters:
    redactions per kind. Version numbers, dates and ordinary numbers are left alone.
    """

    reasons: ClassVar[tuple[str, ...]] = ()
    kernels: ClassVar[tuple[str, ...]] = ("pii_candidates",)

    entities: tuple[Kind, ...] = tuple(ENTITIES)
    #: replacement token per kind (others keep their default, e.g. ``<EMAIL>``)
    tokens: dict[Kind, str] | None = None

    @property
    def replacements(self) -> dict[str, str]:
        return {**DEFAULT_TOKENS, **(self.tokens or {})}

    def transform(self, df):
        from gpupipe.kernels.utf8 import scatter_buffers
        from gpupipe.stages.base import StageResult

        # a compiled prefilter (on the GPU for cuDF) clears the documents with nothing to
        # redact; the candidate scans, validators and rewriting see only the rest, on the host
        kernels, (offsets, data) = kernels_for(df), text_buffers(df[TEXT])
        rows = np.flatnonzero(kernels.pii_candidates(offsets, data))
        if not len(rows):
            return StageResult(df)
        arr = take_text(df[TEXT], rows)
        kinds = [k for k in ENTITIES if k in self.entities]
        hits = np.zeros((len(kinds), len(arr)), dtype=bool)
        for j, kind in enumerate(kinds):
            pattern = CANDIDATES.get(kind, ENTITIES[kind][0])
            hits[j] = pc.match_substring_regex(arr, pattern).fill_null(False).to_numpy(
                zero_copy_only=False)
        counts: dict[str, int] = {}
        tokens = self.replacements
        texts = arr.to_pylist()
        new = {}
        for i in np.flatnonzero(hits.any(axis=0)):
            text = redact(texts[i], [k for j, k in enumerate(kinds) if hits[j, i]], tokens,
                          counts)
            if text != texts[i]:
                new[int(rows[i])] = text
        counters = {f"redacted:{k}": v for k, v in counts.items() if v}
        if not new:
            return StageResult(df, counters=counters)
        counters["documents_redacted"] = len(new)
        # the rewritten documents at their positions, every other row kept from the column
        where = sorted(new)
        keep = np.zeros(len(df), dtype=bool)
        keep[where] = True
        texts_new = pa.array([new[r] for r in where], type=pa.large_string())
        column = string_column(df[TEXT], *scatter_buffers(len(df), where, texts_new), keep=keep)
        return StageResult(df.assign(**{TEXT: column}), counters=counters)
