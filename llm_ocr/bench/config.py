"""The settings of one ``llm-ocr bench`` run (light: the CLI builds its options from these
defaults without importing the benchmark itself)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from llm_ocr.engines.sim.timing import TimingModel


@dataclass
class BenchConfig:
    """One run's settings. The server defaults model a fast GPU serving DeepSeek-OCR so that a
    500-page run takes about 100 s (see docs/benchmarks.md, "The default workload and server", for how they were
    chosen)."""

    pages: int = 500
    #: The served model, whose family the simulator plays and whose recipe the client uses
    #: (None: DeepSeek-OCR, the default model).
    model: str | None = None
    image_format: str = "jpeg"
    workers: int | None = None  # None: one per core
    max_in_flight: int | None = None  # None: what the runner uses with a vLLM preset of `slots`
    # The simulated server.
    slots: int = 64
    instant: bool = False
    prefill_ms: float = 50.0
    decode_ms_per_token: float = 3.0
    load_slowdown: float = 2.0
    output_tokens_mean: float = 900.0
    output_tokens_sigma: float = 0.5
    loop_rate: float = 0.03
    tokens_per_char: float = 0.3
    max_model_len: int = 8192
    seed: int = 0
    # The client.
    max_tokens: int | None = 4096  # None: the family's own
    truncation_retries: int = 1
    dpi: float = 144.0
    long_side: int | None = None  # every page scaled to this longer side (the family's own when it sets one)
    cut_loops: bool = True  # stream and cut repetition loops (False: today's whole answers)
    max_page_aspect: float = 3.0  # pages longer than this are read in segments (0: whole)
    adaptive: bool = False  # no --max-in-flight: size it from /metrics, as with --endpoint
    servers: int = 1  # simulated GPUs, one server each, behind the client's dispatcher
    loop_repeat_rate: float = 1.0
    tile_dense_pages: bool = True  # read pages too long for one answer in tiles (False: whole, retried)
    pieces: Literal["auto", "off", "always"] = "auto"  # --pieces: auto, off (every page read whole) or always
    #: Rendered pages that may wait for a slot, longest first (0: input order; None: the default).
    look_ahead: int | None = None
    #: PDF pages estimated before rendering, the longest rendered first (0: input order; None: the default).
    estimate_ahead: int | None = None
    #: PDFs the simulator knows (answers from their text layer, crops with the text of their
    #: region): the dense pages of a workload. None: every page is synthetic.
    sim_corpus: str | None = None
    # Measurement.
    sample_interval: float = 0.1

    def timing(self) -> TimingModel:
        """The server's timing model (the same object the simulator builds from its flags)."""
        return TimingModel(
            slots=self.slots,
            prefill_ms=self.prefill_ms,
            decode_ms_per_token=self.decode_ms_per_token,
            load_slowdown=self.load_slowdown,
        )

    def server_args(self) -> list[str]:
        """Flags of ``python -m llm_ocr.engines.sim`` for this configuration."""
        args = [
            "--slots", str(self.slots),
            "--prefill-ms", str(self.prefill_ms),
            "--decode-ms-per-token", str(self.decode_ms_per_token),
            "--load-slowdown", str(self.load_slowdown),
            "--output-tokens-mean", str(self.output_tokens_mean),
            "--output-tokens-sigma", str(self.output_tokens_sigma),
            "--loop-rate", str(self.loop_rate),
            "--loop-repeat-rate", str(self.loop_repeat_rate),
            "--tokens-per-char", str(self.tokens_per_char),
            "--max-model-len", str(self.max_model_len),
            "--seed", str(self.seed),
        ]  # fmt: skip
        if self.instant:
            args.append("--instant")
        if self.sim_corpus:
            args += ["--corpus", self.sim_corpus, "--render-dpi", str(self.dpi)]
        return args
