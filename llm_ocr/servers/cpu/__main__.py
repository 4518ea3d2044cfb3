"""``python -m llm_ocr.servers.cpu``: run the CPU OCR engine server."""

from llm_ocr.servers.cpu.cli import main

raise SystemExit(main())
