"""``python -m llm_ocr.engines.sim``: run the simulated DeepSeek-OCR server."""

from llm_ocr.engines.sim.cli import main

raise SystemExit(main())
