"""normalize_text: Unicode normalisation and whitespace / control-character clean-up."""

from __future__ import annotations

from typing import Annotated, Literal

import pyarrow.compute as pc
from pydantic import Field

from gpupipe.frame import TEXT, string_series, text_array
from gpupipe.kernels.normalize import normalize
from gpupipe.stages.base import StageResult, Transform, stage

# Line separators other than "\n" (CR LF, CR, VT, FF, NEL, LINE/PARAGRAPH SEPARATOR).
_NEWLINES = r"\r\n|[\r\x0b\x0c\x{85}\x{2028}\x{2029}]"
# C0/C1 controls except tab and newline, plus BOM and zero-width space.
_CONTROL = r"[\x00-\x08\x0e-\x1f\x7f-\x{9f}\x{feff}\x{200b}]"
# Unicode space characters other than the ASCII space (no-break, en/em, ideographic ...).
_UNICODE_SPACES = r"[\x{a0}\x{1680}\x{2000}-\x{200a}\x{202f}\x{205f}\x{3000}]"


@stage("normalize_text")
class NormalizeText(Transform):
    """Normalise Unicode (NFC/NFKC), line endings, spaces, control characters and blank lines.

    Steps, in order (each can be switched off): line endings -> ``\\n``; remove control characters
    (C0/C1 except tab and newline, BOM, zero-width space); Unicode normal form; Unicode spaces ->
    ASCII space; optionally collapse runs of spaces/tabs; strip trailing whitespace of each line;
    limit consecutive blank lines; strip the document. Counts ``changed`` documents.
    Indentation is kept unless ``collapse_spaces`` is on (code blocks stay readable).
    """

    form: Literal["NFC", "NFKC", "NFD", "NFKD"] | None = "NFC"
    newlines: bool = True
    remove_control: bool = True
    unicode_spaces: bool = True
    collapse_spaces: bool = False
    strip_lines: bool = True
    max_blank_lines: Annotated[int | None, Field(ge=0)] = 2
    strip: bool = True

    def transform(self, df):
        before = text_array(df[TEXT])
        arr = before
        if self.newlines:
            arr = pc.replace_substring_regex(arr, pattern=_NEWLINES, replacement="\n")
        if self.remove_control:
            arr = pc.replace_substring_regex(arr, pattern=_CONTROL, replacement="")
        if self.form is not None:
            arr = normalize(arr, self.form)
        if self.unicode_spaces:
            arr = pc.replace_substring_regex(arr, pattern=_UNICODE_SPACES, replacement=" ")
        if self.collapse_spaces:
            arr = pc.replace_substring_regex(arr, pattern=r"[ \t]{2,}", replacement=" ")
        if self.strip_lines:
            arr = pc.replace_substring_regex(arr, pattern=r"[ \t]+\n", replacement="\n")
            arr = pc.replace_substring_regex(arr, pattern=r"[ \t]+$", replacement="")
        if self.max_blank_lines is not None:
            k = self.max_blank_lines
            arr = pc.replace_substring_regex(
                arr, pattern=rf"\n(?:[ \t]*\n){{{k + 1},}}", replacement="\n" * (k + 1)
            )
        if self.strip:
            arr = pc.utf8_trim_whitespace(arr)
        if arr is before:
            return df
        changed = int(pc.sum(pc.not_equal(before, arr)).as_py() or 0) if len(df) else 0
        out = df.assign(**{TEXT: string_series(arr, df.index)})
        return StageResult(out, counters={"changed": changed})
