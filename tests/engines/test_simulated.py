"""The simulated DeepSeek-OCR server, exercised as a real subprocess through the openai client."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import json
import math
import re
import time
from collections import Counter
from pathlib import Path
from typing import Any

import jsonschema
import openai
import pypdfium2 as pdfium
import pytest
from openai import AsyncOpenAI
from PIL import Image, ImageDraw

from llm_ocr.engines.frame.protocol import image_prompt_tokens
from llm_ocr.engines.sim.cli import build_parser
from llm_ocr.engines.sim.server import per_token_seconds
from llm_ocr.serving.vllm.prometheus import parse_prometheus
from llm_ocr.testing import SimulatedServer, SimulatedServerError
from tests.waiting import HANG_GUARD_S, wait_until

MODEL = "deepseek-ai/DeepSeek-OCR"
DOC_PROMPT = "<|grounding|>Convert the document to markdown."
# The recipe's per-request fields (docs/facts.md#deepseek-ocr).
RECIPE = {
    "skip_special_tokens": False,
    "vllm_xargs": {"ngram_size": 30, "window_size": 90, "whitelist_token_ids": [128821, 128822]},
}
TAG = re.compile(r"<\|ref\|>(.*?)<\|/ref\|><\|det\|>(.*?)<\|/det\|>", re.S)

TITLE = "Annual Survey of Coastal Bird Populations"
PARAGRAPHS_1 = [
    ("Observers counted gulls terns and plovers along forty kilometres of shoreline during the "
     "spring migration window of the survey year, repeating each transect at dawn and at dusk."),
    ("Counts were higher on sheltered beaches than on exposed headlands, and the difference grew "
     "after storms, when birds gathered in lagoons behind the dunes for several days."),
]
PARAGRAPHS_2 = [
    ("Methods appendix: volunteers recorded weather, tide height, disturbance by walkers and dogs, "
     "and the time spent on every transect segment in standard field notebooks."),
    ("Data entry happened within a week, and two reviewers checked every sheet against photographs "
     "taken at the site before the records entered the regional database."),
    ("Uncertain identifications were flagged rather than dropped so that later analyses could "
     "decide how to treat them consistently across the whole monitoring programme."),
]
# The figure on page 1, in PDF points (origin bottom-left): x, y, width, height.
FIGURE = (150.0, 120.0, 300.0, 200.0)
# The figure on page 2 is drawn through a Form XObject (100x50 at the form's origin, placed
# with translate(300, 100) and scale(2)), so its bounds need the form's matrix.
FORM_FIGURE = (300.0, 100.0, 200.0, 100.0)


# ---------------------------------------------------------------------------------------------
# Fixtures and helpers


def _make_pdf(path: Path) -> None:
    from reportlab.lib.pagesizes import letter
    from reportlab.lib.styles import getSampleStyleSheet
    from reportlab.lib.utils import ImageReader
    from reportlab.pdfgen import canvas
    from reportlab.platypus import Paragraph

    width, height = letter
    style = getSampleStyleSheet()["BodyText"]
    c = canvas.Canvas(str(path), pagesize=letter)
    c.setFont("Helvetica-Bold", 20)
    c.drawString(72, height - 80, TITLE)
    y = height - 110
    for text in PARAGRAPHS_1:
        p = Paragraph(text, style)
        _, h = p.wrapOn(c, width - 144, height)
        p.drawOn(c, 72, y - h)
        y -= h + 14
    picture = Image.new("RGB", (300, 200), (30, 90, 200))
    ImageDraw.Draw(picture).ellipse((60, 40, 240, 160), fill=(240, 200, 40))
    c.drawImage(ImageReader(picture), *FIGURE)
    c.showPage()
    y = height - 80
    for text in PARAGRAPHS_2:
        p = Paragraph(text, style)
        _, h = p.wrapOn(c, width - 144, height)
        p.drawOn(c, 72, y - h)
        y -= h + 14
    c.beginForm("figure2")
    c.drawImage(ImageReader(Image.new("RGB", (100, 50), (20, 160, 60))), 0, 0, 100, 50)
    c.endForm()
    c.saveState()
    c.translate(FORM_FIGURE[0], FORM_FIGURE[1])
    c.scale(2, 2)
    c.doForm("figure2")
    c.restoreState()
    c.showPage()
    c.save()


def render_jpeg(pdf_path: Path, index: int, dpi: int = 144) -> tuple[bytes, int, int]:
    """A PDF page as the client sends it: rendered at ``dpi`` and JPEG-encoded."""
    pdf = pdfium.PdfDocument(str(pdf_path))
    try:
        img = pdf[index].render(scale=dpi / 72).to_pil()
    finally:
        pdf.close()
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=90)
    return buf.getvalue(), img.width, img.height


def picture_bytes(seed: int, colour: tuple[int, int, int] = (200, 30, 30), size: tuple[int, int] = (800, 600)) -> bytes:
    """A small PNG that is not any corpus page."""
    img = Image.new("RGB", size, colour)
    d = ImageDraw.Draw(img)
    d.rectangle((10 + seed, 10, 60 + seed, 60), fill=(255, 255, 255))
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


def body_for(image: bytes, prompt: str = DOC_PROMPT, mime: str = "image/jpeg") -> list[dict[str, Any]]:
    uri = f"data:{mime};base64,{base64.b64encode(image).decode()}"
    return [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": uri}}, {"type": "text", "text": prompt}]}]


async def ocr(
    base_url: str,
    image: bytes,
    prompt: str = DOC_PROMPT,
    mime: str = "image/jpeg",
    max_tokens: int = 4096,
    extra: dict[str, Any] | None = None,
    timeout: float = HANG_GUARD_S,
    model: str = MODEL,
    **kw: Any,
) -> Any:
    """One chat completion with the recipe body through the openai client."""
    client = AsyncOpenAI(base_url=base_url, api_key="EMPTY", max_retries=0, timeout=timeout)
    try:
        body = json.loads(json.dumps(RECIPE))
        body.update(extra or {})
        return await client.chat.completions.create(
            model=model,
            messages=body_for(image, prompt, mime),  # type: ignore[arg-type]
            max_tokens=max_tokens,
            temperature=0,
            extra_body=body,
            **kw,
        )
    finally:
        await client.close()


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def words(text: str) -> list[str]:
    return re.findall(r"[A-Za-z0-9]+", text.lower())


@pytest.fixture(scope="module")
def pdf_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("corpus")
    (folder / "nested").mkdir()
    path = folder / "nested" / "survey.pdf"
    _make_pdf(path)
    return path


@pytest.fixture(scope="module")
def sim(pdf_path: Path) -> Any:
    with SimulatedServer("--prefill-ms", "0", corpus=pdf_path.parent.parent) as server:
        yield server


@pytest.fixture(scope="module")
def lenient(pdf_path: Path) -> Any:
    """A server that answers requests straying from the recipe as vLLM would (no 400)."""
    with SimulatedServer("--prefill-ms", "0", "--lenient", corpus=pdf_path.parent.parent) as server:
        yield server


@pytest.fixture(autouse=True)
def _no_leftover_faults(request: pytest.FixtureRequest) -> Any:
    yield
    for name in ("sim", "lenient"):
        if name in request.fixturenames:
            request.getfixturevalue(name).clear_faults()


# ---------------------------------------------------------------------------------------------
# Plain endpoints


def test_models_health_and_metrics_shape(sim: SimulatedServer) -> None:
    assert sim.health() == 200
    models = sim.call_json("GET", "/v1/models")
    assert models["object"] == "list"
    (m,) = models["data"]
    assert m["id"] == MODEL and m["object"] == "model" and m["owned_by"] and m["max_model_len"] == 8192
    text = sim.metrics_text()
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                 "vllm:generation_tokens_total", "vllm:prompt_tokens_total"):
        assert re.search(rf'^{name}{{engine="0",model_name="{re.escape(MODEL)}"}} ', text, re.M), name
    assert 'vllm:request_success_total{finished_reason="stop",engine="0"' in text


def test_parse_prometheus_keys_series_and_sums() -> None:
    text = (
        "# HELP x a counter\n# TYPE x counter\n"
        'x_total{b="2",a="1"} 3.0\n'
        'x_total{a="1",b="3"} 4\n'
        "plain 7 1700000000\n"
        "broken line here\n"
    )
    parsed = parse_prometheus(text)
    assert parsed['x_total{a="1",b="2"}'] == 3.0
    assert parsed["x_total"] == 7.0
    assert parsed["plain"] == 7.0
    assert "broken" not in parsed


def test_parser_options_and_token_model() -> None:
    args = build_parser().parse_args(["--served-model-name", "a", "b", "--slots", "3", "--instant"])
    assert args.served_model_names == ["a", "b"] and args.slots == 3 and args.instant
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--error-rate", "1.5"])
    # Per-token time grows linearly with the running share of the slots.
    assert per_token_seconds(10, 1.0, 0, 4) == pytest.approx(0.010)
    assert per_token_seconds(10, 1.0, 4, 4) == pytest.approx(0.020)
    # Gundam mode: 273 tokens for a small image; a 144 DPI Letter page uses 2x3 crops of 640.
    assert image_prompt_tokens(600, 400) == 273
    assert image_prompt_tokens(1224, 1584) == 273 + 30 * 21


# ---------------------------------------------------------------------------------------------
# Content


def test_known_pdf_page_grounding_matches_text_layer_and_figure(sim: SimulatedServer, pdf_path: Path) -> None:
    for index, paragraphs, title in ((0, PARAGRAPHS_1, TITLE), (1, PARAGRAPHS_2, None)):
        jpeg, width, height = render_jpeg(pdf_path, index)
        resp = run(ocr(sim.base_url, jpeg))
        choice = resp.choices[0]
        assert choice.finish_reason == "stop"
        text = choice.message.content
        blocks = TAG.findall(text)
        assert blocks, text[:300]
        for _, det in blocks:
            box = json.loads(det)[0]
            assert all(isinstance(v, int) and 0 <= v <= 999 for v in box) and box[0] < box[2] and box[1] < box[3]
        expected = Counter(words(" ".join(([title] if title else []) + paragraphs)))
        got = Counter(words(TAG.sub(" ", text)))
        recall = sum((expected & got).values()) / sum(expected.values())
        assert recall >= 0.99, (recall, text)
        labels = [label for label, _ in blocks]
        assert labels.count("text") == len(paragraphs)  # one block per paragraph
        if title:
            assert labels[0] == "title" and text.split("\n")[1] == f"# {TITLE}"
        else:
            assert "title" not in labels
        (det,) = [d for label, d in blocks if label == "image"]
        got_px = [int(v / 999 * s) for v, s in zip(json.loads(det)[0], (width, height) * 2)]
        fx, fy, fw, fh = FIGURE if title else FORM_FIGURE
        scale = 144 / 72
        want = (fx * scale, (792 - fy - fh) * scale, (fx + fw) * scale, (792 - fy) * scale)
        assert all(abs(g - w) <= 3 for g, w in zip(got_px, want)), (got_px, want)
        # Reading order: the figure sits below the paragraphs.
        assert labels.index("image") == len(labels) - 1
    stats = sim.stats()
    assert stats["known_pages"] >= 2 and stats["corpus_pages"] == 2


def test_page_matching_across_resolutions_and_not_for_blank_pages(sim: SimulatedServer, pdf_path: Path) -> None:
    pdf = pdfium.PdfDocument(str(pdf_path))
    try:
        img = pdf[0].render(scale=100 / 72).to_pil()
    finally:
        pdf.close()
    buf = io.BytesIO()
    img.save(buf, "PNG")
    text = run(ocr(sim.base_url, buf.getvalue(), mime="image/png")).choices[0].message.content
    assert f"# {TITLE}" in text
    # A blank page of the same shape must not "match" a mostly white known page.
    blank = io.BytesIO()
    page = Image.new("RGB", img.size, "white")
    ImageDraw.Draw(page).text((img.width // 2, img.height - 60), "- 7 -", fill=(0, 0, 0))  # a page number
    page.save(blank, "PNG")
    before = sim.stats()["synthetic_pages"]
    text = run(ocr(sim.base_url, blank.getvalue(), mime="image/png")).choices[0].message.content
    assert TITLE not in text and sim.stats()["synthetic_pages"] == before + 1
    assert "known_page" not in sim.requests()[-1]


def test_free_ocr_is_plain_text_of_the_page(sim: SimulatedServer, pdf_path: Path) -> None:
    jpeg, _, _ = render_jpeg(pdf_path, 1)
    text = run(ocr(sim.base_url, jpeg, prompt="<image>\nFree OCR.")).choices[0].message.content
    assert "<|ref|>" not in text and "<|det|>" not in text
    assert text.split("\n\n")[0] == PARAGRAPHS_2[0]


def test_synthetic_page_is_deterministic_per_image(sim: SimulatedServer) -> None:
    a, b = picture_bytes(1), picture_bytes(2)
    r1 = run(ocr(sim.base_url, a, mime="image/png")).choices[0].message.content
    r2 = run(ocr(sim.base_url, a, mime="image/png")).choices[0].message.content
    r3 = run(ocr(sim.base_url, b, mime="image/png")).choices[0].message.content
    assert r1 == r2 and r1 != r3
    labels = [label for label, _ in TAG.findall(r1)]
    assert labels[0] == "title" and 2 <= labels.count("text") <= 5
    # OCR this image gets the same layout without Markdown headings.
    r4 = run(ocr(sim.base_url, a, mime="image/png", prompt="<|grounding|>OCR this image.")).choices[0].message.content
    assert [label for label, _ in TAG.findall(r4)] == labels and "\n# " not in r4


def test_description_names_size_and_colour(sim: SimulatedServer) -> None:
    img = picture_bytes(0, colour=(30, 60, 200), size=(640, 480))
    for prompt in ("Describe this image in detail.", "Parse the figure.", "What is this?"):
        text = run(ocr(sim.base_url, img, mime="image/png", prompt=prompt)).choices[0].message.content
        assert "640x480" in text and "blue" in text and "<|ref|>" not in text


def test_default_skip_special_tokens_drops_grounding_tags(lenient: SimulatedServer, pdf_path: Path) -> None:
    # Without skip_special_tokens=false vLLM strips the (special) grounding tags: the client
    # must send the recipe's field, and this shows when it does not.
    jpeg, _, _ = render_jpeg(pdf_path, 1)
    text = run(ocr(lenient.base_url, jpeg, extra={"skip_special_tokens": True})).choices[0].message.content
    assert "<|ref|>" not in text and re.search(r"^text\[\[\d+, \d+, \d+, \d+\]\]$", text, re.M)


@pytest.mark.parametrize(
    "extra, fragment",
    [
        ({"skip_special_tokens": True}, "skip_special_tokens must be false"),
        ({"vllm_xargs": None}, "vllm_xargs must be"),
        ({"vllm_xargs": {"ngram_size": 20, "window_size": 50}}, "vllm_xargs must be"),
        ({"top_p": 0.5}, "sets no top_p"),
    ],
)
def test_a_page_request_that_strays_from_the_recipe_is_refused(
    sim: SimulatedServer, extra: dict[str, Any], fragment: str
) -> None:
    before = sim.stats()["recipe_refused"]
    with pytest.raises(openai.BadRequestError, match=fragment):
        run(ocr(sim.base_url, picture_bytes(4), mime="image/png", extra=extra))
    assert sim.stats()["recipe_refused"] == before + 1
    # A figure description (another prompt, no grounding) is not a page request: served.
    described = run(ocr(sim.base_url, picture_bytes(4), "Describe this image in detail.", mime="image/png", extra=extra))
    assert described.choices[0].message.content


def test_max_tokens_truncates_with_length(sim: SimulatedServer) -> None:
    resp = run(ocr(sim.base_url, picture_bytes(3), mime="image/png", max_tokens=20))
    assert resp.choices[0].finish_reason == "length"
    assert resp.usage.completion_tokens == 20
    assert len(resp.choices[0].message.content) == math.floor(20 / 0.3)
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + 20


SCHEMA = {
    "type": "object",
    "properties": {
        "caption": {"type": "string", "maxLength": 40},
        "kind": {"enum": ["chart", "photo", "diagram"]},
        "count": {"type": "integer", "minimum": 3, "maximum": 9},
        "score": {"type": "number", "exclusiveMinimum": 0.5, "maximum": 1},
        "has_text": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2},
        "parts": {"type": "array", "items": {"$ref": "#/$defs/Part"}},
        "note": {"anyOf": [{"type": "string", "minLength": 5}, {"type": "null"}]},
    },
    "required": ["caption", "kind", "count", "score", "has_text", "tags", "parts"],
    "additionalProperties": False,
    "$defs": {
        "Part": {
            "type": "object",
            "properties": {"name": {"type": "string"}, "x": {"type": "integer", "multipleOf": 7, "minimum": 1}},
            "required": ["name", "x"],
        }
    },
}


def test_structured_output_validates_against_schema(sim: SimulatedServer) -> None:
    img = picture_bytes(4)
    for extra in (
        {"structured_outputs": {"json": SCHEMA}},
        {"response_format": {"type": "json_schema", "json_schema": {"name": "fig", "schema": SCHEMA}}},
    ):
        text = run(ocr(sim.base_url, img, mime="image/png", prompt="Describe this image in detail.", extra=extra))
        value = json.loads(text.choices[0].message.content)
        jsonschema.validate(value, SCHEMA)
        assert value["count"] == 3 and len(value["tags"]) == 2 and value["parts"][0]["x"] % 7 == 0
    obj = run(ocr(sim.base_url, img, mime="image/png", prompt="Parse the figure.",
                  extra={"response_format": {"type": "json_object"}}))
    assert isinstance(json.loads(obj.choices[0].message.content), dict)
    assert sim.stats()["prompt_kinds"]["structured"] >= 2


# ---------------------------------------------------------------------------------------------
# Validation


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        ({"vllm_xargs": {"ngram_size": "30", "window_size": 90}}, "ngram_size"),
        ({"vllm_xargs": {"ngram_size": 30, "window_size": 90.0}}, "window_size"),
        ({"vllm_xargs": {"ngram_size": 30, "whitelist_token_ids": "128821"}}, "whitelist_token_ids"),
        ({"vllm_xargs": {"ngram_size": 30, "whitelist_token_ids": ["128821"]}}, "whitelist_token_ids"),
        ({"stream": False, "max_tokens": 8000}, "maximum context length is 8192"),
    ],
)
def test_bad_requests_get_400(sim: SimulatedServer, extra: dict[str, Any], fragment: str) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        run(ocr(sim.base_url, picture_bytes(5), mime="image/png", extra=extra))
    assert info.value.status_code == 400
    assert fragment in info.value.message
    assert isinstance(info.value.body, dict) and info.value.body["code"] == 400


def test_wrong_model_gets_404_openai_error(sim: SimulatedServer) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        run(ocr(sim.base_url, picture_bytes(5), mime="image/png", model="deepseek-ai/Nope"))
    body = info.value.body
    assert isinstance(body, dict) and body["type"] == "NotFoundError" and "does not exist" in body["message"]


@pytest.mark.parametrize(
    "messages",
    [
        # (A text-only request is answered, as vLLM answers one: see tests/engines/test_sim_fields.py.)
        [{"role": "user", "content": [{"type": "text", "text": "Free OCR."},
                                      {"type": "image_url", "image_url": {"url": "https://x/y.png"}}]}],
        [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}],
        [{"role": "user", "content": [{"type": "text", "text": "Free OCR."},
                                      {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                                      {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}],
        [{"role": "user", "content": [{"type": "text", "text": "Free OCR."},
                                      {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}],
    ],
    ids=["http-url", "no-text", "two-images", "not-an-image"],
)
def test_malformed_messages_get_400(sim: SimulatedServer, messages: list[dict[str, Any]]) -> None:
    status, data = sim.call("POST", "/v1/chat/completions", {"model": MODEL, "messages": messages})
    assert status == 400, data
    err = json.loads(data)["error"]
    assert set(err) >= {"message", "type", "code"} and err["code"] == 400


def test_request_log_redacts_images_and_records_ignored_fields(sim: SimulatedServer) -> None:
    img = picture_bytes(7)
    run(ocr(sim.base_url, img, mime="image/png", extra={"guided_json": {"type": "object"}}))
    raw = sim.request_log.read_text()  # type: ignore[union-attr]
    assert ";base64," not in raw
    last = sim.requests()[-1]
    assert last["status"] == 200 and last["outcome"] == "ok"
    assert last["ignored_fields"] == ["guided_json"]
    part = last["body"]["messages"][0]["content"][0]["image_url"]["url"]
    assert part == {"data_uri": "image/png", "sha256": hashlib.sha256(img).hexdigest(), "bytes": len(img)}
    assert last["body"]["vllm_xargs"] == RECIPE["vllm_xargs"] and last["body"]["skip_special_tokens"] is False


# ---------------------------------------------------------------------------------------------
# Faults


def test_fault_error_reset_empty_untagged(sim: SimulatedServer, pdf_path: Path) -> None:
    img = picture_bytes(8)
    sim.inject("error", status=503)
    with pytest.raises(openai.APIStatusError) as info:
        run(ocr(sim.base_url, img, mime="image/png"))
    assert info.value.status_code == 503 and info.value.body["code"] == 503  # type: ignore[index]

    sim.inject("reset")
    with pytest.raises(openai.APIConnectionError):
        run(ocr(sim.base_url, img, mime="image/png"))

    sim.inject("empty")
    resp = run(ocr(sim.base_url, img, mime="image/png"))
    assert resp.choices[0].message.content == "" and resp.choices[0].finish_reason == "stop"

    jpeg, _, _ = render_jpeg(pdf_path, 1)
    sim.inject("untagged")
    text = run(ocr(sim.base_url, jpeg)).choices[0].message.content
    assert "<|ref|>" not in text and PARAGRAPHS_2[1] in text

    # The queue is used up: the next request is normal again.
    assert TAG.search(run(ocr(sim.base_url, img, mime="image/png")).choices[0].message.content)
    applied = sim.stats()["faults_applied"]
    assert all(applied.get(k, 0) >= 1 for k in ("error", "reset", "empty", "untagged"))
    outcomes = [r["outcome"] for r in sim.requests()[-5:]]
    assert outcomes == ["error", "reset", "ok", "ok", "ok"]


def _period(text: str, span: int = 1500, longest: int = 2000) -> int | None:
    """The smallest p such that the last ``span`` characters repeat the ``p`` before them."""
    for p in range(1, longest):
        if text[-span:] == text[-span - p : -p]:
            return p
    return None


def test_fault_loop_repeats_until_max_tokens(lenient: SimulatedServer) -> None:
    sim = lenient
    sim.inject("loop", count=3)
    img = picture_bytes(9)
    resp = run(ocr(sim.base_url, img, mime="image/png", max_tokens=1500))
    text = resp.choices[0].message.content
    assert resp.choices[0].finish_reason == "length" and resp.usage.completion_tokens == 1500
    assert text.startswith("<|ref|>title<|/ref|>")
    # The recipe turns vLLM's n-gram processor on (window 90 tokens): only a longer unit can
    # loop past it, so the simulated loop repeats a table row of more than 90 tokens.
    period = _period(text)
    assert period is not None and period * 0.3 > 90 and "<tr>" in text[-period:]
    # Without the processor a short phrase loops, as DeepSeek-OCR does unguarded.
    short = run(ocr(sim.base_url, img, mime="image/png", max_tokens=1500, extra={"vllm_xargs": None}))
    short_period = _period(short.choices[0].message.content, span=300, longest=200)
    assert short_period is not None and short_period * 0.3 < 30
    # Counters: one "length" success per loop.
    before = sim.metrics()['vllm:request_success_total{engine="0",finished_reason="length",model_name="' + MODEL + '"}']
    run(ocr(sim.base_url, img, mime="image/png", max_tokens=600))
    after = sim.metrics()['vllm:request_success_total{engine="0",finished_reason="length",model_name="' + MODEL + '"}']
    assert after == before + 1


def test_a_rambling_weak_model_writes_other_text_unrepeated_until_max_tokens(pdf_path: Path) -> None:
    """--ramble-rate: the weak model of issue #47's cascade, whose answers ran long without
    repeating and were not the page's text. At rate 1 every image rambles, a crop as well."""
    from llm_ocr.engines.sim.content import word_recall
    from llm_ocr.runners.escalation import dictionary_share
    from llm_ocr.vlm.loops import LoopWatch

    jpeg, width, height = render_jpeg(pdf_path, 1)
    crop = io.BytesIO()
    Image.open(io.BytesIO(jpeg)).crop((0, 0, width, height // 2)).save(crop, "JPEG", quality=90)
    with SimulatedServer("--instant", "--ramble-rate", "1", corpus=pdf_path.parent.parent) as server:
        answers = [run(ocr(server.base_url, image, max_tokens=1500)) for image in (jpeg, crop.getvalue())]
        stats = server.stats()
    truth = " ".join(PARAGRAPHS_2)
    for resp in answers:
        text = resp.choices[0].message.content
        assert resp.choices[0].finish_reason == "length" and resp.usage.completion_tokens == 1500
        assert word_recall(truth, text) < 0.2  # not the page's text ...
        share = dictionary_share(text)
        assert share is not None and share[1] > 0.9  # ... but English words, not garbled ones
        watch = LoopWatch()
        assert watch.feed(text) is None and watch.finish() is None  # never a loop: it does not repeat
    assert stats["faults_applied"] == {"ramble": 2}


def test_fault_bad_boxes(sim: SimulatedServer) -> None:
    sim.inject("bad_boxes")
    text = run(ocr(sim.base_url, picture_bytes(10), mime="image/png", max_tokens=7000)).choices[0].message.content
    dets = re.findall(r"<\|det\|>(.*?)<\|/det\|>", text, re.S)
    numbers = [int(v) for v in re.findall(r"-?\d+", " ".join(dets)) if v.lstrip("-").isdigit()]
    assert max(numbers) > 999 and min(numbers) < 0
    assert "[[800, 900, 100, 50]]" in text and "[[a, b, c, d]]" in text
    assert max(d.count("[") for d in dets) > 1000


def test_fault_hang_until_client_gives_up(sim: SimulatedServer) -> None:
    sim.inject("hang")  # an hour: the client's timeout is what ends it
    with pytest.raises(openai.APITimeoutError):
        run(ocr(sim.base_url, picture_bytes(11), mime="image/png", timeout=0.5))
    # The server is still serving, and the hung handler was cancelled with the connection.
    assert run(ocr(sim.base_url, picture_bytes(11), mime="image/png")).choices[0].finish_reason == "stop"
    hung = wait_until(lambda: [r for r in sim.requests() if r.get("outcome") == "hang"], "the hung request was logged")
    assert hung[0]["status"] is None


def test_fault_api_rejects_unknown_kind(sim: SimulatedServer) -> None:
    with pytest.raises(SimulatedServerError):
        sim.inject("meteor")


def test_fault_crash_exits_process_with_code_1() -> None:
    with SimulatedServer("--instant", request_log=False) as server:
        server.inject("crash")
        with pytest.raises(openai.APIConnectionError):
            run(ocr(server.base_url, picture_bytes(12), mime="image/png", timeout=HANG_GUARD_S))
        assert server.wait_exit(HANG_GUARD_S) == 1
        assert "crash" in server.stderr_tail()


def test_a_poison_page_crashes_the_server_each_time_up_to_crash_times(pdf_path: Path, tmp_path: Path) -> None:
    page1, page2 = render_jpeg(pdf_path, 0)[0], render_jpeg(pdf_path, 1)[0]
    ledger = tmp_path / "crashes.txt"
    args = ("--instant", "--crash-on-page", "survey.pdf:2", "--crash-times", "2", "--crash-ledger", str(ledger))
    for incarnation in (1, 2, 3):
        with SimulatedServer(*args, corpus=pdf_path, request_log=False) as server:
            assert run(ocr(server.base_url, page1)).choices[0].finish_reason == "stop"  # page 1 is fine
            if incarnation < 3:
                with pytest.raises(openai.APIConnectionError):
                    run(ocr(server.base_url, page2, timeout=HANG_GUARD_S))
                assert server.wait_exit(HANG_GUARD_S) == 1
                assert "page survey.pdf:2 is poison" in server.stderr_tail()
            else:  # crashed twice across restarts: --crash-times is spent, the page is answered
                assert "Methods appendix" in run(ocr(server.base_url, page2)).choices[0].message.content
    assert ledger.read_text().splitlines() == ["survey.pdf:2", "survey.pdf:2"]


def test_crash_times_without_a_ledger_is_refused() -> None:
    from llm_ocr.engines.sim.cli import build_parser, config_from_args

    with pytest.raises(SystemExit, match="--crash-ledger"):
        config_from_args(build_parser().parse_args(["--crash-on-page", "a.pdf:1", "--crash-times", "1"]))
    with pytest.raises(SystemExit):  # argparse: FILE:PAGE with a page from 1
        build_parser().parse_args(["--crash-on-page", "a.pdf:0"])


def test_sigterm_stops_promptly_with_requests_in_flight() -> None:
    import threading

    errors: list[BaseException] = []

    def client(i: int) -> None:
        try:
            run(ocr(server.base_url, picture_bytes(i), mime="image/png"))
        except openai.APIConnectionError as exc:
            errors.append(exc)

    # Requests that would take an hour (a hang, a prefill): a stop that waited for them would
    # not end before the SIGKILL after stop()'s grace, and the exit code would say so. No
    # stopwatch: a loaded machine slows the stop, not the verdict.
    server = SimulatedServer("--slots", "1", "--prefill-ms", "3600000", request_log=False).start()
    try:
        server.inject("hang")
        threads = [threading.Thread(target=client, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        wait_until(lambda: server.stats()["waiting"] >= 1, "one request hung, one running, one waiting")
        assert server.stop(grace=HANG_GUARD_S) == 0
    finally:
        server.stop()
    for t in threads:
        t.join(HANG_GUARD_S)
    assert len(errors) == 3


def test_random_faults_are_reproducible_with_seed_and_startup_delay() -> None:
    async def pattern(base_url: str) -> list[str]:
        out = []
        for i in range(12):
            try:
                resp = await ocr(base_url, picture_bytes(i), mime="image/png", timeout=HANG_GUARD_S)
                out.append("loop" if resp.choices[0].finish_reason == "length" else "ok")
            except openai.APIStatusError as exc:
                out.append(str(exc.status_code))
            except openai.APIConnectionError:
                out.append("reset")
        return out

    args = ("--instant", "--error-rate", "0.3", "--reset-rate", "0.3", "--loop-rate", "0.5", "--seed", "7")
    # Starting up until the test ends it (POST /sim/ready), not for a stretch a loaded machine
    # could outlast before the first check.
    with SimulatedServer(*args, "--startup-delay", "3600", wait_ready=False) as server:
        assert server.health() == 503
        status, _ = server.call("POST", "/v1/chat/completions", {"model": MODEL, "messages": []})
        assert status == 503
        server.end_startup()
        wait_until(lambda: server.health() == 200, "the server is ready")
        first = run(pattern(server.base_url))
    with SimulatedServer(*args) as server:
        second = run(pattern(server.base_url))
        # A page that loops loops again on retry (temperature 0), unlike transient errors.
        looped = first.index("loop")
        again = run(ocr(server.base_url, picture_bytes(looped), mime="image/png", timeout=HANG_GUARD_S))
        assert again.choices[0].finish_reason == "length"
    assert first == second
    assert {"ok", "500", "reset", "loop"} <= set(first)


# ---------------------------------------------------------------------------------------------
# Concurrency


def test_slots_queue_requests_and_the_metrics_show_them() -> None:
    # Requests an hour long hold both slots: once the server counts 2 running and 4 waiting,
    # however slow the machine, /metrics must say so; when the clients leave, the slots free.
    # (Six 200 ms requests and a poller of /metrics had to catch the queue inside a window of
    # about 0.4 s, which a fresh clone's run on a busy machine missed on 2026-11-27.)
    def queue(server: SimulatedServer) -> tuple[float, float]:
        m = server.metrics()
        return m["vllm:num_requests_running"], m["vllm:num_requests_waiting"]

    async def held(server: SimulatedServer) -> dict[str, Any]:
        asks = [asyncio.ensure_future(ocr(server.base_url, picture_bytes(i), mime="image/png")) for i in range(6)]
        try:
            await asyncio.to_thread(wait_until, lambda: queue(server) == (2, 4), "2 running and 4 waiting")
            return server.stats()
        finally:
            for ask in asks:
                ask.cancel()
            await asyncio.gather(*asks, return_exceptions=True)

    with SimulatedServer("--slots", "2", "--prefill-ms", "3600000", "--load-slowdown", "0") as server:
        stats = run(held(server))
        wait_until(lambda: queue(server) == (0, 0), "the slots freed once the clients left")
    assert stats["max_running"] == 2 and stats["max_waiting"] == 4

    # And they are answered: six requests through two slots take three rounds of 200 ms at
    # least, however they arrive (no upper bound: a loaded CI box stretches the wall clock).
    async def answered(server: SimulatedServer) -> float:
        t0 = time.monotonic()
        await asyncio.gather(*(ocr(server.base_url, picture_bytes(i), mime="image/png") for i in range(6)))
        return time.monotonic() - t0

    with SimulatedServer("--slots", "2", "--prefill-ms", "200") as server:
        elapsed = run(answered(server))
        stats = server.stats()
        metrics = server.metrics()
    assert elapsed >= 0.55, elapsed
    assert stats["max_running"] <= 2
    assert metrics["vllm:request_success_total"] == 6 and metrics["vllm:num_requests_running"] == 0
    assert metrics["vllm:num_requests_waiting"] == 0
    assert metrics["vllm:generation_tokens_total"] > 0 and metrics["vllm:prompt_tokens_total"] > 6 * 273
