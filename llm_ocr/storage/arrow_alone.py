"""pyarrow in a process of llm-ocr's own, without pandas.

pyarrow converts Python lists (``pa.array``, ``Table.from_pylist``: every part llm-ocr writes) by
first asking whether the list is a pandas object, and to ask it imports pandas
(``_is_array_like`` in pyarrow's ``array.pxi``, through the ``_PandasAPIShim`` of
``pandas-shim.pxi``): 1.0-1.3 CPU-seconds measured on a 2-core machine (pyarrow 26, pandas 3.1),
once in every process that writes a part, for an answer llm-ocr never needs. pyarrow has no
option for it; what it does have is a shim that tries the import once, and when that raises
``ImportError`` it treats the process as one without pandas (its ``is_*`` checks answer no) until
something asks it for pandas outright (``Table.to_pandas``, ``pa.Table.from_pandas``), which
imports it then.

:func:`skip_pandas_check` makes that one try fail. Only the command line's own process does it
(:func:`llm_ocr.cli.run`), where no caller's code hands pyarrow a pandas object; the Python API
leaves a user's process as it found it.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec
from types import ModuleType


class _NotPandas(MetaPathFinder):
    """Refuses to find pandas (only while pyarrow's shim tries it)."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        if fullname == "pandas":
            raise ImportError("pandas is not imported for pyarrow's list conversions in llm-ocr's command line")
        return None


def skip_pandas_check() -> bool:
    """Let pyarrow's one try at importing pandas fail, unless pandas is imported already; True
    when it did. Best effort: any surprise from pyarrow leaves the process as it was."""
    if "pandas" in sys.modules:
        return False
    finder = _NotPandas()
    sys.meta_path.insert(0, finder)
    try:
        import pyarrow as pa

        pa.array([0])  # the shim's one try happens here
    except Exception:  # noqa: BLE001 - a pyarrow that behaves otherwise: leave it be
        return False
    finally:
        sys.meta_path.remove(finder)
    return "pandas" not in sys.modules
