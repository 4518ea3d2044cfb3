"""One module per ``llm-ocr`` sub-command (``stage.py``: one per stage of the stage table); each
exposes ``register(subparsers)``.

Entry points only: parse the options, call the layer that does the work, map the outcome to an
exit code. May import everything below; nothing imports commands but :mod:`llm_ocr.cli`.
"""
