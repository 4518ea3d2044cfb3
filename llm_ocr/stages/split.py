"""The pieces of a page read again in halves while an answer runs out of tokens: the adaptive split.

A dense page is cut into pieces (tiles or bands, :mod:`llm_ocr.stages.tiled`; a long page into
segments, :mod:`llm_ocr.stages.segmented`) from an estimate of its text's tokens, which is a
first guess: a model may write more tokens per character of text than the guess (more markup,
another language, another layout). A piece whose answer runs to ``max_tokens`` without
repeating itself (:attr:`~llm_ocr.stages.attempts.Answer.long`: the loop watch saw no loop) is
therefore cut in two (:func:`~llm_ocr.sources.tiles.split_piece`: at a gutter, or between two
text lines) and both halves are read again, at once; and so on, until every piece's answer
fits, or a piece is a few text lines tall (:data:`~llm_ocr.sources.tiles.MIN_SPLIT_LINES`), or
the page has been read in :data:`MAX_PIECES` pieces. Only then is a piece kept as it ran out,
and the page's row is ``truncated``, with the reason. An answer that loops keeps the loop
policy (retried hotter, cut): it is not long, and cutting its piece would not help.

The answers that ran out are not thrown away from the accounting: their tokens and attempts
count in the row, beside those of the pieces read again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace

from llm_ocr.sources.segments import Segment
from llm_ocr.vlm.client import RequestFailed
from llm_ocr.vlm.families.base import AnswerLike, Reading

#: The most pieces one page is read in, splits included (each a request).
MAX_PIECES = 64

#: Cuts a piece (its image, its place on the page) in two: ``(halves, how)``, or ``([], why not)``.
Splitter = Callable[[bytes, Segment], tuple[list[Segment], str]]


@dataclass
class PieceReadings:
    """What reading a page's pieces produced: the pieces finally read, in page order (their
    index their position), each with its reading or failure; the answers of pieces that ran out
    and were read again in halves; and a line for every piece that ran out."""

    leaves: list[tuple[Segment, Reading | RequestFailed]] = field(default_factory=list)
    spent: list[AnswerLike] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: The pieces that ran out and could not be cut further (their notes say why).
    kept_long: int = 0


def ran_long(reading: Reading | RequestFailed) -> AnswerLike | None:
    """The answer of ``reading`` that ran to ``max_tokens`` without repeating itself, if any."""
    if isinstance(reading, RequestFailed):
        return None
    return next((a for a in reading.answers if getattr(a, "long", False)), None)


async def read_pieces(
    segments: list[Segment],
    images: list[bytes],
    *,
    read: Callable[[Segment, bytes], Awaitable[Reading | RequestFailed]],
    crop: Callable[[list[Segment]], Awaitable[list[bytes]]],
    split: Splitter | None,
    kind: str,
    max_pieces: int = MAX_PIECES,
    too_big: Callable[[Segment], str | None] | None = None,
) -> PieceReadings:
    """Read every piece (``read``, concurrently; the caller bounds how many at once) and, with
    ``split``, every piece whose answer ran out again in halves (``crop`` makes their images);
    see the module docstring. ``kind`` names a piece in the notes ("tile", "band", "segment").
    ``too_big`` says why a piece cannot be sent at all (its image and ``max_tokens`` exceed the
    server's context): such a piece is cut in two before it is read, when it can be."""
    out = PieceReadings()
    pieces = len(segments)

    async def halves_of(segment: Segment, image: bytes, label: str, why: str,
                        spent: Reading | None) -> list[tuple[Segment, Reading | RequestFailed]] | None:
        """The halves of a piece, read (None: it cannot be cut; ``why`` it is cut goes in the notes)."""
        nonlocal pieces
        assert split is not None
        where = f"{kind} {label} [{segment.top}:{segment.bottom}, {segment.left}:{segment.right}]"
        if pieces >= max_pieces:
            out.notes.append(f"{where} {why}, and the page is already read in {max_pieces} pieces: "
                             "its text up to there kept")
            return None
        halves, how = await asyncio.to_thread(split, image, segment)
        if len(halves) < 2:
            out.notes.append(f"{where} {why}, and is {how}: its text up to there kept")
            return None
        pieces += len(halves) - 1
        if spent is not None:
            out.spent.extend(spent.answers)
        out.notes.append(f"{where} {why}: {how}, both read again" if spent is not None else f"{where} {why}: {how}")
        crops = await crop(halves)
        parts = await asyncio.gather(
            *(one(half, crop_, f"{label}.{k + 1}") for k, (half, crop_) in enumerate(zip(halves, crops)))
        )
        return [leaf for part in parts for leaf in part]

    async def one(segment: Segment, image: bytes, label: str) -> list[tuple[Segment, Reading | RequestFailed]]:
        oversize = too_big(segment) if too_big is not None and split is not None else None
        if oversize is not None:
            cut = await halves_of(segment, image, label, oversize, None)
            if cut is not None:
                return cut
        reading = await read(segment, image)
        long = ran_long(reading) if split is not None else None
        if long is None or isinstance(reading, RequestFailed) or split is None:
            return [(segment, reading)]
        ran = f"ran to max_tokens ({long.result.completion_tokens} tokens) without repeating itself"
        cut = await halves_of(segment, image, label, ran, reading)
        if cut is None:
            out.kept_long += 1
            return [(segment, reading)]
        return cut

    parts = await asyncio.gather(*(one(s, image, str(s.index + 1)) for s, image in zip(segments, images)))
    leaves = [leaf for part in parts for leaf in part]
    out.leaves = [(replace(segment, index=i), reading) for i, (segment, reading) in enumerate(leaves)]
    return out
