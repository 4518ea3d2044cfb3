"""One module per ``llm-ocr`` sub-command; each exposes ``register(subparsers)``."""
