"""Alias package: ``python -m llm_ocr.vlm.cpu`` runs :mod:`llm_ocr.servers.cpu`, where the CPU
engine moved."""
