"""A page read in pieces: segments of a long page, tiles or bands of a dense one, halves cut again.

Most pages are read whole, in one request (:func:`llm_ocr.stages.extract.extract_page`). Two
shapes are not:

- **a long page** (longer than ``--max-page-aspect``, 1:3: a log sheet, a receipt, a scroll),
  which a model shrinks until its text is unreadable, is read in overlapping **segments** along
  its length;
- **a dense page** (an old newspaper page, a two-column paper set small), whose text is longer
  than one answer may hold, is read in **tiles** (a family whose answers box every block) or
  **bands** (one whose answers do not; a page with columns column by column).

A piece whose answer still runs out is cut in two and read again. One module per job:

- :mod:`.plan`    whether and how a page is cut (the tile plan, the splitters, what fits the context)
- :mod:`.cuts`    where: cuts between text lines and at gutters, found in the page's ink
- :mod:`.columns` the columns of a page read in bands, in reading order
- :mod:`.rate`    the answer tokens a page will need: the run's tokens per character, and
  whether an answer that ran out was reading its page
- :mod:`.read`    the :class:`~.read.Reader`: every piece asked at once, cut again while an
  answer runs out (the adaptive split)
- :mod:`.rest`    a tile's answer that ran out: its complete blocks kept, the rest read again
- :mod:`.images`  the images the pieces are sent as: cut from the page, or rendered from the source
- :mod:`.join`    the pieces' blocks joined, each once: segments, bands, tiles
- :mod:`.order`   the reading order of a tiled page's blocks (the XY-cut)
- :mod:`.row`     the page's one row: text, blocks, figures, status and cost
- :mod:`.cost`    the cost bound: a page's pieces against its whole-page reading

Every knob of the path is a field of :class:`llm_ocr.options.DenseOptions`, read where it is
used from those in force (:func:`llm_ocr.options.dense`: the run's ``--dense-option`` and
``LLM_OCR_DENSE_*``).

What runs in the render workers stays in :mod:`llm_ocr.sources` (that layer may not import a
stage): a long page's segments, planned and rendered with the page
(:mod:`llm_ocr.sources.segments`, :mod:`llm_ocr.sources.pieces`), and a page's text estimate
(:mod:`llm_ocr.sources.density`).
"""
