"""What the kernels offer, importable without numba (validating a pipeline file or choosing a
tokenizer engine compiles and loads nothing): the launcher names a stage may declare, those with
a CUDA launcher, the limits stage parameters are checked against, and the BPE kernel's modes
and character classes. `gpupipe.kernels.cpu` defines the launchers."""

#: every launcher of `gpupipe.kernels.cpu` (and `gpupipe.kernels.gpu`)
LAUNCHERS = ("bpe_encode", "c4_rewrite", "clean_text", "contamination_scan", "count_chars",
             "count_substrings", "count_tokens", "count_words", "cut_units", "fineweb_features",
             "gopher_quality_features", "gopher_repetition_features", "langid_identify",
             "langid_needs_prepare", "langid_scores", "minhash", "minhash_ngrams",
             "needs_normalization", "pii_candidates", "span_units", "xxh64_strings")

#: the launchers `gpupipe.kernels.gpu` has too, with the same parameters (tested against it):
#: a stage computing only with these runs on cuDF (`gpupipe.stages.base.stage`)
ON_GPU = frozenset(LAUNCHERS)

#: the longest word n-gram `gpupipe.kernels.contamination` hashes (its window buffer)
MAX_NGRAM = 64

#: `gpupipe.kernels.bpe`'s character classes (bits of `gpupipe.kernels.bpe_tables.class_table`)
LETTER, NUMBER, SPACE, NEWLINE = 1, 2, 4, 8
#: `gpupipe.kernels.bpe`'s pre-tokenizers
GPT2, LLAMA3, QWEN2 = 0, 1, 2
#: the Split regexes of the Llama 3 and Qwen 2.5 pre-tokenizers, as tokenizer.json spells them
#: (GPT-2's is ``ByteLevel``'s own)
PATTERNS = {
    LLAMA3: r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
            r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    QWEN2: r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
           r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
}
