"""The one storage door, and everything behind it.

Every read and write of the package goes through fsspec URLs here; nothing else branches on a
URL's scheme. :class:`Storage` (a folder addressed by URL) is the door; behind it:

- :mod:`.url`      :class:`Storage`: paths, listing, atomic writes through a sink
- :mod:`.retry`    :func:`retry_io`: transient failures retried with backoff, the rest explained
- :mod:`.stores`   what differs per store: options, environment, error classes, secret scrubbing
- :mod:`.sinks`    where writes go: at once, or batched into commits
- :mod:`.hub`      the Hugging Face Hub committer, its write check and the dataset card
- :mod:`.access`   the start-up check that the output can be written
- :mod:`.parts`    the shard-named Parquet parts every stage writes and re-reads
- :mod:`.writer`   the serial background writer every row writer stands on
- :mod:`.claims`   work claims on page groups (docs/stragglers.md); :mod:`.group_parts` their parts
- :mod:`.state`    run state beside the data: completion markers with per-shard stats
- :mod:`.upstream` reading another stage's rows for one shard

May import: the standard library, fsspec/pyarrow (store clients only inside functions), and
:mod:`llm_ocr.backoff`. Never runners, stages, servers, commands or launchers: everything above
uses storage, storage uses nothing above it (``tests/test_layers.py`` checks this).
"""

from llm_ocr.storage.retry import retry_io
from llm_ocr.storage.stores import StorageError
from llm_ocr.storage.url import Storage

__all__ = ["Storage", "StorageError", "retry_io"]
