"""Benchmarks: ``llm-ocr bench`` (throughput) and ``llm-ocr bench-accuracy`` (:mod:`.accuracy`).

``llm-ocr bench``: how close the client gets to what the model server allows.

Runs the real Extract pipeline (in-process, real worker processes) over a generated corpus of
Letter pages against the simulated vLLM server, and reports pages/s, tokens/s, the server's
slot utilisation, client CPU per page, peak memory, and the *lower bound*: the time a perfect
client would need on that server for the same requests (the server's own timing model replayed
with every request queued at t=0). ``instant`` mode measures the client's own ceiling.

- :mod:`.corpus`       the workload (vector and scanned PDFs, no reportlab)
- :mod:`.measure`      /metrics and memory sampler, CPU clocks
- :mod:`.lower_bound`  the perfect-client makespan from the request log
- :mod:`.fidelity`     JPEG vs PNG: cost, size and PSNR in the model's views
- :mod:`.config`       one run's settings (light: the CLI reads its defaults)
- :mod:`.run`          one run, and the report
- :mod:`.accuracy`     CER and word recall of an endpoint on born-digital PDFs against their text layer
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llm_ocr.bench.config import BenchConfig

if TYPE_CHECKING:
    from llm_ocr.bench.run import RunResult, dump_json, format_table

__all__ = ["BenchConfig", "RunResult", "dump_json", "format_table", "run_bench"]

#: Imported on first use: the benchmark run imports the OpenAI client, the runners and the
#: servers (about a second), which the CLI must not pay to list its options.
_FROM_RUN = {"RunResult", "dump_json", "format_table"}


def __getattr__(name: str) -> Any:
    if name in _FROM_RUN:
        from llm_ocr.bench import run

        return getattr(run, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def run_bench(
    base: BenchConfig,
    *,
    pages: Sequence[int] | None = None,
    image_formats: Sequence[str] | None = None,
    repeat: int = 1,
    corpus_dir: str | Path | None = None,
    work_dir: str | Path | None = None,
    keep: bool = False,
    fidelity: bool = False,
    on_result: Callable[[RunResult], None] | None = None,
) -> tuple[list[RunResult], dict[str, Any] | None]:
    """Run every combination of ``pages`` x ``image_formats`` ``repeat`` times.

    The corpus of each size is generated once per call (in a temporary folder, or in
    ``corpus_dir``, where it is kept and reused by later calls) and shared by the runs.
    Returns the results and, with ``fidelity``, the JPEG-vs-PNG encoding report.
    """
    from llm_ocr.bench.corpus import make_corpus
    from llm_ocr.bench.run import run_once

    sizes = list(pages or [base.pages])
    formats = list(image_formats or [base.image_format])
    with tempfile.TemporaryDirectory(prefix="llm-ocr-bench-") as tmp:
        corpus_root = Path(corpus_dir) if corpus_dir else Path(tmp) / "corpus"
        work_root = Path(work_dir) if work_dir else Path(tmp) / "work"
        if keep and not work_dir:
            # The output must outlive the temporary folder.
            work_root = Path(tempfile.mkdtemp(prefix="llm-ocr-bench-out-"))
        corpora = {n: make_corpus(corpus_root / f"pages-{n}-seed-{base.seed}", n, base.seed) for n in sizes}
        results: list[RunResult] = []
        number = 0
        for n in sizes:
            for fmt in formats:
                for _ in range(repeat):
                    number += 1
                    config = replace(base, pages=n, image_format=fmt)
                    folder = corpora[n][0].parent
                    result = asyncio.run(run_once(config, folder, work_root / f"run-{number:02d}", keep=keep))
                    results.append(result)
                    if on_result is not None:
                        on_result(result)
        encoding = None
        if fidelity:
            from llm_ocr.bench.fidelity import encoding_report

            encoding = encoding_report(corpora[sizes[0]], dpi=base.dpi)
    return results, encoding
