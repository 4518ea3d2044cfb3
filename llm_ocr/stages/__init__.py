"""The stages as transforms over records: per page (Extract, Describe) and per document (Assemble).

- :mod:`.extract`  a page image -> DeepSeek-OCR grounding output -> Markdown, blocks, figure crops
- :mod:`.describe` a page's figure crops -> captions from a VLM
- :mod:`.assemble` a document's pages, in order -> one Markdown document with figures in place
- :mod:`.export`   Markdown files with their figures beside them, for people
- :mod:`.fallback` a failed PDF page's text layer as marked fallback text
- :mod:`.fields`   a document's Markdown or page images -> fields validated against a schema

A stage takes records and a context (the client, the options) and returns records; it knows
nothing of shards, resume or signals. May import vlm, sources (types), records and storage (to
write exports); never runners, commands, the pipeline, servers or launchers.
"""
