"""Notebook helpers, kept importable here: ``from llm_ocr.display import show_page, show_document,
summary``. They live in :mod:`llm_ocr.report.display`."""

from llm_ocr.report.display import HTML, show_document, show_page, summary

__all__ = ["HTML", "show_document", "show_page", "summary"]
