"""``python -m llm_ocr.engines.cpu``: run the CPU OCR engine server."""

from llm_ocr.engines.cpu.cli import main

raise SystemExit(main())
