"""Text kernels: each per-document hot loop written once and compiled for two targets.

One module per family; each holds the per-document routines (`target.device`: numba-compiled for
the CPU, called as they are by the CUDA kernels of `gpu`) and a CPU launcher over the
``(offsets, data)`` UTF-8 view of an Arrow string array:

* `utf8`: decoding, character classes, lines, whitespace words, dedup shingle words;
* `words`: the spaCy-like word tokenizer;
* `quality`: Gopher quality, FineWeb and C4 measures, C4's line rewriter;
* `repetition`: duplicate lines, paragraphs and n-grams (Gopher repetition);
* `hashing`: fmix64, MurmurHash3 (32 and 64 bit), MinHash over characters and word n-grams;
* `langid`: py3langid's DFA walk and naive-Bayes scores;
* `normalize`: the NFC / NFKC quick check.

`gpu` holds the CUDA kernels and launchers (imported only when used); `checks` runs each kernel
on both targets and compares them bit for bit (``gpupipe check-gpu``).

Importing this package imports no kernel and not numba (the stages a driver only validates need
neither); a family is compiled or loaded from numba's cache when first called.
"""

__all__ = ["utf8_buffers"]


def __getattr__(name: str):
    if name == "utf8_buffers":
        from gpupipe.kernels.utf8 import utf8_buffers

        return utf8_buffers
    raise AttributeError(f"module 'gpupipe.kernels' has no attribute {name!r}")
