"""Alias: ``python -m llm_ocr.vlm.simulated`` runs :mod:`llm_ocr.servers.sim`, where the
simulated server moved. Run by module name, so ``vlm`` imports nothing from ``servers``."""

import runpy

if __name__ == "__main__":
    runpy.run_module("llm_ocr.servers.sim", run_name="__main__", alter_sys=True)
