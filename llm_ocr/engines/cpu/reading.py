"""From what the models read on an image to the engine's answers: a page's blocks (with its
figures remembered for Describe), and a figure crop's description."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from llm_ocr.vlm.grounding import scale_box

from .figure_memory import SEPARATOR, FigureFacts, FigureMemory, describe
from .figures import find_figures
from .layout import LayoutBlock, Line, has_word, order_blocks, page_blocks, rows, to_det

if TYPE_CHECKING:
    import numpy as np

    from .engine import EnginePool, OcrResult

def client_crop(page: np.ndarray, box: tuple[float, float, float, float]) -> np.ndarray:
    """The pixels the client will crop for a block written with ``box``: the markup carries
    :func:`to_det` of the box, and the client scales it back with ``scale_box``."""
    height, width = page.shape[:2]
    px = scale_box(to_det(box, width, height), width, height)
    if px is None:  # no area at this size: the client makes no figure of it either
        return page[0:0, 0:0]
    x1, y1, x2, y2 = px
    return page[y1:y2, x1:x2]


def text_of(lines: Sequence[Line]) -> str:
    """The text of some lines (a figure's inside) on one line: the blocks of their reading
    order joined by " · " (table cells row by row). Lines without a letter or digit are left
    out: in a figure they are the recogniser reading bars and markers as "_" or "■"."""
    parts: list[str] = []
    for block in order_blocks([l for l in lines if has_word(l)]):
        if block.label == "table":
            parts.extend(" ".join(l.text.strip() for l in row) for row in rows(block.lines))
        else:
            parts.append(block.text)
    return SEPARATOR.join(p for p in parts if p)


def page_answer_blocks(result: OcrResult, memory: FigureMemory | None, min_score: float) -> list[LayoutBlock]:
    """The page's blocks in reading order, figures included; each figure's caption and inside
    text are remembered in ``memory`` under the crop the client will make of it."""
    figures, body = find_figures(result.lines, result.regions, page=result.image, min_score=min_score)
    blocks = page_blocks(body, figures)
    if memory is not None and result.image is not None:
        for figure in figures:
            crop = client_crop(result.image, figure.box)
            if crop.size:
                memory.remember(crop, FigureFacts(figure.caption_text, text_of(figure.inside), figure.label))
    return blocks


def figure_answer(image: bytes, pool: EnginePool, memory: FigureMemory | None) -> tuple[str, OcrResult | None]:
    """The description of a figure crop: its caption and text as found on its page when the
    engine read that page (no OCR then), else the text read from the crop itself, its caption
    unknown. Returns the description and the OCR result when the crop had to be read."""
    from .engine import decode_image
    from .figure_memory import Recall

    bgr, width, height = decode_image(image)
    recall = memory.recall(bgr) if memory is not None else Recall(None)
    if recall.facts is not None:
        return describe(recall, "", (width, height)), None
    result = pool.read(image)
    return describe(recall, text_of(result.lines), (width, height)), result
