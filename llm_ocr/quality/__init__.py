"""Know the quality of a run: olmOCR-bench's unit tests, checks that need no ground truth, and
runs compared side by side.

- :mod:`.text`     olmOCR-bench's text normalisation and repetition detector
- :mod:`.tables`   Markdown and HTML tables as cell graphs (the table tests' view)
- :mod:`.katex`    formulas rendered with KaTeX (0.16.21 and its fonts, shipped in ``katex_dist/``) in
                   headless Chromium, and compared
- :mod:`.checks`   the test types (present, absent, order, table, math, baseline, format,
                   footnote): fields, validation, verdicts
- :mod:`.stats`    category means and their bootstrap confidence interval
- :mod:`.bench`    a bench folder in olmOCR-bench's layout, matched to a run and scored
- :mod:`.markdown_dir` Markdown files another tool wrote (olmOCR's ``{pdf}_pg{N}_repeat{M}.md``,
                   one per page or document), read as readings of a bench's pages
- :mod:`.signals`  no-ground-truth signals on every page (empty, loops, stray characters,
                   truncation, text-layer lines missing)
- :mod:`.pages`    a run's page rows and completion-marker stats, as the checks read them
- :mod:`.results`  ``OUT/quality/*.json``
- :mod:`.findings` the results as HTML for the report
- :mod:`.diff`, :mod:`.compare`  the side-by-side page of several runs
- :mod:`.download` olmOCR-bench from the Hugging Face Hub
- :mod:`.score`    the entry points: :func:`score`, :func:`score_output`, :func:`check_output`

May import storage, sources (text layers, page renders), records and report helpers; never
runners, servers, endpoint, stages, launchers, bench or commands (``tests/test_layers.py``).
Commands and report's callers use it; of the runtime, only the Escalate stage's rules
(``llm_ocr/runners/escalation.py``) ask :mod:`.signals`.
"""

from llm_ocr.quality.compare import CompareError, CompareResult, compare_runs
from llm_ocr.quality.score import check_output, score, score_output

__all__ = ["CompareError", "CompareResult", "check_output", "compare_runs", "score", "score_output"]
