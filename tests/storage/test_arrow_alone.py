"""pyarrow without pandas in the command line's process (llm_ocr.storage.arrow_alone).

In a fresh interpreter (pytest's own has pandas already): after ``skip_pandas_check`` a part
written from lists does not import pandas, and pandas still works with pyarrow once it is asked
for outright, a categorical included (the shim takes pandas up again).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from tests.conftest import REPO

SCRIPT = textwrap.dedent("""
    import sys
    import pyarrow as pa, pyarrow.parquet as pq
    from llm_ocr.storage.arrow_alone import skip_pandas_check
    assert skip_pandas_check()
    table = pa.Table.from_pylist([{"doc_id": "a.pdf", "page": 1, "markdown": "# A"}])
    pq.write_table(table, sys.argv[1])
    assert "pandas" not in sys.modules, "pandas imported by a part's write"
    frame = pq.read_table(sys.argv[1]).to_pandas()
    import pandas as pd
    assert isinstance(frame, pd.DataFrame) and frame["page"].tolist() == [1]
    assert pa.array(pd.Categorical(["x", "y"])).type.index_type == pa.int8()
    assert pa.table(frame).to_pylist() == table.to_pylist()
    print("ok")
""")


def test_a_part_written_from_lists_leaves_pandas_unimported_and_pandas_still_works(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "part.parquet")], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_a_process_with_pandas_already_is_left_alone() -> None:
    import pandas  # noqa: F401 - imported as a user's process would have it

    from llm_ocr.storage.arrow_alone import skip_pandas_check

    assert not skip_pandas_check()
    assert not any(type(finder).__name__ == "_NotPandas" for finder in sys.meta_path)
