"""Shard runners of the stages after Extract (Describe, Assemble) and of ``llm-ocr run``.

Extract's runner, and the pieces every runner shares (shard resolution, exit codes, signal
handling), live in :mod:`llm_ocr.runner`.
"""
