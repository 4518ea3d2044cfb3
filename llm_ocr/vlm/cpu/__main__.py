"""``python -m llm_ocr.vlm.cpu``: run the CPU OCR engine server."""

from llm_ocr.vlm.cpu.cli import main

raise SystemExit(main())
