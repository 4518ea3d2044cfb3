"""Keyword types of the Python API, for editors and type checkers (generated: do not edit).

Derived from the stage table and the option models (:mod:`llm_ocr.stage_table`,
:mod:`llm_ocr.options`, :mod:`llm_ocr.launchers`) by
``python scripts/keyword_types.py > llm_ocr/keywords.py``; the test suite checks that it is current.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict


class RunKeywords(TypedDict, total=False):
    """Keyword arguments of ``llm_ocr.run()``: the options of ``llm-ocr run``."""

    endpoint: str | None
    """OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1 (given: launch nothing)."""
    model: str
    """Served model name."""
    recipe: str | None
    """Model family whose recipe to use (request, server flags, parser), for a fine-tune served under another name: one
    of llm-ocr models' names (default: chosen from --model)."""
    api_key: str | None
    """API key for the endpoint (prefer the LLM_OCR_API_KEY variable)."""
    num_shards: int | None
    """Number of shards (default: from the platform, else 1)."""
    shard_index: int | None
    """This shard's index (default: from the platform, else 0)."""
    max_in_flight: int | None
    """Requests in flight at once (default: the GPU preset's max-num-seqs plus a queue, else 64)."""
    workers: int | None
    """Render/crop worker processes at most, started as pages wait for them (default: one per core; 0 = a thread
    in-process)."""
    storage_options: dict[str, Any]
    """JSON object of fsspec storage options for inputs and output."""
    progress: Literal['auto', 'live', 'bar', 'log', 'off']
    """Progress display: live on a terminal, a progress bar in a notebook, periodic log lines otherwise."""
    progress_interval: float
    """Seconds between progress log lines."""
    flush_interval: float
    """Seconds between part writes at most (bounds loss on a crash)."""
    grace_period: float
    """Seconds in-flight pages may finish after SIGTERM/SIGINT."""
    gpu_price_per_hour: float | None
    """US$ per GPU-hour for the cost estimate in the stats (default: the preset's list price)."""
    part_rows: int
    """Rows per Parquet part at most."""
    engine: Literal['auto', 'vllm', 'cpu', 'sim']
    """Server to launch without --endpoint: vllm, cpu, sim, or auto (vllm with a CUDA GPU, else cpu)."""
    gpu_preset: str | None
    """vLLM sizing preset: a100-80gb, a100-40gb, h100-80gb, h200-141gb, l40s-48gb, l4-24gb, l4-24gb-x4, l4-24gb-x8,
    l40s-48gb-x4, l40s-48gb-x8, a100-80gb-x4, a100-80gb-x8, h100-80gb-x8, h200-141gb-x2, h200-141gb-x4, h200-141gb-x8
    (default: detected with nvidia-smi)."""
    server_command: str
    """Command that starts vLLM (e.g. 'python -m vllm.entrypoints.openai.api_server')."""
    server_args: str
    """Extra arguments appended to the server command line (they override ours), e.g. --server-args "--enforce-eager
    --max-num-seqs 64"."""
    server_startup_timeout: float
    """Seconds the server may take to become ready."""
    server_max_restarts: int
    """Restarts of a server that crashed mid-run (per server)."""
    gpus: int | None
    """GPUs to use, one vLLM server on each behind one dispatcher (default: every GPU nvidia-smi lists, or as many as
    --gpu-preset names; 1: one server)."""
    dpi: float
    """PDF render resolution (default: the model family's, 144 for DeepSeek-OCR)."""
    max_page_pixels: int
    """Pages larger than this are rendered or resized down to fit (default: the model family's limit, e.g. 6291456 for
    Chandra; 12000000 for most, against huge posters and 600 DPI scans)."""
    long_side: int | None
    """Scale every page (PDF or image) so its longer side has exactly this many pixels, instead of --dpi (default: the
    model family's, e.g. 1288 for olmOCR-2; none for most)."""
    max_long_side: int | None
    """Scale pages down so their longer side has at most this many pixels (default: the model family's, e.g. 3500 for
    GLM-OCR; none for most)."""
    size_multiple: int | None
    """Resize every page image so both its sides are multiples of this many pixels, each rounded to the nearest (within
    --max-page-pixels), as the model family's own client resizes what it sends (default: the model family's, 32 for
    Infinity-Parser2, 28 for GLM-OCR and Surya; none for most)."""
    min_page_side: int
    """PDF pages whose longer side would render smaller than this many pixels (labels, cards, pages sized in odd units)
    are rendered at this size instead; 0 = never."""
    max_image_pixels: int
    """Images with more pixels than this are refused as likely decompression bombs."""
    max_pages: int
    """Documents with more pages than this are refused (error row)."""
    image_format: Literal['jpeg', 'png']
    """Encoding of page images sent to the model: jpeg (fast) or png (lossless); default: the model family's (jpeg for
    DeepSeek-OCR, png for the families whose own code sends PNG)."""
    jpeg_quality: int
    """JPEG quality when image_format is jpeg."""
    config: str | None
    """Dataset configuration (subset) name, e.g. olmOCR-mix-0225-documents. When set, an INPUT that is not an existing
    path is loaded as a Hub dataset OWNER/NAME."""
    split: str
    """Dataset split to read."""
    image_column: str | None
    """Column holding the page image(s). Default: "images", then "image", then the first column of type Image or list of
    Image."""
    prompt: str | None
    """OCR prompt (default: the model family's own; see llm-ocr models)."""
    max_tokens: int | None
    """Most tokens a page may generate (default and ceiling: the server's context minus the prompt)."""
    truncation_retries: int | None
    """Extra attempts for a page that looped or hit max_tokens, each at the family's next retry temperature (default:
    the family's own count, 1 for DeepSeek-OCR)."""
    retry_temperature_step: float | None
    """Temperature added per truncation retry (default: the family's retry temperatures)."""
    retry_quarantined: bool
    """Retry pages an earlier run quarantined because the model server crashed on them."""
    dedup: bool
    """Read each distinct document (by the sha256 of its bytes: the manifest's, else computed as it is read) and each
    distinct page (by its pixels) once: a duplicate's rows are copies of the first reading, duplicate_of naming it, with
    no model request (docs/dedup.md). Off: every document and page is read."""
    dedup_index: str | None
    """A Parquet file or folder of documents read before (columns sha256, doc_id, rows: the folder holding their page
    rows), such as another output's _state/hashes/: a document whose sha256 is there gets copies of those rows instead
    of being read."""
    text_layer_fallback: bool
    """Give PDF pages that fail or are truncated their PDF text layer as fallback_text, if it reads as English."""
    max_page_aspect: float
    """Pages whose long side exceeds this many times their short side are read in overlapping segments of a readable
    shape, one request each, and joined (0: always read whole)."""
    cut_loops: bool
    """Stream each answer and close the stream as soon as it repeats itself (a repetition loop), then retry at the next
    temperature step; off: wait for whole answers (loops run to max_tokens)."""
    pieces: Literal['auto', 'off', 'always']
    """Reading a page in pieces: auto (a long page in segments, a dense page in tiles or bands, as --max-page-aspect and
    --tile-dense-pages say), off (every page whole, in one request and its retries), always (a dense page's tiles or
    bands for every page that can be cut, a long page's segments as auto). A page in pieces costs at most the cost_bound
    dense option times reading it whole (docs/gpu-time.md)."""
    tile_dense_pages: bool
    """Read a page whose text is too long for one answer (a newspaper page) in overlapping pieces, all at once (tiles
    joined by boxes, or bands column by column for families without boxes: `llm-ocr models`): straight away when its
    text layer or ink says so, else when its answer runs to max_tokens without repeating itself; a piece whose answer
    still runs out is cut in two and read again. Off: such a page is retried whole."""
    dense_option: list[str]
    """Set a knob of reading a page in pieces, NAME=VALUE (repeatable; also LLM_OCR_DENSE_<NAME>): every knob, its unit
    and where its value comes from are listed by llm-ocr models --json (dense_options) and docs/gpu-time.md; the values
    in force are written in the run's completion marker."""
    look_ahead: int
    """Rendered pages that may wait for a free slot, so that those expected to hold the most text (their text layer or
    ink, estimated as they are rendered) are sent first and the run does not end on a long page sent last; each waiting
    page holds its image in memory (0: send pages in input order)."""
    look_ahead_mb: float
    """Most MiB of page images waiting for a slot (--look-ahead): fewer pages wait when they are large."""
    estimate_ahead: int
    """PDF pages whose answer length is estimated from the file before they are rendered (the text layer's length, a
    scan's image size; about 1 ms a page), so that those expected to be longest are rendered and sent first, from the
    start of the run; each holds a few bytes (0: render in input order, and rank only the rendered pages waiting in
    --look-ahead)."""
    route: Literal['model', 'text-layer']
    """model: every page goes to the model; text-layer: a PDF page whose text layer is sound gets its Markdown from that
    layer, laid out (reading order, tables, figures) by the CPU engine, and sends no model request (docs/routes.md)."""
    route_endpoint: str | None
    """Base URL of a running CPU engine (llm-ocr serve --engine cpu) that lays out text-layer pages (default: launch
    one; it needs pip install 'llm-ocr[cpu]')."""
    steal: bool | None
    """Read page groups of slow or dead shards once this shard's own are done, claiming each with an atomic
    create-if-absent and a lease, so every page is still written once (default: on with more than one shard where the
    output allows it, local disk, S3 or GCS; off on the Hub, where every claim is a commit). An output begun with work
    groups keeps them."""
    lease: float
    """Seconds a claim on a page group lasts unless its holder renews it (it does every lease/4): how long a dead
    shard's groups in progress wait before others take them."""
    group_docs: int | None
    """Documents per page group (default: the largest shard's documents / 128; fixed when the output is begun)."""
    second_readers: bool
    """With nothing left to take anywhere, read the pages not yet stored of the page group another process started
    longest ago, beside it (one second reader a group); each stops the requests of pages the other stored first. Spends
    at most one more reading of the pages in flight at the run's end, on slots that would otherwise idle; the completion
    marker counts it (docs/stragglers.md)."""
    escalate_to: str | None
    """A stronger model that reads again every page whose first reading trips --escalate-on (llm-ocr run: Extract, then
    Escalate into OUT/escalate, then Describe and Assemble use it)."""
    escalate_endpoint: str | None
    """Base URL serving --escalate-to (default: launch a second server with the server options)."""
    escalate_api_key: str | None
    """API key of --escalate-endpoint (default: --api-key; prefer LLM_OCR_ESCALATE_API_KEY)."""
    escalate_server_args: str | None
    """Extra arguments of the server launched for --escalate-to (default: --server-args)."""
    escalate_on: str
    """Signals of a first reading that send its page to the stronger model, comma-separated, of: error, empty,
    truncated, looped, repetition, missing-text, stray, garbled, short, verifier."""
    escalate_min_recall: float
    """missing-text: share of sampled text-layer lines a reading must contain."""
    escalate_min_dictionary: float
    """garbled: share of a reading's words of 3+ ASCII letters that must be English dictionary words."""
    escalate_min_length: float
    """short: share of the characters the page's ink (or text layer) suggests that a reading must hold."""
    escalate_verifier: str | None
    """URL of a verifier (POST JSON {image, text} -> {probability}) whose score is the verifier signal
    (docs/routes.md#a-verifier)."""
    escalate_verifier_threshold: float
    """verifier: a reading scored below this probability is escalated."""
    describe_prompt: str | None
    """Prompt sent with each figure crop (default: 'Describe this image in detail.', DeepSeek-OCR's own)."""
    describe_max_tokens: int
    """Most tokens one description may generate (capped by the server's context)."""
    describe_temperature: float
    """Sampling temperature of descriptions."""
    describe_model: str | None
    """Served model that writes descriptions (default: --model)."""
    describe_endpoint: str | None
    """OpenAI-compatible base URL of a separate captioning server (default: the job's endpoint)."""
    describe_api_key: str | None
    """API key of --describe-endpoint (default: --api-key; prefer LLM_OCR_DESCRIBE_API_KEY)."""
    redescribe: bool
    """Also describe figures the OCR model already described in its page answer (olmOCR-2's alt text, Chandra's image
    alt); default: keep the model's own description."""
    describe_schema: str | None
    """JSON schema the answer must follow, as a file path/URL or inline JSON: enables structured output; the validated
    JSON goes to description_json and a readable form to description."""
    page_separator: str
    """Text between pages; \\n means a newline and {page} the number of the page that follows."""
    export_markdown: bool
    """Also write OUT/markdown/NAME.md with figures in OUT/markdown/figures/NAME/ (relative links)."""
    assemble_batch_pages: int
    """Pages held in memory at once (documents are read from storage in batches)."""
    chunks: bool
    """Also write each document as a DoclingDocument (OUT/docling/NAME.json) and its chunks
    (OUT/chunks/chunks-SSSSS-of-NNNNN.parquet), as llm-ocr export --chunks does, for this shard's documents once they
    are assembled. Needs pip install 'llm-ocr[docling]'."""
    chunker: Literal['hierarchical', 'hybrid']
    """docling-core's chunker of --chunks: hierarchical (one chunk per paragraph, table, list or picture, with its
    headings) or hybrid (those split and merged to at most --chunk-max-tokens tokens of --chunk-tokenizer)."""
    chunk_tokenizer: str | None
    """With --chunker hybrid: the Hugging Face tokenizer that counts tokens, a local folder or a Hub model name (the
    embedding model's)."""
    chunk_max_tokens: int | None
    """With --chunker hybrid: most tokens of a chunk, its headings included (default: the length --chunk-tokenizer
    states)."""
    page_furniture: Literal['keep', 'drop', 'tag']
    """Running headers, footers and page numbers in the assembled Markdown: keep, drop, or tag (an HTML comment <!--
    furniture: KIND --> before each). Always listed in the row's furniture column."""
    fields_schema: str | None
    """The fields to extract: a JSON Schema file (path or URL), inline JSON, or a pydantic model as
    package.module:Model. Also --schema."""
    classes: str | None
    """A classes file (YAML or JSON; or inline JSON): class name -> schema, file-name patterns and keywords; documents
    are classified first (rules, then the model), documents of no known class get class 'other'."""
    fields_from: Literal['markdown', 'images', 'both']
    """What the model reads: the assembled Markdown, the page images (a VLM), or both. Also --from."""
    fields_model: str | None
    """Served model that extracts fields (default: --model)."""
    fields_endpoint: str | None
    """OpenAI-compatible base URL of a separate server for fields (default: the job's endpoint)."""
    fields_api_key: str | None
    """API key of --fields-endpoint (default: --api-key; prefer LLM_OCR_FIELDS_API_KEY)."""
    fields_structured: Literal['auto', 'json_schema', 'json_object', 'instruction']
    """How the answer's shape is requested: json_schema (structured outputs), json_object (JSON mode), instruction (the
    prompt only); auto starts with json_schema and falls back when the endpoint refuses it. The answer is validated
    whatever the mode."""
    fields_max_tokens: int
    """Most tokens one answer may generate."""
    fields_max_input_tokens: int | None
    """Most tokens of document text one request carries; longer documents are split by page and the answers merged
    (default: what the server's context leaves after the answer)."""
    fields_pages_per_request: int
    """Page images one request carries with --from images/both (many servers take 1)."""
    fields_classify: Literal['auto', 'rules', 'model']
    """With --classes: rules then the model (auto), rules only (undecided: other), or the model only."""
    fields_prompt: str | None
    """Instruction sent before the schema (default: a generic one)."""
    fields_temperature: float
    """Sampling temperature of field requests."""
    fields_repair: bool
    """Send one repair request, showing the model its errors, when an answer is not valid."""
    export_jsonl: bool
    """Also write OUT/fields.jsonl: one JSON object per row."""
    export_csv: bool
    """Also write OUT/fields.csv: one line per row, lists as JSON."""
    request_timeout: float
    """Seconds one request may take once sent (a page can decode thousands of tokens)."""
    max_attempts: int
    """Attempts per request before the page is marked failed."""
    backoff_base: float
    """First retry delay in seconds; doubles per attempt, with jitter."""
    backoff_max: float
    """Longest delay between two attempts, in seconds."""
    dead_after: float
    """Stop the run when the endpoint has been unreachable for this many seconds with no success."""
    schema: str | None
    """The fields to extract: a JSON Schema file (path or URL), inline JSON, or a pydantic model as
    package.module:Model. Also --schema."""


class ExtractKeywords(TypedDict, total=False):
    """Keyword arguments of ``llm_ocr.extract()``: the options of ``llm-ocr extract``."""

    endpoint: str | None
    """OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1 (given: launch nothing)."""
    model: str
    """Served model name."""
    recipe: str | None
    """Model family whose recipe to use (request, server flags, parser), for a fine-tune served under another name: one
    of llm-ocr models' names (default: chosen from --model)."""
    api_key: str | None
    """API key for the endpoint (prefer the LLM_OCR_API_KEY variable)."""
    num_shards: int | None
    """Number of shards (default: from the platform, else 1)."""
    shard_index: int | None
    """This shard's index (default: from the platform, else 0)."""
    max_in_flight: int | None
    """Requests in flight at once (default: the GPU preset's max-num-seqs plus a queue, else 64)."""
    workers: int | None
    """Render/crop worker processes at most, started as pages wait for them (default: one per core; 0 = a thread
    in-process)."""
    storage_options: dict[str, Any]
    """JSON object of fsspec storage options for inputs and output."""
    progress: Literal['auto', 'live', 'bar', 'log', 'off']
    """Progress display: live on a terminal, a progress bar in a notebook, periodic log lines otherwise."""
    progress_interval: float
    """Seconds between progress log lines."""
    flush_interval: float
    """Seconds between part writes at most (bounds loss on a crash)."""
    grace_period: float
    """Seconds in-flight pages may finish after SIGTERM/SIGINT."""
    gpu_price_per_hour: float | None
    """US$ per GPU-hour for the cost estimate in the stats (default: the preset's list price)."""
    part_rows: int
    """Rows per Parquet part at most."""
    engine: Literal['auto', 'vllm', 'cpu', 'sim']
    """Server to launch without --endpoint: vllm, cpu, sim, or auto (vllm with a CUDA GPU, else cpu)."""
    gpu_preset: str | None
    """vLLM sizing preset: a100-80gb, a100-40gb, h100-80gb, h200-141gb, l40s-48gb, l4-24gb, l4-24gb-x4, l4-24gb-x8,
    l40s-48gb-x4, l40s-48gb-x8, a100-80gb-x4, a100-80gb-x8, h100-80gb-x8, h200-141gb-x2, h200-141gb-x4, h200-141gb-x8
    (default: detected with nvidia-smi)."""
    server_command: str
    """Command that starts vLLM (e.g. 'python -m vllm.entrypoints.openai.api_server')."""
    server_args: str
    """Extra arguments appended to the server command line (they override ours), e.g. --server-args "--enforce-eager
    --max-num-seqs 64"."""
    server_startup_timeout: float
    """Seconds the server may take to become ready."""
    server_max_restarts: int
    """Restarts of a server that crashed mid-run (per server)."""
    gpus: int | None
    """GPUs to use, one vLLM server on each behind one dispatcher (default: every GPU nvidia-smi lists, or as many as
    --gpu-preset names; 1: one server)."""
    dpi: float
    """PDF render resolution (default: the model family's, 144 for DeepSeek-OCR)."""
    max_page_pixels: int
    """Pages larger than this are rendered or resized down to fit (default: the model family's limit, e.g. 6291456 for
    Chandra; 12000000 for most, against huge posters and 600 DPI scans)."""
    long_side: int | None
    """Scale every page (PDF or image) so its longer side has exactly this many pixels, instead of --dpi (default: the
    model family's, e.g. 1288 for olmOCR-2; none for most)."""
    max_long_side: int | None
    """Scale pages down so their longer side has at most this many pixels (default: the model family's, e.g. 3500 for
    GLM-OCR; none for most)."""
    size_multiple: int | None
    """Resize every page image so both its sides are multiples of this many pixels, each rounded to the nearest (within
    --max-page-pixels), as the model family's own client resizes what it sends (default: the model family's, 32 for
    Infinity-Parser2, 28 for GLM-OCR and Surya; none for most)."""
    min_page_side: int
    """PDF pages whose longer side would render smaller than this many pixels (labels, cards, pages sized in odd units)
    are rendered at this size instead; 0 = never."""
    max_image_pixels: int
    """Images with more pixels than this are refused as likely decompression bombs."""
    max_pages: int
    """Documents with more pages than this are refused (error row)."""
    image_format: Literal['jpeg', 'png']
    """Encoding of page images sent to the model: jpeg (fast) or png (lossless); default: the model family's (jpeg for
    DeepSeek-OCR, png for the families whose own code sends PNG)."""
    jpeg_quality: int
    """JPEG quality when image_format is jpeg."""
    config: str | None
    """Dataset configuration (subset) name, e.g. olmOCR-mix-0225-documents. When set, an INPUT that is not an existing
    path is loaded as a Hub dataset OWNER/NAME."""
    split: str
    """Dataset split to read."""
    image_column: str | None
    """Column holding the page image(s). Default: "images", then "image", then the first column of type Image or list of
    Image."""
    prompt: str | None
    """OCR prompt (default: the model family's own; see llm-ocr models)."""
    max_tokens: int | None
    """Most tokens a page may generate (default and ceiling: the server's context minus the prompt)."""
    truncation_retries: int | None
    """Extra attempts for a page that looped or hit max_tokens, each at the family's next retry temperature (default:
    the family's own count, 1 for DeepSeek-OCR)."""
    retry_temperature_step: float | None
    """Temperature added per truncation retry (default: the family's retry temperatures)."""
    retry_quarantined: bool
    """Retry pages an earlier run quarantined because the model server crashed on them."""
    dedup: bool
    """Read each distinct document (by the sha256 of its bytes: the manifest's, else computed as it is read) and each
    distinct page (by its pixels) once: a duplicate's rows are copies of the first reading, duplicate_of naming it, with
    no model request (docs/dedup.md). Off: every document and page is read."""
    dedup_index: str | None
    """A Parquet file or folder of documents read before (columns sha256, doc_id, rows: the folder holding their page
    rows), such as another output's _state/hashes/: a document whose sha256 is there gets copies of those rows instead
    of being read."""
    text_layer_fallback: bool
    """Give PDF pages that fail or are truncated their PDF text layer as fallback_text, if it reads as English."""
    max_page_aspect: float
    """Pages whose long side exceeds this many times their short side are read in overlapping segments of a readable
    shape, one request each, and joined (0: always read whole)."""
    cut_loops: bool
    """Stream each answer and close the stream as soon as it repeats itself (a repetition loop), then retry at the next
    temperature step; off: wait for whole answers (loops run to max_tokens)."""
    pieces: Literal['auto', 'off', 'always']
    """Reading a page in pieces: auto (a long page in segments, a dense page in tiles or bands, as --max-page-aspect and
    --tile-dense-pages say), off (every page whole, in one request and its retries), always (a dense page's tiles or
    bands for every page that can be cut, a long page's segments as auto). A page in pieces costs at most the cost_bound
    dense option times reading it whole (docs/gpu-time.md)."""
    tile_dense_pages: bool
    """Read a page whose text is too long for one answer (a newspaper page) in overlapping pieces, all at once (tiles
    joined by boxes, or bands column by column for families without boxes: `llm-ocr models`): straight away when its
    text layer or ink says so, else when its answer runs to max_tokens without repeating itself; a piece whose answer
    still runs out is cut in two and read again. Off: such a page is retried whole."""
    dense_option: list[str]
    """Set a knob of reading a page in pieces, NAME=VALUE (repeatable; also LLM_OCR_DENSE_<NAME>): every knob, its unit
    and where its value comes from are listed by llm-ocr models --json (dense_options) and docs/gpu-time.md; the values
    in force are written in the run's completion marker."""
    look_ahead: int
    """Rendered pages that may wait for a free slot, so that those expected to hold the most text (their text layer or
    ink, estimated as they are rendered) are sent first and the run does not end on a long page sent last; each waiting
    page holds its image in memory (0: send pages in input order)."""
    look_ahead_mb: float
    """Most MiB of page images waiting for a slot (--look-ahead): fewer pages wait when they are large."""
    estimate_ahead: int
    """PDF pages whose answer length is estimated from the file before they are rendered (the text layer's length, a
    scan's image size; about 1 ms a page), so that those expected to be longest are rendered and sent first, from the
    start of the run; each holds a few bytes (0: render in input order, and rank only the rendered pages waiting in
    --look-ahead)."""
    route: Literal['model', 'text-layer']
    """model: every page goes to the model; text-layer: a PDF page whose text layer is sound gets its Markdown from that
    layer, laid out (reading order, tables, figures) by the CPU engine, and sends no model request (docs/routes.md)."""
    route_endpoint: str | None
    """Base URL of a running CPU engine (llm-ocr serve --engine cpu) that lays out text-layer pages (default: launch
    one; it needs pip install 'llm-ocr[cpu]')."""
    steal: bool | None
    """Read page groups of slow or dead shards once this shard's own are done, claiming each with an atomic
    create-if-absent and a lease, so every page is still written once (default: on with more than one shard where the
    output allows it, local disk, S3 or GCS; off on the Hub, where every claim is a commit). An output begun with work
    groups keeps them."""
    lease: float
    """Seconds a claim on a page group lasts unless its holder renews it (it does every lease/4): how long a dead
    shard's groups in progress wait before others take them."""
    group_docs: int | None
    """Documents per page group (default: the largest shard's documents / 128; fixed when the output is begun)."""
    second_readers: bool
    """With nothing left to take anywhere, read the pages not yet stored of the page group another process started
    longest ago, beside it (one second reader a group); each stops the requests of pages the other stored first. Spends
    at most one more reading of the pages in flight at the run's end, on slots that would otherwise idle; the completion
    marker counts it (docs/stragglers.md)."""
    request_timeout: float
    """Seconds one request may take once sent (a page can decode thousands of tokens)."""
    max_attempts: int
    """Attempts per request before the page is marked failed."""
    backoff_base: float
    """First retry delay in seconds; doubles per attempt, with jitter."""
    backoff_max: float
    """Longest delay between two attempts, in seconds."""
    dead_after: float
    """Stop the run when the endpoint has been unreachable for this many seconds with no success."""


class EscalateKeywords(TypedDict, total=False):
    """Keyword arguments of ``llm_ocr.escalate()``: the options of ``llm-ocr escalate``."""

    endpoint: str | None
    """OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1 (given: launch nothing)."""
    model: str
    """Served model name."""
    recipe: str | None
    """Model family whose recipe to use (request, server flags, parser), for a fine-tune served under another name: one
    of llm-ocr models' names (default: chosen from --model)."""
    api_key: str | None
    """API key for the endpoint (prefer the LLM_OCR_API_KEY variable)."""
    num_shards: int | None
    """Number of shards (default: from the platform, else 1)."""
    shard_index: int | None
    """This shard's index (default: from the platform, else 0)."""
    max_in_flight: int | None
    """Requests in flight at once (default: the GPU preset's max-num-seqs plus a queue, else 64)."""
    workers: int | None
    """Render/crop worker processes at most, started as pages wait for them (default: one per core; 0 = a thread
    in-process)."""
    storage_options: dict[str, Any]
    """JSON object of fsspec storage options for inputs and output."""
    progress: Literal['auto', 'live', 'bar', 'log', 'off']
    """Progress display: live on a terminal, a progress bar in a notebook, periodic log lines otherwise."""
    progress_interval: float
    """Seconds between progress log lines."""
    flush_interval: float
    """Seconds between part writes at most (bounds loss on a crash)."""
    grace_period: float
    """Seconds in-flight pages may finish after SIGTERM/SIGINT."""
    gpu_price_per_hour: float | None
    """US$ per GPU-hour for the cost estimate in the stats (default: the preset's list price)."""
    part_rows: int
    """Rows per Parquet part at most."""
    engine: Literal['auto', 'vllm', 'cpu', 'sim']
    """Server to launch without --endpoint: vllm, cpu, sim, or auto (vllm with a CUDA GPU, else cpu)."""
    gpu_preset: str | None
    """vLLM sizing preset: a100-80gb, a100-40gb, h100-80gb, h200-141gb, l40s-48gb, l4-24gb, l4-24gb-x4, l4-24gb-x8,
    l40s-48gb-x4, l40s-48gb-x8, a100-80gb-x4, a100-80gb-x8, h100-80gb-x8, h200-141gb-x2, h200-141gb-x4, h200-141gb-x8
    (default: detected with nvidia-smi)."""
    server_command: str
    """Command that starts vLLM (e.g. 'python -m vllm.entrypoints.openai.api_server')."""
    server_args: str
    """Extra arguments appended to the server command line (they override ours), e.g. --server-args "--enforce-eager
    --max-num-seqs 64"."""
    server_startup_timeout: float
    """Seconds the server may take to become ready."""
    server_max_restarts: int
    """Restarts of a server that crashed mid-run (per server)."""
    gpus: int | None
    """GPUs to use, one vLLM server on each behind one dispatcher (default: every GPU nvidia-smi lists, or as many as
    --gpu-preset names; 1: one server)."""
    dpi: float
    """PDF render resolution (default: the model family's, 144 for DeepSeek-OCR)."""
    max_page_pixels: int
    """Pages larger than this are rendered or resized down to fit (default: the model family's limit, e.g. 6291456 for
    Chandra; 12000000 for most, against huge posters and 600 DPI scans)."""
    long_side: int | None
    """Scale every page (PDF or image) so its longer side has exactly this many pixels, instead of --dpi (default: the
    model family's, e.g. 1288 for olmOCR-2; none for most)."""
    max_long_side: int | None
    """Scale pages down so their longer side has at most this many pixels (default: the model family's, e.g. 3500 for
    GLM-OCR; none for most)."""
    size_multiple: int | None
    """Resize every page image so both its sides are multiples of this many pixels, each rounded to the nearest (within
    --max-page-pixels), as the model family's own client resizes what it sends (default: the model family's, 32 for
    Infinity-Parser2, 28 for GLM-OCR and Surya; none for most)."""
    min_page_side: int
    """PDF pages whose longer side would render smaller than this many pixels (labels, cards, pages sized in odd units)
    are rendered at this size instead; 0 = never."""
    max_image_pixels: int
    """Images with more pixels than this are refused as likely decompression bombs."""
    max_pages: int
    """Documents with more pages than this are refused (error row)."""
    image_format: Literal['jpeg', 'png']
    """Encoding of page images sent to the model: jpeg (fast) or png (lossless); default: the model family's (jpeg for
    DeepSeek-OCR, png for the families whose own code sends PNG)."""
    jpeg_quality: int
    """JPEG quality when image_format is jpeg."""
    image_column: str | None
    """Column holding the page image(s). Default: "images", then "image", then the first column of type Image or list of
    Image."""
    prompt: str | None
    """OCR prompt (default: the model family's own; see llm-ocr models)."""
    max_tokens: int | None
    """Most tokens a page may generate (default and ceiling: the server's context minus the prompt)."""
    truncation_retries: int | None
    """Extra attempts for a page that looped or hit max_tokens, each at the family's next retry temperature (default:
    the family's own count, 1 for DeepSeek-OCR)."""
    retry_temperature_step: float | None
    """Temperature added per truncation retry (default: the family's retry temperatures)."""
    text_layer_fallback: bool
    """Give PDF pages that fail or are truncated their PDF text layer as fallback_text, if it reads as English."""
    max_page_aspect: float
    """Pages whose long side exceeds this many times their short side are read in overlapping segments of a readable
    shape, one request each, and joined (0: always read whole)."""
    cut_loops: bool
    """Stream each answer and close the stream as soon as it repeats itself (a repetition loop), then retry at the next
    temperature step; off: wait for whole answers (loops run to max_tokens)."""
    pieces: Literal['auto', 'off', 'always']
    """Reading a page in pieces: auto (a long page in segments, a dense page in tiles or bands, as --max-page-aspect and
    --tile-dense-pages say), off (every page whole, in one request and its retries), always (a dense page's tiles or
    bands for every page that can be cut, a long page's segments as auto). A page in pieces costs at most the cost_bound
    dense option times reading it whole (docs/gpu-time.md)."""
    tile_dense_pages: bool
    """Read a page whose text is too long for one answer (a newspaper page) in overlapping pieces, all at once (tiles
    joined by boxes, or bands column by column for families without boxes: `llm-ocr models`): straight away when its
    text layer or ink says so, else when its answer runs to max_tokens without repeating itself; a piece whose answer
    still runs out is cut in two and read again. Off: such a page is retried whole."""
    dense_option: list[str]
    """Set a knob of reading a page in pieces, NAME=VALUE (repeatable; also LLM_OCR_DENSE_<NAME>): every knob, its unit
    and where its value comes from are listed by llm-ocr models --json (dense_options) and docs/gpu-time.md; the values
    in force are written in the run's completion marker."""
    escalate_on: str
    """Signals of a first reading that send its page to the stronger model, comma-separated, of: error, empty,
    truncated, looped, repetition, missing-text, stray, garbled, short, verifier."""
    escalate_min_recall: float
    """missing-text: share of sampled text-layer lines a reading must contain."""
    escalate_min_dictionary: float
    """garbled: share of a reading's words of 3+ ASCII letters that must be English dictionary words."""
    escalate_min_length: float
    """short: share of the characters the page's ink (or text layer) suggests that a reading must hold."""
    escalate_verifier: str | None
    """URL of a verifier (POST JSON {image, text} -> {probability}) whose score is the verifier signal
    (docs/routes.md#a-verifier)."""
    escalate_verifier_threshold: float
    """verifier: a reading scored below this probability is escalated."""
    request_timeout: float
    """Seconds one request may take once sent (a page can decode thousands of tokens)."""
    max_attempts: int
    """Attempts per request before the page is marked failed."""
    backoff_base: float
    """First retry delay in seconds; doubles per attempt, with jitter."""
    backoff_max: float
    """Longest delay between two attempts, in seconds."""
    dead_after: float
    """Stop the run when the endpoint has been unreachable for this many seconds with no success."""


class DescribeKeywords(TypedDict, total=False):
    """Keyword arguments of ``llm_ocr.describe()``: the options of ``llm-ocr describe``."""

    endpoint: str | None
    """OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1 (given: launch nothing)."""
    model: str
    """Served model name."""
    recipe: str | None
    """Model family whose recipe to use (request, server flags, parser), for a fine-tune served under another name: one
    of llm-ocr models' names (default: chosen from --model)."""
    api_key: str | None
    """API key for the endpoint (prefer the LLM_OCR_API_KEY variable)."""
    num_shards: int | None
    """Number of shards (default: from the platform, else 1)."""
    shard_index: int | None
    """This shard's index (default: from the platform, else 0)."""
    max_in_flight: int | None
    """Requests in flight at once (default: the GPU preset's max-num-seqs plus a queue, else 64)."""
    storage_options: dict[str, Any]
    """JSON object of fsspec storage options for inputs and output."""
    progress: Literal['auto', 'live', 'bar', 'log', 'off']
    """Progress display: live on a terminal, a progress bar in a notebook, periodic log lines otherwise."""
    progress_interval: float
    """Seconds between progress log lines."""
    flush_interval: float
    """Seconds between part writes at most (bounds loss on a crash)."""
    grace_period: float
    """Seconds in-flight pages may finish after SIGTERM/SIGINT."""
    gpu_price_per_hour: float | None
    """US$ per GPU-hour for the cost estimate in the stats (default: the preset's list price)."""
    part_rows: int
    """Rows per Parquet part at most."""
    engine: Literal['auto', 'vllm', 'cpu', 'sim']
    """Server to launch without --endpoint: vllm, cpu, sim, or auto (vllm with a CUDA GPU, else cpu)."""
    gpu_preset: str | None
    """vLLM sizing preset: a100-80gb, a100-40gb, h100-80gb, h200-141gb, l40s-48gb, l4-24gb, l4-24gb-x4, l4-24gb-x8,
    l40s-48gb-x4, l40s-48gb-x8, a100-80gb-x4, a100-80gb-x8, h100-80gb-x8, h200-141gb-x2, h200-141gb-x4, h200-141gb-x8
    (default: detected with nvidia-smi)."""
    server_command: str
    """Command that starts vLLM (e.g. 'python -m vllm.entrypoints.openai.api_server')."""
    server_args: str
    """Extra arguments appended to the server command line (they override ours), e.g. --server-args "--enforce-eager
    --max-num-seqs 64"."""
    server_startup_timeout: float
    """Seconds the server may take to become ready."""
    server_max_restarts: int
    """Restarts of a server that crashed mid-run (per server)."""
    gpus: int | None
    """GPUs to use, one vLLM server on each behind one dispatcher (default: every GPU nvidia-smi lists, or as many as
    --gpu-preset names; 1: one server)."""
    describe_prompt: str | None
    """Prompt sent with each figure crop (default: 'Describe this image in detail.', DeepSeek-OCR's own)."""
    describe_max_tokens: int
    """Most tokens one description may generate (capped by the server's context)."""
    describe_temperature: float
    """Sampling temperature of descriptions."""
    describe_model: str | None
    """Served model that writes descriptions (default: --model)."""
    describe_endpoint: str | None
    """OpenAI-compatible base URL of a separate captioning server (default: the job's endpoint)."""
    describe_api_key: str | None
    """API key of --describe-endpoint (default: --api-key; prefer LLM_OCR_DESCRIBE_API_KEY)."""
    redescribe: bool
    """Also describe figures the OCR model already described in its page answer (olmOCR-2's alt text, Chandra's image
    alt); default: keep the model's own description."""
    describe_schema: str | None
    """JSON schema the answer must follow, as a file path/URL or inline JSON: enables structured output; the validated
    JSON goes to description_json and a readable form to description."""
    request_timeout: float
    """Seconds one request may take once sent (a page can decode thousands of tokens)."""
    max_attempts: int
    """Attempts per request before the page is marked failed."""
    backoff_base: float
    """First retry delay in seconds; doubles per attempt, with jitter."""
    backoff_max: float
    """Longest delay between two attempts, in seconds."""
    dead_after: float
    """Stop the run when the endpoint has been unreachable for this many seconds with no success."""


class AssembleKeywords(TypedDict, total=False):
    """Keyword arguments of ``llm_ocr.assemble()``: the options of ``llm-ocr assemble``."""

    num_shards: int | None
    """Number of shards (default: from the platform, else 1)."""
    shard_index: int | None
    """This shard's index (default: from the platform, else 0)."""
    storage_options: dict[str, Any]
    """JSON object of fsspec storage options for inputs and output."""
    gpu_price_per_hour: float | None
    """US$ per GPU-hour for the cost estimate in the stats (default: the preset's list price)."""
    part_rows: int
    """Rows per Parquet part at most."""
    page_separator: str
    """Text between pages; \\n means a newline and {page} the number of the page that follows."""
    export_markdown: bool
    """Also write OUT/markdown/NAME.md with figures in OUT/markdown/figures/NAME/ (relative links)."""
    assemble_batch_pages: int
    """Pages held in memory at once (documents are read from storage in batches)."""
    chunks: bool
    """Also write each document as a DoclingDocument (OUT/docling/NAME.json) and its chunks
    (OUT/chunks/chunks-SSSSS-of-NNNNN.parquet), as llm-ocr export --chunks does, for this shard's documents once they
    are assembled. Needs pip install 'llm-ocr[docling]'."""
    chunker: Literal['hierarchical', 'hybrid']
    """docling-core's chunker of --chunks: hierarchical (one chunk per paragraph, table, list or picture, with its
    headings) or hybrid (those split and merged to at most --chunk-max-tokens tokens of --chunk-tokenizer)."""
    chunk_tokenizer: str | None
    """With --chunker hybrid: the Hugging Face tokenizer that counts tokens, a local folder or a Hub model name (the
    embedding model's)."""
    chunk_max_tokens: int | None
    """With --chunker hybrid: most tokens of a chunk, its headings included (default: the length --chunk-tokenizer
    states)."""
    page_furniture: Literal['keep', 'drop', 'tag']
    """Running headers, footers and page numbers in the assembled Markdown: keep, drop, or tag (an HTML comment <!--
    furniture: KIND --> before each). Always listed in the row's furniture column."""


class FieldsKeywords(TypedDict, total=False):
    """Keyword arguments of ``llm_ocr.fields()``: the options of ``llm-ocr fields``."""

    endpoint: str | None
    """OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1 (given: launch nothing)."""
    model: str
    """Served model name."""
    recipe: str | None
    """Model family whose recipe to use (request, server flags, parser), for a fine-tune served under another name: one
    of llm-ocr models' names (default: chosen from --model)."""
    api_key: str | None
    """API key for the endpoint (prefer the LLM_OCR_API_KEY variable)."""
    num_shards: int | None
    """Number of shards (default: from the platform, else 1)."""
    shard_index: int | None
    """This shard's index (default: from the platform, else 0)."""
    max_in_flight: int | None
    """Requests in flight at once (default: the GPU preset's max-num-seqs plus a queue, else 64)."""
    storage_options: dict[str, Any]
    """JSON object of fsspec storage options for inputs and output."""
    progress: Literal['auto', 'live', 'bar', 'log', 'off']
    """Progress display: live on a terminal, a progress bar in a notebook, periodic log lines otherwise."""
    progress_interval: float
    """Seconds between progress log lines."""
    flush_interval: float
    """Seconds between part writes at most (bounds loss on a crash)."""
    grace_period: float
    """Seconds in-flight pages may finish after SIGTERM/SIGINT."""
    gpu_price_per_hour: float | None
    """US$ per GPU-hour for the cost estimate in the stats (default: the preset's list price)."""
    part_rows: int
    """Rows per Parquet part at most."""
    engine: Literal['auto', 'vllm', 'cpu', 'sim']
    """Server to launch without --endpoint: vllm, cpu, sim, or auto (vllm with a CUDA GPU, else cpu)."""
    gpu_preset: str | None
    """vLLM sizing preset: a100-80gb, a100-40gb, h100-80gb, h200-141gb, l40s-48gb, l4-24gb, l4-24gb-x4, l4-24gb-x8,
    l40s-48gb-x4, l40s-48gb-x8, a100-80gb-x4, a100-80gb-x8, h100-80gb-x8, h200-141gb-x2, h200-141gb-x4, h200-141gb-x8
    (default: detected with nvidia-smi)."""
    server_command: str
    """Command that starts vLLM (e.g. 'python -m vllm.entrypoints.openai.api_server')."""
    server_args: str
    """Extra arguments appended to the server command line (they override ours), e.g. --server-args "--enforce-eager
    --max-num-seqs 64"."""
    server_startup_timeout: float
    """Seconds the server may take to become ready."""
    server_max_restarts: int
    """Restarts of a server that crashed mid-run (per server)."""
    gpus: int | None
    """GPUs to use, one vLLM server on each behind one dispatcher (default: every GPU nvidia-smi lists, or as many as
    --gpu-preset names; 1: one server)."""
    dpi: float
    """PDF render resolution (default: the model family's, 144 for DeepSeek-OCR)."""
    max_page_pixels: int
    """Pages larger than this are rendered or resized down to fit (default: the model family's limit, e.g. 6291456 for
    Chandra; 12000000 for most, against huge posters and 600 DPI scans)."""
    long_side: int | None
    """Scale every page (PDF or image) so its longer side has exactly this many pixels, instead of --dpi (default: the
    model family's, e.g. 1288 for olmOCR-2; none for most)."""
    max_long_side: int | None
    """Scale pages down so their longer side has at most this many pixels (default: the model family's, e.g. 3500 for
    GLM-OCR; none for most)."""
    size_multiple: int | None
    """Resize every page image so both its sides are multiples of this many pixels, each rounded to the nearest (within
    --max-page-pixels), as the model family's own client resizes what it sends (default: the model family's, 32 for
    Infinity-Parser2, 28 for GLM-OCR and Surya; none for most)."""
    min_page_side: int
    """PDF pages whose longer side would render smaller than this many pixels (labels, cards, pages sized in odd units)
    are rendered at this size instead; 0 = never."""
    max_image_pixels: int
    """Images with more pixels than this are refused as likely decompression bombs."""
    max_pages: int
    """Documents with more pages than this are refused (error row)."""
    image_format: Literal['jpeg', 'png']
    """Encoding of page images sent to the model: jpeg (fast) or png (lossless); default: the model family's (jpeg for
    DeepSeek-OCR, png for the families whose own code sends PNG)."""
    jpeg_quality: int
    """JPEG quality when image_format is jpeg."""
    image_column: str | None
    """Column holding the page image(s). Default: "images", then "image", then the first column of type Image or list of
    Image."""
    fields_schema: str | None
    """The fields to extract: a JSON Schema file (path or URL), inline JSON, or a pydantic model as
    package.module:Model. Also --schema."""
    classes: str | None
    """A classes file (YAML or JSON; or inline JSON): class name -> schema, file-name patterns and keywords; documents
    are classified first (rules, then the model), documents of no known class get class 'other'."""
    fields_from: Literal['markdown', 'images', 'both']
    """What the model reads: the assembled Markdown, the page images (a VLM), or both. Also --from."""
    fields_model: str | None
    """Served model that extracts fields (default: --model)."""
    fields_endpoint: str | None
    """OpenAI-compatible base URL of a separate server for fields (default: the job's endpoint)."""
    fields_api_key: str | None
    """API key of --fields-endpoint (default: --api-key; prefer LLM_OCR_FIELDS_API_KEY)."""
    fields_structured: Literal['auto', 'json_schema', 'json_object', 'instruction']
    """How the answer's shape is requested: json_schema (structured outputs), json_object (JSON mode), instruction (the
    prompt only); auto starts with json_schema and falls back when the endpoint refuses it. The answer is validated
    whatever the mode."""
    fields_max_tokens: int
    """Most tokens one answer may generate."""
    fields_max_input_tokens: int | None
    """Most tokens of document text one request carries; longer documents are split by page and the answers merged
    (default: what the server's context leaves after the answer)."""
    fields_pages_per_request: int
    """Page images one request carries with --from images/both (many servers take 1)."""
    fields_classify: Literal['auto', 'rules', 'model']
    """With --classes: rules then the model (auto), rules only (undecided: other), or the model only."""
    fields_prompt: str | None
    """Instruction sent before the schema (default: a generic one)."""
    fields_temperature: float
    """Sampling temperature of field requests."""
    fields_repair: bool
    """Send one repair request, showing the model its errors, when an answer is not valid."""
    export_jsonl: bool
    """Also write OUT/fields.jsonl: one JSON object per row."""
    export_csv: bool
    """Also write OUT/fields.csv: one line per row, lists as JSON."""
    request_timeout: float
    """Seconds one request may take once sent (a page can decode thousands of tokens)."""
    max_attempts: int
    """Attempts per request before the page is marked failed."""
    backoff_base: float
    """First retry delay in seconds; doubles per attempt, with jitter."""
    backoff_max: float
    """Longest delay between two attempts, in seconds."""
    dead_after: float
    """Stop the run when the endpoint has been unreachable for this many seconds with no success."""
    schema: str | None
    """The fields to extract: a JSON Schema file (path or URL), inline JSON, or a pydantic model as
    package.module:Model. Also --schema."""


class LaunchKeywords(TypedDict, total=False):
    """Keyword arguments of ``llm_ocr.launch()``: the options of ``llm-ocr launch``, of every platform, and of the
    launched stage."""

    stage: Literal['run', 'extract', 'escalate', 'describe', 'assemble', 'fields']
    """Stage each job runs (run: all three)."""
    image: str | None
    """Prebuilt image with llm-ocr (default: a stock pinned image + the llm-ocr wheel)."""
    timeout: int | None
    """Per job, seconds or 90m/6h (default: sized from --pages, else 6h)."""
    attempts: int | None
    """Tries per job (a task on cloud-run) including the first (default 3; 4 on cloud-run); retries resume."""
    env: dict[str, str]
    """Plain environment variable for the jobs."""
    secret: list[str]
    """Pass local environment variable NAME to the jobs as a secret."""
    pages: int | None
    """Pages in the whole input, to size the timeout."""
    pages_per_s: float | None
    """Pages/s one job does, to size the timeout."""
    retry_errors: bool
    """Also relaunch finished shards that have failed pages."""
    wait: bool
    """Then show a live table until every shard ends."""
    interval: float
    """Seconds between polls while waiting."""
    dry_run: bool
    """Print the job specs and API requests as JSON; submit nothing."""
    offline: bool
    """With --dry-run: check nothing over the network (credentials, the platform's lists, inputs, output); the notes
    name every check skipped."""
    wheel: str | None
    """Ship this llm-ocr wheel instead of building one."""
    job_queue: str | None
    """The job queue (name or ARN) the array job goes to (required; aws-batch/template.yaml makes one)."""
    instance_type: str | None
    """The instance each shard fills: its GPUs, vCPUs and memory become the job's resource requirements (default
    g6e.xlarge, 1x L40S; m5.xlarge for assemble and --endpoint runs); one of g6e.xlarge, g6e.2xlarge, g6.xlarge,
    g6.2xlarge, g5.xlarge, g5.2xlarge, p4d.24xlarge, p5.48xlarge, m5.large, m5.xlarge. The compute environment must
    offer it."""
    job_role: str | None
    """IAM role the children act as (S3 reads and writes; required for the stock image, which fetches the llm-ocr wheel
    with it)."""
    execution_role: str | None
    """IAM role the ECS agent resolves --aws-secret with (required with --aws-secret)."""
    region: str | None
    """AWS region (default: AWS_REGION / AWS_DEFAULT_REGION / your AWS config)."""
    aws_secret: list[str] | dict[str, str]
    """The children get NAME from this Secrets Manager secret or SSM parameter ARN, by reference (e.g.
    HF_TOKEN=arn:aws:secretsmanager:...:secret:llm-ocr/hf-token-AbCdEf)."""
    code_uri: str | None
    """Where the llm-ocr wheel is uploaded (default: OUT/_state/code for an s3:// output)."""
    price_per_hour: float | None
    """Your price of one instance-hour (on-demand or Spot), for the cost table (default: the built-in on-demand price,
    us-east-1)."""
    project: str | None
    """Google Cloud project (default: $GOOGLE_CLOUD_PROJECT)."""
    gpu: str | None
    """GPU type per task: nvidia-l4 (default), or none for a CPU task (default for assemble and --endpoint runs)."""
    cpu: int | None
    """vCPUs per task: 1, 2, 4, 6 or 8 (default 8 with a GPU, else 2)."""
    memory: str | None
    """Memory per task, e.g. 32Gi (default 32Gi with a GPU, else 8Gi)."""
    job_name: str | None
    """The Cloud Run job to create or update (default llm-ocr-STAGE)."""
    parallelism: int | None
    """Tasks running at once (default: all; set it to your GPU quota)."""
    service_account: str | None
    """The tasks' identity (default: the project's compute service account)."""
    secret_ref: list[str]
    """Env var NAME in the tasks from Secret Manager secret SECRET (version latest unless given)."""
    code_location: str | None
    """Where the llm-ocr wheel is uploaded and mounted from (default gs://OUTPUT_BUCKET/llm-ocr-code)."""
    flavor: str | None
    """Hardware flavor (default: a100-large, or cpu-basic for assemble and --endpoint runs); e.g. l4x1, l40sx1,
    a100-large, h200."""
    namespace: str | None
    """User or organisation to run the jobs under (default: the token's user)."""
    code_repo: str | None
    """Private model repo the llm-ocr wheel is uploaded to (default: NAMESPACE/llm-ocr-jobs-code)."""
    context: str | None
    """kubeconfig context to use (default: the current one)."""
    gpus_per_pod: int | None
    """GPUs per shard pod, the nvidia.com/gpu limit (default 1, 0 for assemble and --endpoint runs)."""
    gpu_type: str | None
    """The GPU's name for the status table, e.g. L4 (pick the nodes with --node-selector)."""
    max_failed_shards: int | None
    """Stop the whole Job once more than this many shards have failed (maxFailedIndexes; default: every shard runs to
    its end)."""
    node_selector: list[str]
    """Node label the pods must run on, e.g. cloud.google.com/gke-accelerator=nvidia-l4."""
    toleration: list[str]
    """Taint the pods tolerate, as kubectl taint writes it: KEY[=VALUE][:EFFECT] (nvidia.com/gpu is tolerated with a
    GPU)."""
    image_pull_secret: str | None
    """Secret holding the registry credentials of --image."""
    pvc: list[str]
    """PersistentVolumeClaim every pod mounts at PATH, where this machine has the same files (a ReadWriteMany volume):
    local INPUT and OUT under PATH are then allowed."""
    yaml: bool
    """With --dry-run: print the Job (and the code's ConfigMaps) as YAML for `kubectl apply -f -` instead of the
    JSON."""
    address: str | None
    """The Ray cluster: ray://HEAD:10001 (Ray Client), http://HEAD:8265 (its dashboard), or auto (the cluster on this
    machine) (default: RAY_ADDRESS, else auto)."""
    actors: int | None
    """Actors running shards at once (default: one per GPU the cluster has when the job starts, or per --cpus-per-actor
    CPUs without GPUs; at most one per shard)."""
    gpus_per_actor: int | None
    """GPUs per actor, each running one vLLM (default 1; 0 for assemble and --endpoint runs, and CPU-only clusters)."""
    cpus_per_actor: float
    """CPUs per actor (Ray's num_cpus)."""
    accelerator_type: str | None
    """Only GPUs of this type (Ray's accelerator_type, e.g. A100, L4, H100)."""
    actor_restarts: int
    """Times Ray restarts an actor whose process or node died (max_restarts; -1: always); its shard goes to the next
    free actor."""
    venv: str | None
    """A virtualenv with llm-ocr at this path on every node (default: llm-ocr in the cluster's own Python)."""
    pip: list[str]
    """A requirement Ray installs on each node (runtime_env pip), e.g. 'llm-ocr[s3]==0.1.0'."""
    node_secret: list[str]
    """An environment variable the cluster's nodes already have (exported before `ray start`, or a Kubernetes Secret in
    KubeRay's pod env), checked in each actor; its value never passes through the launcher or the job."""
    role: str | None
    """The jobs' execution role (required; see sagemaker/README.md)."""
    volume_size: int
    """ML storage volume per instance, in GB (model weights and scratch)."""
    partition: str | None
    """Partition (default: the cluster's default partition)."""
    account: str | None
    """Account to charge (sbatch --account)."""
    qos: str | None
    """Quality of service (sbatch --qos)."""
    gpus_per_task: int | None
    """GPUs per shard task (sbatch --gpus; default 1, 0 for assemble and --endpoint runs)."""
    gres: str | None
    """Generic resources instead of --gpus, e.g. gpu:a100:1 (sbatch --gres)."""
    cpus_per_task: int | None
    """CPUs per task (default: the partition's)."""
    mem: str | None
    """Memory per task, e.g. 64G (sbatch --mem; default: the partition's)."""
    module: list[str]
    """Environment module each task loads (module load NAME)."""
    setup: list[str]
    """Shell line each task runs before llm-ocr, e.g. 'source ~/miniforge3/bin/activate ocr'."""
    container_mounts: str | None
    """With --image: pyxis --container-mounts (default: OUT, the local INPUTs and the log folder, each at its own
    path)."""
    requeue_before: int
    """Seconds before its time limit a task stops, keeps its parts and requeues itself to resume (sbatch
    --signal=B:USR1@S; 0: never)."""
    log_dir: str | None
    """Folder for the script, task logs and task records, shared with the nodes (default: OUT/_state/slurm when OUT is a
    local path)."""
    sbatch_option: list[str]
    """Any other sbatch option for the script, e.g. --constraint=h100."""
    endpoint: str | None
    """OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1 (given: launch nothing)."""
    model: str
    """Served model name."""
    recipe: str | None
    """Model family whose recipe to use (request, server flags, parser), for a fine-tune served under another name: one
    of llm-ocr models' names (default: chosen from --model)."""
    max_in_flight: int | None
    """Requests in flight at once (default: the GPU preset's max-num-seqs plus a queue, else 64)."""
    workers: int | None
    """Render/crop worker processes at most, started as pages wait for them (default: one per core; 0 = a thread
    in-process)."""
    storage_options: dict[str, Any]
    """JSON object of fsspec storage options for inputs and output."""
    progress: Literal['auto', 'live', 'bar', 'log', 'off']
    """Progress display: live on a terminal, a progress bar in a notebook, periodic log lines otherwise."""
    progress_interval: float
    """Seconds between progress log lines."""
    flush_interval: float
    """Seconds between part writes at most (bounds loss on a crash)."""
    grace_period: float
    """Seconds in-flight pages may finish after SIGTERM/SIGINT."""
    gpu_price_per_hour: float | None
    """US$ per GPU-hour for the cost estimate in the stats (default: the preset's list price)."""
    part_rows: int
    """Rows per Parquet part at most."""
    engine: Literal['auto', 'vllm', 'cpu', 'sim']
    """Server to launch without --endpoint: vllm, cpu, sim, or auto (vllm with a CUDA GPU, else cpu)."""
    gpu_preset: str | None
    """vLLM sizing preset: a100-80gb, a100-40gb, h100-80gb, h200-141gb, l40s-48gb, l4-24gb, l4-24gb-x4, l4-24gb-x8,
    l40s-48gb-x4, l40s-48gb-x8, a100-80gb-x4, a100-80gb-x8, h100-80gb-x8, h200-141gb-x2, h200-141gb-x4, h200-141gb-x8
    (default: detected with nvidia-smi)."""
    server_command: str
    """Command that starts vLLM (e.g. 'python -m vllm.entrypoints.openai.api_server')."""
    server_args: str
    """Extra arguments appended to the server command line (they override ours), e.g. --server-args "--enforce-eager
    --max-num-seqs 64"."""
    server_startup_timeout: float
    """Seconds the server may take to become ready."""
    server_max_restarts: int
    """Restarts of a server that crashed mid-run (per server)."""
    gpus: int | None
    """GPUs to use, one vLLM server on each behind one dispatcher (default: every GPU nvidia-smi lists, or as many as
    --gpu-preset names; 1: one server)."""
    dpi: float
    """PDF render resolution (default: the model family's, 144 for DeepSeek-OCR)."""
    max_page_pixels: int
    """Pages larger than this are rendered or resized down to fit (default: the model family's limit, e.g. 6291456 for
    Chandra; 12000000 for most, against huge posters and 600 DPI scans)."""
    long_side: int | None
    """Scale every page (PDF or image) so its longer side has exactly this many pixels, instead of --dpi (default: the
    model family's, e.g. 1288 for olmOCR-2; none for most)."""
    max_long_side: int | None
    """Scale pages down so their longer side has at most this many pixels (default: the model family's, e.g. 3500 for
    GLM-OCR; none for most)."""
    size_multiple: int | None
    """Resize every page image so both its sides are multiples of this many pixels, each rounded to the nearest (within
    --max-page-pixels), as the model family's own client resizes what it sends (default: the model family's, 32 for
    Infinity-Parser2, 28 for GLM-OCR and Surya; none for most)."""
    min_page_side: int
    """PDF pages whose longer side would render smaller than this many pixels (labels, cards, pages sized in odd units)
    are rendered at this size instead; 0 = never."""
    max_image_pixels: int
    """Images with more pixels than this are refused as likely decompression bombs."""
    max_pages: int
    """Documents with more pages than this are refused (error row)."""
    image_format: Literal['jpeg', 'png']
    """Encoding of page images sent to the model: jpeg (fast) or png (lossless); default: the model family's (jpeg for
    DeepSeek-OCR, png for the families whose own code sends PNG)."""
    jpeg_quality: int
    """JPEG quality when image_format is jpeg."""
    config: str | None
    """Dataset configuration (subset) name, e.g. olmOCR-mix-0225-documents. When set, an INPUT that is not an existing
    path is loaded as a Hub dataset OWNER/NAME."""
    split: str
    """Dataset split to read."""
    image_column: str | None
    """Column holding the page image(s). Default: "images", then "image", then the first column of type Image or list of
    Image."""
    prompt: str | None
    """OCR prompt (default: the model family's own; see llm-ocr models)."""
    max_tokens: int | None
    """Most tokens a page may generate (default and ceiling: the server's context minus the prompt)."""
    truncation_retries: int | None
    """Extra attempts for a page that looped or hit max_tokens, each at the family's next retry temperature (default:
    the family's own count, 1 for DeepSeek-OCR)."""
    retry_temperature_step: float | None
    """Temperature added per truncation retry (default: the family's retry temperatures)."""
    retry_quarantined: bool
    """Retry pages an earlier run quarantined because the model server crashed on them."""
    dedup: bool
    """Read each distinct document (by the sha256 of its bytes: the manifest's, else computed as it is read) and each
    distinct page (by its pixels) once: a duplicate's rows are copies of the first reading, duplicate_of naming it, with
    no model request (docs/dedup.md). Off: every document and page is read."""
    dedup_index: str | None
    """A Parquet file or folder of documents read before (columns sha256, doc_id, rows: the folder holding their page
    rows), such as another output's _state/hashes/: a document whose sha256 is there gets copies of those rows instead
    of being read."""
    text_layer_fallback: bool
    """Give PDF pages that fail or are truncated their PDF text layer as fallback_text, if it reads as English."""
    max_page_aspect: float
    """Pages whose long side exceeds this many times their short side are read in overlapping segments of a readable
    shape, one request each, and joined (0: always read whole)."""
    cut_loops: bool
    """Stream each answer and close the stream as soon as it repeats itself (a repetition loop), then retry at the next
    temperature step; off: wait for whole answers (loops run to max_tokens)."""
    pieces: Literal['auto', 'off', 'always']
    """Reading a page in pieces: auto (a long page in segments, a dense page in tiles or bands, as --max-page-aspect and
    --tile-dense-pages say), off (every page whole, in one request and its retries), always (a dense page's tiles or
    bands for every page that can be cut, a long page's segments as auto). A page in pieces costs at most the cost_bound
    dense option times reading it whole (docs/gpu-time.md)."""
    tile_dense_pages: bool
    """Read a page whose text is too long for one answer (a newspaper page) in overlapping pieces, all at once (tiles
    joined by boxes, or bands column by column for families without boxes: `llm-ocr models`): straight away when its
    text layer or ink says so, else when its answer runs to max_tokens without repeating itself; a piece whose answer
    still runs out is cut in two and read again. Off: such a page is retried whole."""
    dense_option: list[str]
    """Set a knob of reading a page in pieces, NAME=VALUE (repeatable; also LLM_OCR_DENSE_<NAME>): every knob, its unit
    and where its value comes from are listed by llm-ocr models --json (dense_options) and docs/gpu-time.md; the values
    in force are written in the run's completion marker."""
    look_ahead: int
    """Rendered pages that may wait for a free slot, so that those expected to hold the most text (their text layer or
    ink, estimated as they are rendered) are sent first and the run does not end on a long page sent last; each waiting
    page holds its image in memory (0: send pages in input order)."""
    look_ahead_mb: float
    """Most MiB of page images waiting for a slot (--look-ahead): fewer pages wait when they are large."""
    estimate_ahead: int
    """PDF pages whose answer length is estimated from the file before they are rendered (the text layer's length, a
    scan's image size; about 1 ms a page), so that those expected to be longest are rendered and sent first, from the
    start of the run; each holds a few bytes (0: render in input order, and rank only the rendered pages waiting in
    --look-ahead)."""
    route: Literal['model', 'text-layer']
    """model: every page goes to the model; text-layer: a PDF page whose text layer is sound gets its Markdown from that
    layer, laid out (reading order, tables, figures) by the CPU engine, and sends no model request (docs/routes.md)."""
    route_endpoint: str | None
    """Base URL of a running CPU engine (llm-ocr serve --engine cpu) that lays out text-layer pages (default: launch
    one; it needs pip install 'llm-ocr[cpu]')."""
    steal: bool | None
    """Read page groups of slow or dead shards once this shard's own are done, claiming each with an atomic
    create-if-absent and a lease, so every page is still written once (default: on with more than one shard where the
    output allows it, local disk, S3 or GCS; off on the Hub, where every claim is a commit). An output begun with work
    groups keeps them."""
    lease: float
    """Seconds a claim on a page group lasts unless its holder renews it (it does every lease/4): how long a dead
    shard's groups in progress wait before others take them."""
    group_docs: int | None
    """Documents per page group (default: the largest shard's documents / 128; fixed when the output is begun)."""
    second_readers: bool
    """With nothing left to take anywhere, read the pages not yet stored of the page group another process started
    longest ago, beside it (one second reader a group); each stops the requests of pages the other stored first. Spends
    at most one more reading of the pages in flight at the run's end, on slots that would otherwise idle; the completion
    marker counts it (docs/stragglers.md)."""
    escalate_to: str | None
    """A stronger model that reads again every page whose first reading trips --escalate-on (llm-ocr run: Extract, then
    Escalate into OUT/escalate, then Describe and Assemble use it)."""
    escalate_endpoint: str | None
    """Base URL serving --escalate-to (default: launch a second server with the server options)."""
    escalate_api_key: str | None
    """API key of --escalate-endpoint (default: --api-key; prefer LLM_OCR_ESCALATE_API_KEY)."""
    escalate_server_args: str | None
    """Extra arguments of the server launched for --escalate-to (default: --server-args)."""
    escalate_on: str
    """Signals of a first reading that send its page to the stronger model, comma-separated, of: error, empty,
    truncated, looped, repetition, missing-text, stray, garbled, short, verifier."""
    escalate_min_recall: float
    """missing-text: share of sampled text-layer lines a reading must contain."""
    escalate_min_dictionary: float
    """garbled: share of a reading's words of 3+ ASCII letters that must be English dictionary words."""
    escalate_min_length: float
    """short: share of the characters the page's ink (or text layer) suggests that a reading must hold."""
    escalate_verifier: str | None
    """URL of a verifier (POST JSON {image, text} -> {probability}) whose score is the verifier signal
    (docs/routes.md#a-verifier)."""
    escalate_verifier_threshold: float
    """verifier: a reading scored below this probability is escalated."""
    describe_prompt: str | None
    """Prompt sent with each figure crop (default: 'Describe this image in detail.', DeepSeek-OCR's own)."""
    describe_max_tokens: int
    """Most tokens one description may generate (capped by the server's context)."""
    describe_temperature: float
    """Sampling temperature of descriptions."""
    describe_model: str | None
    """Served model that writes descriptions (default: --model)."""
    describe_endpoint: str | None
    """OpenAI-compatible base URL of a separate captioning server (default: the job's endpoint)."""
    redescribe: bool
    """Also describe figures the OCR model already described in its page answer (olmOCR-2's alt text, Chandra's image
    alt); default: keep the model's own description."""
    describe_schema: str | None
    """JSON schema the answer must follow, as a file path/URL or inline JSON: enables structured output; the validated
    JSON goes to description_json and a readable form to description."""
    page_separator: str
    """Text between pages; \\n means a newline and {page} the number of the page that follows."""
    export_markdown: bool
    """Also write OUT/markdown/NAME.md with figures in OUT/markdown/figures/NAME/ (relative links)."""
    assemble_batch_pages: int
    """Pages held in memory at once (documents are read from storage in batches)."""
    chunks: bool
    """Also write each document as a DoclingDocument (OUT/docling/NAME.json) and its chunks
    (OUT/chunks/chunks-SSSSS-of-NNNNN.parquet), as llm-ocr export --chunks does, for this shard's documents once they
    are assembled. Needs pip install 'llm-ocr[docling]'."""
    chunker: Literal['hierarchical', 'hybrid']
    """docling-core's chunker of --chunks: hierarchical (one chunk per paragraph, table, list or picture, with its
    headings) or hybrid (those split and merged to at most --chunk-max-tokens tokens of --chunk-tokenizer)."""
    chunk_tokenizer: str | None
    """With --chunker hybrid: the Hugging Face tokenizer that counts tokens, a local folder or a Hub model name (the
    embedding model's)."""
    chunk_max_tokens: int | None
    """With --chunker hybrid: most tokens of a chunk, its headings included (default: the length --chunk-tokenizer
    states)."""
    page_furniture: Literal['keep', 'drop', 'tag']
    """Running headers, footers and page numbers in the assembled Markdown: keep, drop, or tag (an HTML comment <!--
    furniture: KIND --> before each). Always listed in the row's furniture column."""
    fields_schema: str | None
    """The fields to extract: a JSON Schema file (path or URL), inline JSON, or a pydantic model as
    package.module:Model. Also --schema."""
    classes: str | None
    """A classes file (YAML or JSON; or inline JSON): class name -> schema, file-name patterns and keywords; documents
    are classified first (rules, then the model), documents of no known class get class 'other'."""
    fields_from: Literal['markdown', 'images', 'both']
    """What the model reads: the assembled Markdown, the page images (a VLM), or both. Also --from."""
    fields_model: str | None
    """Served model that extracts fields (default: --model)."""
    fields_endpoint: str | None
    """OpenAI-compatible base URL of a separate server for fields (default: the job's endpoint)."""
    fields_api_key: str | None
    """API key of --fields-endpoint (default: --api-key; prefer LLM_OCR_FIELDS_API_KEY)."""
    fields_structured: Literal['auto', 'json_schema', 'json_object', 'instruction']
    """How the answer's shape is requested: json_schema (structured outputs), json_object (JSON mode), instruction (the
    prompt only); auto starts with json_schema and falls back when the endpoint refuses it. The answer is validated
    whatever the mode."""
    fields_max_tokens: int
    """Most tokens one answer may generate."""
    fields_max_input_tokens: int | None
    """Most tokens of document text one request carries; longer documents are split by page and the answers merged
    (default: what the server's context leaves after the answer)."""
    fields_pages_per_request: int
    """Page images one request carries with --from images/both (many servers take 1)."""
    fields_classify: Literal['auto', 'rules', 'model']
    """With --classes: rules then the model (auto), rules only (undecided: other), or the model only."""
    fields_prompt: str | None
    """Instruction sent before the schema (default: a generic one)."""
    fields_temperature: float
    """Sampling temperature of field requests."""
    fields_repair: bool
    """Send one repair request, showing the model its errors, when an answer is not valid."""
    export_jsonl: bool
    """Also write OUT/fields.jsonl: one JSON object per row."""
    export_csv: bool
    """Also write OUT/fields.csv: one line per row, lists as JSON."""
    request_timeout: float
    """Seconds one request may take once sent (a page can decode thousands of tokens)."""
    max_attempts: int
    """Attempts per request before the page is marked failed."""
    backoff_base: float
    """First retry delay in seconds; doubles per attempt, with jitter."""
    backoff_max: float
    """Longest delay between two attempts, in seconds."""
    dead_after: float
    """Stop the run when the endpoint has been unreachable for this many seconds with no success."""
    schema: str | None
    """The fields to extract: a JSON Schema file (path or URL), inline JSON, or a pydantic model as
    package.module:Model. Also --schema."""
