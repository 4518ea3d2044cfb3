"""Fetching olmOCR-bench from the Hugging Face Hub (``bench-quality --download``).

The dataset ``allenai/olmOCR-bench`` keeps its tests and PDFs under ``bench_data/``: one JSONL
file per category (``arxiv_math``, ``headers_footers``, ``long_tiny_text``, ``multi_column``,
``old_scans``, ``old_scans_math``, ``table_tests``) and ``pdfs/<category>/*.pdf`` (1,403 PDFs,
7,010 tests, about 360 MB; dataset card on the Hub). ``huggingface_hub.snapshot_download``
fetches only that folder, resumes an interrupted download and skips files already there;
``HF_ENDPOINT`` and ``HF_TOKEN`` apply as everywhere in huggingface_hub.
"""

from __future__ import annotations

from pathlib import Path

REPO_ID = "allenai/olmOCR-bench"
PATTERNS = ["bench_data/*.jsonl", "bench_data/pdfs/**"]


class DownloadError(Exception):
    """The bench could not be fetched (the message says why)."""


def download_bench(target: str | Path, repo_id: str = REPO_ID, revision: str | None = None) -> Path:
    """Fetch the bench's ``bench_data/`` into ``target``; returns the ``bench_data`` folder."""
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError
    except ImportError as exc:
        raise DownloadError("--download needs huggingface_hub: pip install 'llm-ocr[hub]'") from exc
    try:
        folder = snapshot_download(
            repo_id=repo_id, repo_type="dataset", revision=revision, local_dir=str(target), allow_patterns=PATTERNS
        )
    except (HfHubHTTPError, LocalEntryNotFoundError, OSError) as exc:
        raise DownloadError(f"could not download {repo_id}: {exc}") from exc
    data = Path(folder) / "bench_data"
    if not any(data.glob("*.jsonl")):
        raise DownloadError(f"{repo_id} has no bench_data/*.jsonl at this revision")
    return data
