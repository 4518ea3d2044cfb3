"""One module per ``llm-ocr`` sub-command; each exposes ``register(subparsers)``.

Entry points only: parse the options, call the layer that does the work, map the outcome to an
exit code. May import everything below; nothing imports commands but :mod:`llm_ocr.cli`.
"""
