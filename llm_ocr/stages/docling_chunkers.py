"""Which of docling-core's chunkers cuts a DoclingDocument into the chunk rows, and its tokenizer.

* ``hierarchical`` (the default): docling-core's ``HierarchicalChunker``, one chunk per item (a
  paragraph, a table, a list, a picture with its caption) with the headings above it. It needs no
  tokenizer, and a chunk's boxes are exactly its item's.
* ``hybrid``: docling-core's ``HybridChunker`` over the same chunks, split (a long item, by
  ``semchunk``; a long table, by rows with its header repeated) and merged (neighbours under the
  same headings) so that each chunk is at most ``max_tokens`` tokens of a tokenizer the user
  names. The budget holds for what docling's ``contextualize`` makes of a chunk (its headings,
  then its text: what docling says to embed), so a chunk's text alone is within it too.

The tokenizer is a Hugging Face one, a local folder (as ``save_pretrained`` writes it) or a Hub
name, loaded by transformers' ``AutoTokenizer`` through docling-core's own wrapper
(``HuggingFaceTokenizer``, docling-core's ``transforms/chunker/tokenizer/huggingface.py``). llm-ocr
names no default: docling-core's (``sentence-transformers/all-MiniLM-L6-v2``) is downloaded from
the Hub on first use, and chunks should be counted by the tokenizer of the model that embeds them.

Everything here is imported by the functions that need it: docling-core and transformers are the
optional ``docling`` extra.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from docling_core.transforms.chunker.base import BaseChunker

CHUNKERS = ("hierarchical", "hybrid")

#: transformers' ``model_max_length`` when a tokenizer states none (its ``VERY_LARGE_INTEGER``, 1e30).
_UNSTATED = 1_000_000


class ChunkerError(ValueError):
    """The chunker asked for cannot be made (a tokenizer that is not there or does not load)."""


def chunker_name(chunker: str, tokenizer: str | None, max_tokens: int | None) -> str:
    """A chunker as the completion marker records it (a rerun with another one chunks again)."""
    if chunker == "hierarchical":
        return chunker
    return f"{chunker}:{tokenizer}:{max_tokens if max_tokens is not None else 'stated'}"


def make_chunker(chunker: str = "hierarchical", tokenizer: str | None = None,
                 max_tokens: int | None = None) -> BaseChunker:
    """The docling-core chunker asked for, its tokenizer loaded (raises :class:`ChunkerError`).
    Which options go together is :class:`~llm_ocr.options.AssembleOptions`' to check."""
    if chunker not in CHUNKERS:
        raise ChunkerError(f"unknown chunker {chunker!r}: one of {', '.join(CHUNKERS)}")
    if chunker == "hierarchical":
        from docling_core.transforms.chunker.hierarchical_chunker import HierarchicalChunker

        return HierarchicalChunker()
    from docling_core.transforms.chunker.hybrid_chunker import HybridChunker

    if not tokenizer:
        raise ChunkerError("--chunker hybrid needs --chunk-tokenizer")
    return HybridChunker(tokenizer=load_tokenizer(tokenizer, max_tokens))


def load_tokenizer(name: str, max_tokens: int | None = None) -> Any:
    """docling-core's ``HuggingFaceTokenizer`` of the tokenizer at ``name`` (a folder or a Hub
    name), counting at most ``max_tokens`` a chunk; left out, the length the tokenizer states
    (a sentence-transformers model's ``max_seq_length``, else its ``model_max_length``)."""
    try:
        from docling_core.transforms.chunker.tokenizer.huggingface import HuggingFaceTokenizer
        from transformers import AutoTokenizer
    except ImportError as exc:
        raise ChunkerError(f"--chunker hybrid needs transformers: pip install 'llm-ocr[docling]' ({exc})") from exc
    path = Path(name).expanduser()
    if not path.exists() and _is_path(name):
        raise ChunkerError(f"--chunk-tokenizer {name}: no such folder (give a folder holding a Hugging Face "
                           "tokenizer, as save_pretrained writes it, or a Hub model name)")
    try:
        loaded = AutoTokenizer.from_pretrained(str(path) if path.exists() else name)
    except Exception as exc:  # transformers raises OSError, ValueError, HFValidationError...
        raise ChunkerError(f"--chunk-tokenizer {name}: could not load a Hugging Face tokenizer: "
                           f"{type(exc).__name__}: {exc}") from exc
    if max_tokens is None:
        max_tokens = _stated_length(name, path, loaded)
    return HuggingFaceTokenizer(tokenizer=loaded, max_tokens=max_tokens)


def _is_path(name: str) -> bool:
    # A Hub name is "model" or "owner/model"; anything else can only be a path.
    return Path(name).is_absolute() or name.startswith((".", "~")) or name.count("/") > 1 or "\\" in name


def _stated_length(name: str, path: Path, loaded: Any) -> int:
    """The most tokens the tokenizer's model takes, as its files say (raises if they do not)."""
    config = path / "sentence_bert_config.json"
    if config.is_file():  # what docling-core's wrapper reads from the Hub, read here from the folder
        return int(json.loads(config.read_text(encoding="utf-8"))["max_seq_length"])
    if not path.exists():
        from docling_core.transforms.chunker.tokenizer.huggingface import HuggingFaceTokenizer

        try:  # docling-core's own lookup of a Hub model's sentence_bert_config.json
            return int(HuggingFaceTokenizer(tokenizer=loaded).max_tokens)
        except RuntimeError:
            pass
    length = getattr(loaded, "model_max_length", None)
    if isinstance(length, int) and 0 < length < _UNSTATED:
        return length
    raise ChunkerError(f"--chunk-tokenizer {name} states no maximum length: give --chunk-max-tokens")
