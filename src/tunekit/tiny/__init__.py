"""Tiny random-weight models of real families, for tests, examples, benchmarks and ``tunekit tiny-model``.

``text.build_tiny_model`` builds a text family, ``vlm.build_tiny_vlm`` a vision-language or audio-language one (each
family in its own module); ``tokenizer`` trains their byte-level BPE tokenizers on the shipped corpus.
"""
