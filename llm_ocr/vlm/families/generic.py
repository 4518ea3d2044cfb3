"""The fallback for a model no recipe names: a plain instruction, its answer taken as Markdown.

It sends no vLLM-only field (the server may not be vLLM, or may not have a family's logits
processor loaded) and finds no figures (its answer has no boxes).
"""

from __future__ import annotations

from dataclasses import dataclass

from llm_ocr.vlm.families.base import Family, Outputs, Prompt, Rendering, Retries, Sampling, Serving
from llm_ocr.vlm.families.markup import dollars_to_brackets, markdown_table_to_html
from llm_ocr.vlm.layout import LayoutBuilder, PageLayout
from llm_ocr.vlm.view import View

GENERIC_PROMPT = "Convert this page to markdown. Output only the markdown."


@dataclass(frozen=True)
class MarkdownFamily(Family):
    """A family whose answer is plain Markdown: one block without a box, tables and math
    rewritten to the common forms (HTML tables, ``\\[ \\]`` math)."""

    def parse(self, text: str, *, width: int, height: int, page: int) -> PageLayout:
        builder = LayoutBuilder(page, width, height)
        builder.text("text", [], normalise_markdown(text))
        return builder.build()

    def write(self, view: View, kind: str = "page", prompt: str | None = None) -> str:
        """The page as Markdown, headings with ``#``; figures left out (no boxes to give)."""
        return "\n\n".join(e.markdown() for e in view.elements if e.text)


def normalise_markdown(text: str) -> str:
    """A Markdown answer in the common forms: pipe tables as HTML, ``$`` math as brackets;
    a whole answer fenced as a code block is unwrapped."""
    body = text.strip()
    if body.startswith("```") and body.endswith("```") and body.count("```") == 2:
        body = body.split("\n", 1)[1].rsplit("```", 1)[0] if "\n" in body else ""
    return dollars_to_brackets(markdown_table_to_html(body))


GENERIC = MarkdownFamily(
    dense="bands",  # text without boxes: bands joined by the text their overlap repeats
    name="generic",
    title="Any other model",
    patterns=(),
    models=(),
    prompt=Prompt(GENERIC_PROMPT),
    sampling=Sampling(temperature=0.0),
    retries=Retries((0.0, 0.2, 0.4, 0.6, 0.8, 1.0)),
    rendering=Rendering(dpi=144.0, image_format="jpeg"),
    serving=Serving(args=(), context=8192),
    outputs=Outputs(boxes=False, figure_crops=False, html_tables=False, math=False,
                    notes="whatever the model writes, taken as Markdown"),
)
