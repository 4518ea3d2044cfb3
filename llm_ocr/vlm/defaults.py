"""The default served model and figure prompt: constants the options quote, in a module that
imports nothing, so reading the options (every ``llm-ocr`` command) does not load the model
families and their Parquet records (pyarrow, numpy). :mod:`llm_ocr.vlm.recipes` re-exports them."""

from __future__ import annotations

DEFAULT_MODEL = "deepseek-ai/DeepSeek-OCR"

# DeepSeek-OCR's figure prompt (deepseek-ai/DeepSeek-OCR DeepSeek-OCR-vllm/config.py).
DESCRIBE_PROMPT = "Describe this image in detail."
