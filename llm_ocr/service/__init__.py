"""llm-ocr as a service: documents that keep arriving (docs/service.md).

- :mod:`.queue`    the state and the queue: documents, their status, leases, idempotency keys
                   (the interface, :class:`~.queue.DocumentQueue`); on one SQLite file in WAL
                   mode (:mod:`.sqlite`, the default) or PostgreSQL (:mod:`.postgres`, shared by
                   any number of machines)
- :mod:`.spool`    where submitted documents and their results live (a local folder or any store
                   URL, through :mod:`llm_ocr.storage`), and what the gateway checks of an upload
- :mod:`.worker`   pulls documents under a lease it renews and runs the ``run`` stage on each, one
                   output folder per document (its parts are the per-page checkpoints)
- :mod:`.gateway`  the HTTP API (FastAPI), :mod:`.metrics` its Prometheus text
- :mod:`.review`   the review pages' HTML (the report's fragments; flagged pages first);
                   :mod:`.reviews` a reviewer's corrections and approvals, and their shared SQL
- :mod:`.server`   gateway and worker in one process under uvicorn; the token rules
- :mod:`.client`   ``llm_ocr.Service(url).submit(path).wait()``

It stands on the Python API (:mod:`llm_ocr.api`, which runs a stage) and below the commands; of
the report it uses only the fragments that draw a document, of quality only the page signals.
FastAPI and uvicorn (extra ``service``) are imported only by :mod:`.gateway` and :mod:`.server`,
so the client needs neither.
"""
