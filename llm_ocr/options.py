"""Every option of llm-ocr, declared once: the typed models the CLI, the Python API and the
launchers share.

Each group is a pydantic model whose fields carry a type, a default, bounds and a description.
:mod:`llm_ocr.config` binds them to ``--kebab-case`` flags, ``LLM_OCR_*`` environment variables
and keyword arguments (``llm_ocr.run(..., max_in_flight=128)``); the stage table
(:mod:`llm_ocr.stage_table`) says which groups each stage takes, and :class:`StageSpec` holds one
validated instance of each.
The launchers check a launched stage's options against the same models.

This module imports nothing heavy: pydantic, the default model and figure prompt
(:mod:`llm_ocr.vlm.defaults`) and the GPU presets' table (their names, in ``--gpu-preset``'s
help); the model families (pyarrow, numpy) only when a ``--recipe`` is checked, so a command that
names none (`llm-ocr jobs status`) starts without them. Every layer above ``vlm`` may use it;
``vlm`` itself does not (the model client is passed its :class:`ClientOptions` as a policy it
reads, ``llm_ocr.vlm.client.RequestPolicy``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, Field, SecretStr, field_validator, model_validator

# The knobs of a page read in pieces live below vlm/ (a cut stream's tokens read one of them);
# re-exported here beside the run's other options.
from llm_ocr.dense_knobs import DENSE_ENV_PREFIX as DENSE_ENV_PREFIX
from llm_ocr.dense_knobs import DenseOptions as DenseOptions
from llm_ocr.dense_knobs import Provenance as Provenance
from llm_ocr.dense_knobs import dense as dense
from llm_ocr.dense_knobs import dense_options
from llm_ocr.dense_knobs import using_dense as using_dense
from llm_ocr.gpu_presets import PRESETS
from llm_ocr.vlm.defaults import DEFAULT_MODEL, DESCRIBE_PROMPT

Engine = Literal["auto", "vllm", "cpu", "sim"]

#: DeepSeek-OCR's own page marker (docs/facts.md: pages joined with "\n<--- Page Split --->\n"),
#: given blank lines around it: with single newlines Markdown glues it, and the text around it,
#: into one paragraph.
DEFAULT_PAGE_SEPARATOR = "\n\n<--- Page Split --->\n\n"

#: Marks an option whose default is the model family's when it is not given (a render option the
#: family's recipe sets: ``stages/extract.py`` ``family_render``): its help names no one value.
FAMILY_DEFAULT: dict[str, Any] = {"family_default": True}

#: The value of these options is a piece of a command line, which may start with "-"
#: (``--server-args "--enforce-eager"``): ``config.join_fragments`` joins it to its flag.
ARGS: dict[str, Any] = {"metavar": "ARGS"}
COMMAND: dict[str, Any] = {"metavar": "COMMAND"}


# -- where a stage reads and writes, and how it runs ------------------------------------------


class JobOptions(BaseModel):
    """Where a stage reads and writes, which server it talks to, and how it runs."""

    output: str = Field(..., description="Output folder or URL (local path, s3://, gs://, hf://...).")
    endpoint: str | None = Field(
        None, description="OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1 (given: launch nothing)."
    )
    model: str = Field(DEFAULT_MODEL, description="Served model name.")
    recipe: str | None = Field(
        None,
        description="Model family whose recipe to use (request, server flags, parser), for a fine-tune served "
        "under another name: one of llm-ocr models' names (default: chosen from --model).",
    )
    api_key: SecretStr | None = Field(None, description="API key for the endpoint (prefer the LLM_OCR_API_KEY "
                                                        "variable).")
    num_shards: int | None = Field(None, ge=1, description="Number of shards (default: from the platform, else 1).")
    shard_index: int | None = Field(None, ge=0, description="This shard's index (default: from the platform, else 0).")
    max_in_flight: int | None = Field(
        None, ge=1, description="Requests in flight at once (default: the GPU preset's max-num-seqs plus a queue, else "
                                "64)."
    )
    workers: int | None = Field(
        None, ge=0, description="Render/crop worker processes at most, started as pages wait for them (default: "
                                "one per core; 0 = a thread in-process)."
    )
    storage_options: dict[str, Any] = Field(
        default_factory=dict, description="JSON object of fsspec storage options for inputs and output."
    )
    progress: Literal["auto", "live", "bar", "log", "off"] = Field(
        "auto",
        description="Progress display: live on a terminal, a progress bar in a notebook, periodic log lines otherwise.",
    )
    progress_interval: float = Field(30.0, gt=0, description="Seconds between progress log lines.")
    flush_interval: float = Field(120.0, gt=0, description="Seconds between part writes at most (bounds loss on a "
                                                           "crash).")
    grace_period: float = Field(30.0, ge=0, description="Seconds in-flight pages may finish after SIGTERM/SIGINT.")
    gpu_price_per_hour: float | None = Field(
        None, ge=0, description="US$ per GPU-hour for the cost estimate in the stats (default: the preset's list "
                                "price)."
    )
    part_rows: int = Field(1000, ge=1, description="Rows per Parquet part at most.")

    @field_validator("recipe")
    @classmethod
    def _known_recipe(cls, value: str | None) -> str | None:
        if value is not None:
            # Imported here: the families load pyarrow and numpy (their records), which a command
            # that never names a recipe (`llm-ocr jobs status`) has no use for.
            from llm_ocr.vlm import families

            families.family_named(value)  # raises with the choices
        return value


# -- the model server, and requests to it ------------------------------------------------------


class ServerOptions(BaseModel):
    """The model server this process launches when no ``--endpoint`` is given."""

    engine: Engine = Field(
        "auto", description="Server to launch without --endpoint: vllm, cpu, sim, or auto (vllm with a CUDA GPU, else "
                            "cpu)."
    )
    gpu_preset: str | None = Field(
        None, description=f"vLLM sizing preset: {', '.join(PRESETS)} (default: detected with nvidia-smi)."
    )
    server_command: str = Field("vllm serve", description="Command that starts vLLM (e.g. 'python -m "
                                                          "vllm.entrypoints.openai.api_server').",
                                json_schema_extra=COMMAND)
    server_args: str = Field("", description="Extra arguments appended to the server command line (they override "
                             "ours), e.g. --server-args \"--enforce-eager --max-num-seqs 64\".", json_schema_extra=ARGS)
    server_startup_timeout: float = Field(1800.0, gt=0, description="Seconds the server may take to become ready.")
    server_max_restarts: int = Field(2, ge=0, description="Restarts of a server that crashed mid-run (per server).")
    gpus: int | None = Field(
        None,
        ge=1,
        description="GPUs to use, one vLLM server on each behind one dispatcher (default: every GPU nvidia-smi "
        "lists, or as many as --gpu-preset names; 1: one server).",
    )


class ClientOptions(BaseModel):
    """Retry and timeout policy of model requests."""

    request_timeout: float = Field(
        600.0, gt=0, description="Seconds one request may take once sent (a page can decode thousands of tokens)."
    )
    max_attempts: int = Field(4, ge=1, description="Attempts per request before the page is marked failed.")
    backoff_base: float = Field(1.0, ge=0,
                                description="First retry delay in seconds; doubles per attempt, with jitter.")
    backoff_max: float = Field(30.0, ge=0, description="Longest delay between two attempts, in seconds.")
    dead_after: float = Field(
        120.0,
        gt=0,
        description="Stop the run when the endpoint has been unreachable for this many seconds with no success.",
    )


# -- inputs -------------------------------------------------------------------------------------


class RenderOptions(BaseModel):
    """How pages become the images sent to the model."""

    dpi: float = Field(
        144.0, gt=0, description="PDF render resolution (default: the model family's, 144 for DeepSeek-OCR).",
        json_schema_extra=FAMILY_DEFAULT,
    )
    max_page_pixels: int = Field(
        12_000_000,
        gt=0,
        description="Pages larger than this are rendered or resized down to fit (default: the model family's "
        "limit, e.g. 6291456 for Chandra; 12000000 for most, against huge posters and 600 DPI scans).",
        json_schema_extra=FAMILY_DEFAULT,
    )
    long_side: int | None = Field(
        None,
        gt=0,
        description="Scale every page (PDF or image) so its longer side has exactly this many pixels, "
        "instead of --dpi (default: the model family's, e.g. 1288 for olmOCR-2; none for most).",
        json_schema_extra=FAMILY_DEFAULT,
    )
    max_long_side: int | None = Field(
        None, gt=0, description="Scale pages down so their longer side has at most this many pixels (default: the "
        "model family's, e.g. 3500 for GLM-OCR; none for most).", json_schema_extra=FAMILY_DEFAULT,
    )
    size_multiple: int | None = Field(
        None, gt=0, description="Resize every page image so both its sides are multiples of this many pixels, each "
        "rounded to the nearest (within --max-page-pixels), as the model family's own client resizes what it sends "
        "(default: the model family's, 32 for Infinity-Parser2, 28 for GLM-OCR and Surya; none for most).",
        json_schema_extra=FAMILY_DEFAULT,
    )
    min_page_side: int = Field(
        640,
        ge=0,
        description="PDF pages whose longer side would render smaller than this many pixels (labels, "
        "cards, pages sized in odd units) are rendered at this size instead; 0 = never.",
    )
    max_image_pixels: int = Field(
        120_000_000,
        gt=0,
        description="Images with more pixels than this are refused as likely decompression bombs.",
    )
    max_pages: int = Field(
        100_000, gt=0, description="Documents with more pages than this are refused (error row)."
    )
    image_format: Literal["jpeg", "png"] = Field(
        "jpeg", description="Encoding of page images sent to the model: jpeg (fast) or png (lossless); default: the "
        "model family's (jpeg for DeepSeek-OCR, png for the families whose own code sends PNG).",
        json_schema_extra=FAMILY_DEFAULT,
    )
    jpeg_quality: int = Field(95, ge=50, le=100, description="JPEG quality when image_format is jpeg.")


class DatasetOptions(BaseModel):
    """Which part of a dataset INPUT to read (Hub or Parquet)."""

    config: str | None = Field(
        None,
        description="Dataset configuration (subset) name, e.g. olmOCR-mix-0225-documents. When set, an "
        "INPUT that is not an existing path is loaded as a Hub dataset OWNER/NAME.",
    )
    split: str = Field("train", description="Dataset split to read.")
    image_column: str | None = Field(
        None,
        description='Column holding the page image(s). Default: "images", then "image", then the '
        "first column of type Image or list of Image.",
    )


# -- the stages ---------------------------------------------------------------------------------


class ExtractOptions(BaseModel):
    """What Extract asks the model and how it treats degenerate answers."""

    prompt: str | None = Field(None, description="OCR prompt (default: the model family's own; see llm-ocr models).")
    max_tokens: int | None = Field(
        None, gt=0, description="Most tokens a page may generate (default and ceiling: the server's context minus the "
                                "prompt)."
    )
    truncation_retries: int | None = Field(
        None,
        ge=0,
        description="Extra attempts for a page that looped or hit max_tokens, each at the family's next retry "
        "temperature (default: the family's own count, 1 for DeepSeek-OCR).",
    )
    retry_temperature_step: float | None = Field(
        None, ge=0, le=1, description="Temperature added per truncation retry (default: the family's retry "
                                      "temperatures)."
    )
    retry_quarantined: bool = Field(
        False, description="Retry pages an earlier run quarantined because the model server crashed on them."
    )
    dedup: bool = Field(
        True,
        description="Read each distinct document (by the sha256 of its bytes: the manifest's, else computed as it is "
        "read) and each distinct page (by its pixels) once: a duplicate's rows are copies of the first reading, "
        "duplicate_of naming it, with no model request (docs/dedup.md). Off: every document and page is read.",
    )
    dedup_index: str | None = Field(
        None,
        description="A Parquet file or folder of documents read before (columns sha256, doc_id, rows: the folder "
        "holding their page rows), such as another output's _state/hashes/: a document whose sha256 is there gets "
        "copies of those rows instead of being read.",
    )
    text_layer_fallback: bool = Field(
        True, description="Give PDF pages that fail or are truncated their PDF text layer as fallback_text, if it "
                          "reads as English."
    )
    max_page_aspect: float = Field(
        3.0,
        ge=0,
        description="Pages whose long side exceeds this many times their short side are read in overlapping "
        "segments of a readable shape, one request each, and joined (0: always read whole).",
    )
    cut_loops: bool = Field(
        True,
        description="Stream each answer and close the stream as soon as it repeats itself (a repetition loop), "
        "then retry at the next temperature step; off: wait for whole answers (loops run to max_tokens).",
    )
    pieces: Literal["auto", "off", "always"] = Field(
        "auto",
        description="Reading a page in pieces: auto (a long page in segments, a dense page in tiles or bands, as "
        "--max-page-aspect and --tile-dense-pages say), off (every page whole, in one request and its retries), "
        "always (a dense page's tiles or bands for every page that can be cut, a long page's segments as auto). "
        "A page in pieces costs at most the cost_bound dense option times reading it whole (docs/gpu-time.md).",
    )
    tile_dense_pages: bool = Field(
        True,
        description="Read a page whose text is too long for one answer (a newspaper page) in overlapping pieces, "
        "all at once (tiles joined by boxes, or bands column by column for families without boxes: `llm-ocr models`): "
        "straight away when its text layer or ink says so, else when its answer runs to max_tokens without "
        "repeating itself; a piece whose answer still runs out is cut in two and read again. Off: such a page "
        "is retried whole.",
    )
    dense_option: list[str] = Field(
        default_factory=list,
        description="Set a knob of reading a page in pieces, NAME=VALUE (repeatable; also LLM_OCR_DENSE_<NAME>): "
        "every knob, its unit and where its value comes from are listed by llm-ocr models --json (dense_options) "
        "and docs/gpu-time.md; the values in force are written in the run's completion marker.",
    )
    look_ahead: int = Field(
        1024,
        ge=0,
        description="Rendered pages that may wait for a free slot, so that those expected to hold the most text "
        "(their text layer or ink, estimated as they are rendered) are sent first and the run does not end on a "
        "long page sent last; each waiting page holds its image in memory (0: send pages in input order).",
    )
    look_ahead_mb: float = Field(
        256.0,
        gt=0,
        description="Most MiB of page images waiting for a slot (--look-ahead): fewer pages wait when they are large.",
    )
    estimate_ahead: int = Field(
        4096,
        ge=0,
        description="PDF pages whose answer length is estimated from the file before they are rendered (the text "
        "layer's length, a scan's image size; about 1 ms a page), so that those expected to be longest are rendered "
        "and sent first, from the start of the run; each holds a few bytes (0: render in input order, and rank only "
        "the rendered pages waiting in --look-ahead).",
    )


    @field_validator("dense_option")
    @classmethod
    def _known_knobs(cls, value: list[str]) -> list[str]:
        dense_options(value)  # a name no knob has, or a value out of bounds, is refused here
        return value


#: The signals a first reading is escalated on (``--escalate-on``), in the order they are checked.
ESCALATION_SIGNALS = (
    "error", "empty", "truncated", "looped", "repetition", "missing-text", "stray", "garbled", "short", "verifier",
)
#: The default: every signal that needs no verifier (docs/routes.md says why each one is there).
DEFAULT_ESCALATE_ON = "error,empty,truncated,looped,repetition,missing-text,stray,garbled,short"


class RouteOptions(BaseModel):
    """Which pages the model reads at all: a PDF page with a sound text layer may skip it."""

    route: Literal["model", "text-layer"] = Field(
        "model",
        description="model: every page goes to the model; text-layer: a PDF page whose text layer is sound gets its "
        "Markdown from that layer, laid out (reading order, tables, figures) by the CPU engine, and sends no model "
        "request (docs/routes.md).",
    )
    route_endpoint: str | None = Field(
        None,
        description="Base URL of a running CPU engine (llm-ocr serve --engine cpu) that lays out text-layer pages "
        "(default: launch one; it needs pip install 'llm-ocr[cpu]').",
    )


class StealOptions(BaseModel):
    """Work claims: a shard that finished its own share reads the unfinished page groups of slow or
    dead shards (docs/stragglers.md)."""

    steal: bool | None = Field(
        None,
        description="Read page groups of slow or dead shards once this shard's own are done, claiming each with an "
        "atomic create-if-absent and a lease, so every page is still written once (default: on with more than one "
        "shard where the output allows it, local disk, S3 or GCS; off on the Hub, where every claim is a commit). "
        "An output begun with work groups keeps them.",
    )
    lease: float = Field(
        120.0, ge=2.0,
        description="Seconds a claim on a page group lasts unless its holder renews it (it does every lease/4): how "
        "long a dead shard's groups in progress wait before others take them.",
    )
    group_docs: int | None = Field(
        None, ge=1,
        description="Documents per page group (default: the largest shard's documents / 128; fixed when the output "
        "is begun).",
    )
    second_readers: bool = Field(
        True,
        description="With nothing left to take anywhere, read the pages not yet stored of the page group another "
        "process started longest ago, beside it (one second reader a group); each stops the requests of pages the "
        "other stored first. Spends at most one more reading of the pages in flight at the run's end, on slots "
        "that would otherwise idle; the completion marker counts it (docs/stragglers.md).",
    )


class EscalateOptions(BaseModel):
    """Which first readings are read again by a stronger model, and which model that is."""

    escalate_to: str | None = Field(
        None,
        description="A stronger model that reads again every page whose first reading trips --escalate-on "
        "(llm-ocr run: Extract, then Escalate into OUT/escalate, then Describe and Assemble use it).",
    )
    escalate_endpoint: str | None = Field(
        None, description="Base URL serving --escalate-to (default: launch a second server with the server options)."
    )
    escalate_api_key: SecretStr | None = Field(
        None, description="API key of --escalate-endpoint (default: --api-key; prefer LLM_OCR_ESCALATE_API_KEY)."
    )
    escalate_server_args: str | None = Field(
        None, description="Extra arguments of the server launched for --escalate-to (default: --server-args).",
        json_schema_extra=ARGS,
    )
    escalate_on: str = Field(
        DEFAULT_ESCALATE_ON,
        description=f"Signals of a first reading that send its page to the stronger model, comma-separated, of: "
        f"{', '.join(ESCALATION_SIGNALS)}.",
    )
    escalate_min_recall: float = Field(
        0.8, ge=0, le=1, description="missing-text: share of sampled text-layer lines a reading must contain."
    )
    escalate_min_dictionary: float = Field(
        0.5, ge=0, le=1,
        description="garbled: share of a reading's words of 3+ ASCII letters that must be English dictionary words.",
    )
    escalate_min_length: float = Field(
        0.5, ge=0, le=1,
        description="short: share of the characters the page's ink (or text layer) suggests that a reading must hold.",
    )
    escalate_verifier: str | None = Field(
        None,
        description="URL of a verifier (POST JSON {image, text} -> {probability}) whose score is the verifier signal "
        "(docs/routes.md#a-verifier).",
    )
    escalate_verifier_threshold: float = Field(
        0.5, ge=0, le=1, description="verifier: a reading scored below this probability is escalated."
    )

    @field_validator("escalate_on")
    @classmethod
    def _known_signals(cls, value: str) -> str:
        names = [name.strip() for name in value.split(",") if name.strip()]
        unknown = [name for name in names if name not in ESCALATION_SIGNALS]
        if unknown:
            raise ValueError(f"unknown signal(s) {', '.join(unknown)}; choose from {', '.join(ESCALATION_SIGNALS)}")
        return ",".join(names)

    @property
    def signals(self) -> tuple[str, ...]:
        """The signals of :attr:`escalate_on`, in the order they are checked."""
        chosen = set(self.escalate_on.split(","))
        return tuple(name for name in ESCALATION_SIGNALS if name in chosen)


class DescribeOptions(BaseModel):
    """How Describe captions figure crops: prompt, model, endpoint and optional JSON schema."""

    describe_prompt: str | None = Field(
        None, description=f"Prompt sent with each figure crop (default: {DESCRIBE_PROMPT!r}, DeepSeek-OCR's own)."
    )
    describe_max_tokens: int = Field(
        1024, gt=0, description="Most tokens one description may generate (capped by the server's context)."
    )
    describe_temperature: float = Field(0.0, ge=0, le=2, description="Sampling temperature of descriptions.")
    describe_model: str | None = Field(None, description="Served model that writes descriptions (default: --model).")
    describe_endpoint: str | None = Field(
        None, description="OpenAI-compatible base URL of a separate captioning server (default: the job's endpoint)."
    )
    describe_api_key: SecretStr | None = Field(
        None, description="API key of --describe-endpoint (default: --api-key; prefer LLM_OCR_DESCRIBE_API_KEY)."
    )
    redescribe: bool = Field(
        False,
        description="Also describe figures the OCR model already described in its page answer (olmOCR-2's alt "
        "text, Chandra's image alt); default: keep the model's own description.",
    )
    describe_schema: str | None = Field(
        None,
        description="JSON schema the answer must follow, as a file path/URL or inline JSON: enables structured "
        "output; the validated JSON goes to description_json and a readable form to description.",
    )


class AssembleOptions(BaseModel):
    """How Assemble lays out a document, and whether it exports Markdown files and DoclingDocuments."""

    page_separator: str = Field(
        DEFAULT_PAGE_SEPARATOR,
        description="Text between pages; \\n means a newline and {page} the number of the page that follows.",
    )
    export_markdown: bool = Field(
        False,
        description="Also write OUT/markdown/NAME.md with figures in OUT/markdown/figures/NAME/ (relative links).",
    )
    assemble_batch_pages: int = Field(
        2000, ge=1, description="Pages held in memory at once (documents are read from storage in batches)."
    )
    chunks: bool = Field(
        False,
        description="Also write each document as a DoclingDocument (OUT/docling/NAME.json) and its chunks "
        "(OUT/chunks/chunks-SSSSS-of-NNNNN.parquet), as llm-ocr export --chunks does, for this shard's documents "
        "once they are assembled. Needs pip install 'llm-ocr[docling]'.",
    )
    chunker: Literal["hierarchical", "hybrid"] = Field(
        "hierarchical",
        description="docling-core's chunker of --chunks: hierarchical (one chunk per paragraph, table, list or "
        "picture, with its headings) or hybrid (those split and merged to at most --chunk-max-tokens tokens of "
        "--chunk-tokenizer).",
    )
    chunk_tokenizer: str | None = Field(
        None,
        description="With --chunker hybrid: the Hugging Face tokenizer that counts tokens, a local folder or a Hub "
        "model name (the embedding model's).",
    )
    chunk_max_tokens: int | None = Field(
        None, ge=1,
        description="With --chunker hybrid: most tokens of a chunk, its headings included (default: the length "
        "--chunk-tokenizer states).",
    )
    page_furniture: Literal["keep", "drop", "tag"] = Field(
        "keep",
        description="Running headers, footers and page numbers in the assembled Markdown: keep, drop, or tag (an "
        "HTML comment <!-- furniture: KIND --> before each). Always listed in the row's furniture column.",
    )

    @field_validator("page_separator")
    @classmethod
    def _unescape(cls, value: str) -> str:
        # Flags and environment variables cannot easily carry a newline; "\n" in them can.
        return value.replace("\\n", "\n")

    @model_validator(mode="after")
    def _chunker_options(self) -> AssembleOptions:
        # Said when the options are read, not after the pages are assembled.
        if self.chunker != "hierarchical" and not self.chunks:
            raise ValueError(f"--chunker {self.chunker} is the chunker of --chunks: add --chunks")
        if self.chunker == "hybrid" and not self.chunk_tokenizer:
            raise ValueError("--chunker hybrid needs --chunk-tokenizer: a Hugging Face tokenizer's folder or Hub name "
                             "(the embedding model's, so that chunks fit it)")
        if self.chunker == "hierarchical" and (self.chunk_tokenizer or self.chunk_max_tokens is not None):
            raise ValueError("--chunk-tokenizer and --chunk-max-tokens are for --chunker hybrid (the hierarchical "
                             "chunker counts no tokens)")
        return self


class FieldsOptions(BaseModel):
    """What Fields extracts (schema or classes), from what, with which model and how."""

    fields_schema: str | None = Field(
        None, description="The fields to extract: a JSON Schema file (path or URL), inline JSON, or a pydantic "
        "model as package.module:Model. Also --schema."
    )
    classes: str | None = Field(
        None, description="A classes file (YAML or JSON; or inline JSON): class name -> schema, file-name patterns "
        "and keywords; documents "
        "are classified first (rules, then the model), documents of no known class get class 'other'."
    )
    fields_from: Literal["markdown", "images", "both"] = Field(
        "markdown", description="What the model reads: the assembled Markdown, the page images (a VLM), or both. "
        "Also --from."
    )
    fields_model: str | None = Field(None, description="Served model that extracts fields (default: --model).")
    fields_endpoint: str | None = Field(
        None, description="OpenAI-compatible base URL of a separate server for fields (default: the job's endpoint)."
    )
    fields_api_key: SecretStr | None = Field(
        None, description="API key of --fields-endpoint (default: --api-key; prefer LLM_OCR_FIELDS_API_KEY)."
    )
    fields_structured: Literal["auto", "json_schema", "json_object", "instruction"] = Field(
        "auto", description="How the answer's shape is requested: json_schema (structured outputs), json_object "
        "(JSON mode), instruction (the prompt only); auto starts with json_schema and falls back when the "
        "endpoint refuses it. The answer is validated whatever the mode."
    )
    fields_max_tokens: int = Field(4096, gt=0, description="Most tokens one answer may generate.")
    fields_max_input_tokens: int | None = Field(
        None, gt=0, description="Most tokens of document text one request carries; longer documents are split by "
        "page and the answers merged (default: what the server's context leaves after the answer)."
    )
    fields_pages_per_request: int = Field(
        1, gt=0, description="Page images one request carries with --from images/both (many servers take 1)."
    )
    fields_classify: Literal["auto", "rules", "model"] = Field(
        "auto", description="With --classes: rules then the model (auto), rules only (undecided: other), or the model "
                            "only."
    )
    fields_prompt: str | None = Field(None, description="Instruction sent before the schema (default: a generic one).")
    fields_temperature: float = Field(0.0, ge=0, le=2, description="Sampling temperature of field requests.")
    fields_repair: bool = Field(
        True, description="Send one repair request, showing the model its errors, when an answer is not valid."
    )
    export_jsonl: bool = Field(False, description="Also write OUT/fields.jsonl: one JSON object per row.")
    export_csv: bool = Field(False, description="Also write OUT/fields.csv: one line per row, lists as JSON.")


# -- looking at results -------------------------------------------------------------------------


class ReportOptions(BaseModel):
    """What the HTML report shows and where it is written."""

    html: str | None = Field(None, description="Where to write the report (default: OUT/report.html).")
    max_documents: int = Field(20, ge=1, description="Documents shown at most (the first ones, in input order).")
    max_pages_per_document: int = Field(20, ge=1, description="Pages shown per document at most (the first ones).")
    storage_options: dict[str, Any] = Field(
        default_factory=dict, description="JSON object of fsspec storage options for OUT, the sources and the report."
    )


#: The options ``llm-ocr STAGE --help`` shows in full, of those the stage takes: what most runs set.
#: The others are named under their group (``llm_ocr.commands.option_help``).
COMMON_OPTIONS = frozenset({
    "output", "endpoint", "model", "api_key", "engine", "server_args", "num_shards", "shard_index", "max_in_flight",
    "workers", "escalate_to", "export_markdown",
})

#: :class:`StageSpec` attribute -> its option model.
GROUPS: dict[str, type[BaseModel]] = {
    "job": JobOptions,
    "server": ServerOptions,
    "render": RenderOptions,
    "dataset": DatasetOptions,
    "extract": ExtractOptions,
    "route": RouteOptions,
    "steal": StealOptions,
    "escalate": EscalateOptions,
    "describe": DescribeOptions,
    "assemble": AssembleOptions,
    "fields": FieldsOptions,
    "client": ClientOptions,
}

#: Short keywords of the Fields options (as ``--schema`` is ``--fields-schema`` on the command line).
FIELDS_ALIASES = {"schema": "fields_schema"}



@dataclass
class StageSpec:
    """Everything a stage runner needs: the INPUTs (Extract and ``run``) and one validated
    instance of every option group (defaults for the groups the stage does not take)."""

    job: JobOptions
    inputs: list[str] = field(default_factory=list)
    server: ServerOptions = field(default_factory=ServerOptions)
    render: RenderOptions = field(default_factory=RenderOptions)
    dataset: DatasetOptions = field(default_factory=DatasetOptions)
    extract: ExtractOptions = field(default_factory=ExtractOptions)
    route: RouteOptions = field(default_factory=RouteOptions)
    steal: StealOptions = field(default_factory=StealOptions)
    escalate: EscalateOptions = field(default_factory=EscalateOptions)
    describe: DescribeOptions = field(default_factory=DescribeOptions)
    assemble: AssembleOptions = field(default_factory=AssembleOptions)
    fields: FieldsOptions = field(default_factory=FieldsOptions)
    client: ClientOptions = field(default_factory=ClientOptions)
