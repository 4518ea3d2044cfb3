"""``python -m llm_ocr.servers.sim``: run the simulated DeepSeek-OCR server."""

from llm_ocr.servers.sim.cli import main

raise SystemExit(main())
