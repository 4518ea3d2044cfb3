"""``python -m llm_ocr.vlm.cpu``: alias of ``python -m llm_ocr.servers.cpu``."""

import runpy

runpy.run_module("llm_ocr.servers.cpu", run_name="__main__", alter_sys=True)
