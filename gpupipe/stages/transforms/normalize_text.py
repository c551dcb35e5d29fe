"""normalize_text: Unicode normalisation and whitespace / control-character clean-up."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field

from gpupipe.backends.dispatch import kernels_for, string_column, text_buffers
from gpupipe.frame import TEXT
from gpupipe.stages.base import StageResult, Transform, stage

# What each step does, as the regular expression it is equivalent to (the steps run as one
# compiled scan, `gpupipe.kernels.clean`; tests/stages/test_normalize_text.py checks the two agree).
# Line separators other than "\n" (CR LF, CR, VT, FF, NEL, LINE/PARAGRAPH SEPARATOR).
NEWLINES = r"\r\n|[\r\x0b\x0c\x{85}\x{2028}\x{2029}]"
# C0/C1 controls except tab and newline, plus BOM and zero-width space.
CONTROL = r"[\x00-\x08\x0e-\x1f\x7f-\x{9f}\x{feff}\x{200b}]"
# Unicode space characters other than the ASCII space (no-break, en/em, ideographic ...).
UNICODE_SPACES = r"[\x{a0}\x{1680}\x{2000}-\x{200a}\x{202f}\x{205f}\x{3000}]"


@stage("normalize_text")
class NormalizeText(Transform):
    """Normalise Unicode (NFC/NFKC), line endings, spaces, control characters and blank lines.

    Steps, in order (each can be switched off): line endings -> ``\\n``; remove control characters
    (C0/C1 except tab and newline, BOM, zero-width space); Unicode normal form; Unicode spaces ->
    ASCII space; optionally collapse runs of spaces/tabs; strip trailing whitespace of each line;
    limit consecutive blank lines; strip the document. Counts ``changed`` documents.
    Indentation is kept unless ``collapse_spaces`` is on (code blocks stay readable).
    """

    kernels: ClassVar[tuple[str, ...]] = ("needs_normalization", "clean_text")

    form: Literal["NFC", "NFKC", "NFD", "NFKD"] | None = "NFC"
    newlines: bool = True
    remove_control: bool = True
    unicode_spaces: bool = True
    collapse_spaces: bool = False
    strip_lines: bool = True
    max_blank_lines: Annotated[int | None, Field(ge=0)] = 2
    strip: bool = True

    def _steps(self) -> dict:
        return {"newlines": self.newlines, "remove_control": self.remove_control,
                "unicode_spaces": self.unicode_spaces, "collapse_spaces": self.collapse_spaces,
                "strip_lines": self.strip_lines, "max_blank_lines": self.max_blank_lines,
                "strip": self.strip}

    def transform(self, df):
        steps = self._steps()
        if self.form is None and not any(v is not None and v is not False
                                         for v in steps.values()):
            return df
        kernels, (offsets, data) = kernels_for(df), text_buffers(df[TEXT])
        n = len(df)
        # documents the Unicode quick check cannot clear get the steps before normalisation
        # here, normalisation on the host, then the remaining steps
        need = (np.asarray(kernels.needs_normalization(offsets, data, self.form))
                if self.form is not None else np.zeros(n, dtype=bool))
        new_off, new_data, changed = kernels.clean_text(offsets, data, need, **steps)
        if need.any():
            new_off, new_data = self._normalize_rows(new_off, new_data, need, changed)
        if not changed.any():
            return StageResult(df, counters={"changed": 0})
        out = df.assign(**{TEXT: string_column(df[TEXT], new_off, new_data)})
        return StageResult(out, counters={"changed": int(changed.sum())})

    def _normalize_rows(self, offsets, data, need, changed):
        """Unicode normalisation of the ``need`` rows (Arrow, on the host), then the steps after
        it; ``changed`` is updated in place. Returns the new buffers."""
        from gpupipe.kernels.clean import clean_text
        from gpupipe.kernels.utf8 import utf8_buffers

        arr = pa.LargeStringArray.from_buffers(len(need), pa.py_buffer(offsets),
                                               pa.py_buffer(data))
        rows = np.flatnonzero(need)
        sub = arr.take(pa.array(rows))
        normal = pc.utf8_normalize(sub, form=self.form)
        after = {**self._steps(), "newlines": False, "remove_control": False}
        o, d, changed_after = clean_text(*utf8_buffers(normal), np.zeros(len(rows), bool),
                                         **after)
        changed[rows] |= pc.not_equal(sub, normal).to_numpy(zero_copy_only=False) | changed_after
        done = pa.LargeStringArray.from_buffers(len(rows), pa.py_buffer(o), pa.py_buffer(d))
        return utf8_buffers(pc.replace_with_mask(arr, pa.array(need), done))
