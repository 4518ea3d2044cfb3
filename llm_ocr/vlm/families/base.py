"""What a model family's recipe holds: the request, the server's flags, the parser and its
writer, the loop policy.

A :class:`Family` is data plus these behaviours: :meth:`Family.body` builds the chat
completion for a page image exactly as the family's own code sends it, :meth:`Family.parse`
turns its answer into a :class:`~llm_ocr.vlm.layout.PageLayout` (Markdown, blocks with
boxes in the pixels of the image that was sent, figure boxes), and :meth:`Family.read` reads one
page, with one request or several (MinerU's two passes, olmOCR-2's turn-and-read-again).

:meth:`Family.write` is the other side of :meth:`Family.parse`: the answer the family's model
gives for a :class:`~llm_ocr.vlm.view.View` of the image, in its own format and coordinate
space. The simulated server answers with it and the round-trip tests parse it back. The
simulator's check of a request against the recipe is the simulator's own
(``llm_ocr/engines/sim/checks.py``); it reads the recipe from here.

Nothing here talks to a server or touches an image: :meth:`Family.read` gets both done through
the :class:`PageTools` it is given (the Extract stage supplies them), so this package stays in
the ``vlm`` layer.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol

from llm_ocr.resizing import smart_resize
from llm_ocr.vlm.box import Box
from llm_ocr.vlm.layout import PageLayout
from llm_ocr.vlm.view import View

ImageFormat = Literal["jpeg", "png"]
#: How a page whose text is longer than one answer is read (``llm_ocr/stages/pieces/plan.py``):
#: ``"tiles"``, a grid cut at gutters and between lines, joined by the blocks' boxes (a family
#: whose answer gives every block's box); ``"bands"``, full-width pieces cut between text lines,
#: joined by the text their overlap repeats (a family whose text comes without boxes);
#: ``"blocks"``, read whole: a recipe that asks for the page's layout, then for each block in a
#: request of its own (MinerU2.5), has no answer that holds the page's text, so no piece would
#: fit better (its pieces, resized to its layout pass's square, would be squashed for nothing).
DensePolicy = Literal["tiles", "bands", "blocks"]


@dataclass(frozen=True)
class Source:
    """Where one fact of a recipe comes from: a repository file, a model card, a vLLM recipe."""

    fact: str
    where: str


@dataclass(frozen=True)
class Prompt:
    """The chat shape: the text (None: the image alone), a system message, the image's place."""

    text: str | None
    system: str | None = None
    image_first: bool = True


@dataclass(frozen=True)
class Sampling:
    """Sampling fields of the request: OpenAI ones at the top level, vLLM-only ones in ``extra``.

    ``max_tokens`` is the family's own answer budget (None: the context's rest); the request
    never asks for more than the server's context allows (see :meth:`Family.max_tokens`).
    ``token_fields`` names the field(s) the budget is sent in, as the family's client does.
    """

    temperature: float = 0.0
    top_p: float | None = None
    top_k: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    max_tokens: int | None = None
    token_fields: tuple[str, ...] = ("max_tokens",)
    #: vLLM-only request fields (``skip_special_tokens``, ``vllm_xargs``): sent in ``extra_body``.
    extra: Mapping[str, Any] = field(default_factory=dict)

    def fields(self) -> dict[str, Any]:
        """The sampling fields other than temperature and the token budget, as sent."""
        out: dict[str, Any] = {}
        for name in ("top_p", "top_k", "presence_penalty", "frequency_penalty", "repetition_penalty"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out


@dataclass(frozen=True)
class Retries:
    """The loop policy: temperatures of the attempts at a page that looped or ran out of tokens.

    ``temperatures[0]`` is the first attempt's; a page is asked again at the next one while its
    answer loops (the stream cut applies to every family). Past the end of the tuple the last
    step repeats. ``retry_top_p`` replaces ``top_p`` on the retries (Chandra samples wider then).
    """

    temperatures: tuple[float, ...] = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
    retry_top_p: float | None = None
    #: Attempts after the first a page gets by default (``--truncation-retries`` overrides).
    count: int = 1

    def temperature(self, attempt: int) -> float:
        """The temperature of attempt ``attempt`` (0: the first)."""
        seq = self.temperatures
        if attempt < len(seq):
            return seq[attempt]
        step = seq[-1] - seq[-2] if len(seq) > 1 else 0.0
        return min(1.0, seq[-1] + step * (attempt - len(seq) + 1))


@dataclass(frozen=True)
class Rendering:
    """The page image the family was trained on: how PDF pages are rendered and sent.

    ``dpi`` renders PDF pages; ``long_side`` instead scales every page so its longer side has
    exactly that many pixels (olmOCR-2); ``max_long_side`` and ``max_pixels`` cap the size.
    ``multiple`` is a family whose own client resizes every image before sending it, as Qwen2-VL's
    ``smart_resize`` does (:mod:`.sizing`): each side a multiple of ``multiple`` pixels, the
    pixel count within ``min_pixels`` .. ``max_pixels`` (Infinity-Parser2: 32, 2,048 ..
    16,777,216): the renderer sizes pages and the pieces it renders so (``size_multiple`` of the
    render options, ``llm_ocr/sources/render.py``), and any other image llm-ocr sends such a
    family (a tile cut from a page) is resized so (:meth:`sent_size`) just before it is sent
    (``llm_ocr/stages/extract.py``).
    """

    dpi: float = 144.0
    long_side: int | None = None
    max_long_side: int | None = None
    max_pixels: int | None = None
    image_format: ImageFormat = "png"
    #: The smallest image side, in pixels, the recipe reads: the side of one image token (the
    #: vision encoder's patch times its merge, ``Serving.pixels_per_token``) unless set here. An
    #: image narrower than that is blown up by the processor (or refused) and its text is not
    #: there to read; a piece of a page is never sent smaller (:meth:`Family.min_readable_side`).
    min_side: int | None = None
    multiple: int | None = None
    min_pixels: int | None = None

    def sent_size(self, width: int, height: int) -> tuple[int, int]:
        """``(width, height)`` of a ``width`` x ``height`` image as the family's client sends it:
        resized by the ``multiple`` rule (within ``min_pixels`` .. ``max_pixels``, by default one
        multiple squared .. llm-ocr's 12,000,000-pixel page cap), else as it is."""
        if not self.multiple:
            return width, height
        low, high = self.min_pixels or self.multiple**2, self.max_pixels or 12_000_000
        sent_height, sent_width = smart_resize(height, width, self.multiple, low, high)
        return sent_width, sent_height

    def page_scale(self, width: float, height: float, dpi: float | None = None, min_page_side: int = 640) -> float:
        """Pixels per point of a ``width`` x ``height`` pt page (or piece of one, read as a page)
        rendered this way: ``dpi / 72`` (``dpi`` None: the family's), or what makes its longer
        side ``long_side``, capped by ``max_long_side``, raised to ``min_page_side`` on the longer
        side, lowered to ``max_pixels`` (llm-ocr's renderer, ``sources/render.py``, to the pixel)."""
        long = max(width, height, 1e-9)
        scale = self.long_side / long if self.long_side else (dpi or self.dpi) / 72
        if self.max_long_side and long * scale > self.max_long_side:
            scale = self.max_long_side / long
        if 0 < long * scale < min_page_side:
            scale = min_page_side / long
        limit = self.max_pixels or 12_000_000
        if width * scale * height * scale > limit:
            scale = (limit / (width * height)) ** 0.5
        return scale

    def options(self) -> dict[str, Any]:
        """The :class:`~llm_ocr.sources.base.RenderOptions` fields this rendering sets."""
        out: dict[str, Any] = {"dpi": self.dpi, "image_format": self.image_format}
        if self.long_side is not None:
            out["long_side"] = self.long_side
        if self.max_long_side is not None:
            out["max_long_side"] = self.max_long_side
        if self.max_pixels is not None:
            out["max_page_pixels"] = self.max_pixels
        if self.multiple is not None:
            out["size_multiple"] = self.multiple
        return out


@dataclass(frozen=True)
class Serving:
    """How llm-ocr starts vLLM for the family (``serving/command_lines.py`` adds host, port, sizing).

    ``args`` are the family's own flags (``--trust-remote-code``, logits processors, the chat
    template's content format...). ``context`` is the ``--max-model-len`` the family runs with,
    and the memory figures size the GPU presets (``serving/vllm/presets.py``): weights and
    activations outside the KV cache, the KV cache bytes per token, the tokens a typical page
    holds (image + prompt + answer).
    """

    args: tuple[str, ...] = ()
    context: int = 8192
    limit_mm_per_prompt: Mapping[str, int] = field(default_factory=lambda: {"image": 1})
    weights_gib: float = 9.0
    kv_bytes_per_token: int = 2 * 12 * 10 * 128 * 2
    typical_seq_tokens: int = 3000
    #: What must be installed beside vLLM for these flags (a logits processor's package).
    needs: str = ""
    #: Image pixels per prompt token after the processor's resize (28 x 28 for Qwen2-VL's 14-px
    #: patches merged 2 x 2), and the processor's pixel cap: the simulated server's prompt size.
    pixels_per_token: int = 28 * 28
    max_image_pixels: int = 12_845_056


@dataclass(frozen=True)
class ServingImage:
    """A container image that serves a family: its name, the vLLM in it, the CUDA it is built for.

    ``ref`` is a Docker Hub reference (``vllm/vllm-openai:v0.29.0-cu129``) or, for SageMaker, an
    AWS Deep Learning Container's ``repository:tag`` (the launcher adds the region's registry).
    """

    ref: str
    vllm: str
    cuda: tuple[int, int]
    #: Where the image, its vLLM and its CUDA are stated.
    source: str = ""


@dataclass(frozen=True)
class Images:
    """The images a family's launches run in (``llm-ocr launch``; ``llm-ocr models`` lists them).

    ``docker`` are builds of one vLLM for different CUDA versions, pulled from Docker Hub (Hugging
    Face Jobs, Cloud Run, and the base of a Slurm container); the launcher picks the one the
    platform's GPU driver runs. ``sagemaker`` is an AWS vLLM Deep Learning Container (SageMaker
    Processing pulls from ECR). Where a family has no stock image, ``missing`` (Docker Hub) and
    ``sagemaker_missing`` say what to build instead, and a launch there without ``--image`` stops
    before submitting.
    """

    docker: tuple[ServingImage, ...] = ()
    sagemaker: ServingImage | None = None
    missing: str = ""
    sagemaker_missing: str = ""


#: llm-ocr's stock images (docs/platforms-hf-jobs.md, "GPU driver and CUDA"): chosen for
#: DeepSeek-OCR (vLLM 0.29.0; it broke in 0.30) and used by every family that names no other.
STOCK_IMAGES = Images(
    docker=(
        ServingImage("vllm/vllm-openai:v0.29.0-cu129", "0.29.0", (12, 9),
                     "vLLM v0.29.0 release notes, Docker Images (-cu129: CUDA 12.9)"),
        ServingImage("vllm/vllm-openai:v0.29.0", "0.29.0", (13, 0),
                     "vLLM v0.29.0 release notes, Docker Images (default tag: CUDA 13.0)"),
    ),
    sagemaker=ServingImage("vllm:0.14.0-gpu-py312-cu129-ubuntu22.04-sagemaker", "0.14.0", (12, 9),
                           "aws/deep-learning-containers docs/releasenotes/vllm/vllm-0.14.0-gpu-sagemaker.md"),
)


@dataclass(frozen=True)
class Outputs:
    """What the family's answer holds, for ``llm-ocr models`` and docs/models.md."""

    boxes: bool
    figure_crops: bool
    html_tables: bool
    math: bool
    figure_descriptions: bool = False
    notes: str = ""


class AnswerLike(Protocol):
    """What :meth:`PageTools.ask` returns (``llm_ocr.stages.attempts.Answer``)."""

    @property
    def text(self) -> str: ...  # the answer worth parsing (up to a loop)

    result: Any
    attempts: int
    cut_tokens: int
    notes: list[str]


#: Builds a request body for (temperature, attempt number from 0).
BodyFor = Callable[[float, int], dict[str, Any]]


class PageTools(Protocol):
    """What :meth:`Family.read` may do: ask the model, crop and transform images (off the loop)."""

    async def ask(self, body_for: BodyFor, retries: Retries) -> AnswerLike: ...

    async def crop(self, image: bytes, boxes: Sequence[Box]) -> list[bytes]: ...

    async def transform(
        self, image: bytes, *, rotate: int = 0, size: tuple[int, int] | None = None, min_side: int = 0
    ) -> tuple[bytes, int, int]: ...


@dataclass(frozen=True)
class PageInput:
    """A page image as a family reads it: encoded bytes and the pixel size its boxes refer to."""

    image: bytes
    mime: str
    width: int
    height: int
    page: int


@dataclass
class Reading:
    """What reading one page produced: the layout, every answer it took, and notes.

    ``image``/``width``/``height`` are the page image the layout's boxes refer to: the page as
    rendered, or as the family turned it (olmOCR-2's rotation, by ``turned``). ``raw`` is the model's text as
    the row keeps it (several answers joined for multi-request families).
    """

    layout: PageLayout
    answers: list[AnswerLike]
    raw: str
    image: bytes
    width: int
    height: int
    notes: list[str] = field(default_factory=list)
    #: Degrees counter-clockwise ``image`` was turned from the page as rendered (0: not turned).
    turned: int = 0


@dataclass(frozen=True)
class Family:
    """One model family's recipe. Subclasses override :meth:`parse` (and :meth:`read` when one
    page takes more than one request, or more than one try)."""

    name: str
    title: str
    #: Served model names matched (lower-case substrings or regexes against the lower-cased name).
    patterns: tuple[str, ...]
    #: The model repositories the recipe is for (shown by ``llm-ocr models``).
    models: tuple[str, ...]
    prompt: Prompt
    sampling: Sampling
    retries: Retries
    rendering: Rendering
    serving: Serving
    outputs: Outputs
    sources: tuple[Source, ...] = ()
    #: Sent with streamed requests in ``stream_options`` / ``extra_body`` (vLLM's continuous usage
    #: and ``stream_interval`` are only for servers known to be vLLM).
    stream_options: Mapping[str, Any] = field(default_factory=lambda: {"include_usage": True})
    stream_extra: Mapping[str, Any] = field(default_factory=dict)
    #: The images its launches run in, per platform (``llm-ocr launch``, ``llm-ocr models``).
    images: Images = STOCK_IMAGES
    #: How a page whose text is longer than one answer is read (:data:`DensePolicy`; every
    #: family in the registry declares it): tiles where its answers carry every text block's box
    #: in the pixels of the image sent (joining tiles needs them), bands otherwise; blocks (read
    #: whole) where a layout pass is followed by a request per block.
    dense: DensePolicy = "bands"

    @property
    def dense_tiles(self) -> bool:
        """Whether a dense page is read in tiles joined by boxes (else in bands joined by text)."""
        return self.dense == "tiles"

    @property
    def min_readable_side(self) -> int:
        """The smallest image side, in pixels, this family reads (:attr:`Rendering.min_side`)."""
        return self.rendering.min_side or max(1, round(self.serving.pixels_per_token**0.5))

    # -- choosing ------------------------------------------------------------------------------

    @property
    def extra_body(self) -> dict[str, Any]:
        """The vLLM-only fields of a page request (``extra_body``), a fresh copy."""
        return json.loads(json.dumps(dict(self.sampling.extra)))

    def matches(self, model: str) -> bool:
        """Whether the served model name ``model`` belongs to this family."""
        name = model.lower()
        return any(re.search(p, name) for p in self.patterns)

    def with_prompt(self, text: str | None) -> Family:
        """The same family asking with another prompt text (None keeps it): ``--prompt``."""
        if text is None:
            return self
        return replace(self, prompt=replace(self.prompt, text=text))

    # -- the request ---------------------------------------------------------------------------

    def max_tokens(self, requested: int | None, context: int | None) -> int:
        """``max_tokens`` of a page request: the requested budget, else the family's own, never
        more than the server's context leaves after the prompt (vLLM refuses a request whose
        prompt plus ``max_tokens`` exceeds ``--max-model-len``)."""
        context = context or self.serving.context
        ceiling = max(256, context - self.prompt_reserve(context))
        wanted = requested if requested is not None else self.sampling.max_tokens
        return ceiling if wanted is None else max(1, min(wanted, ceiling))

    def image_tokens(self, width: int, height: int) -> int | None:
        """Prompt tokens the family's processor makes of a ``width`` x ``height`` image (its
        pixels per token, up to its pixel cap); None when not proportional to its pixels."""
        pixels = min(width * height, self.serving.max_image_pixels)
        return -(-pixels // self.serving.pixels_per_token)

    def prompt_reserve(self, context: int) -> int:
        """Tokens of the context kept for the image and the prompt text (see subclasses)."""
        return min(context // 2, 1024)

    def messages(self, image: bytes, mime: str, text: str | None = None,
                 system: str | None = None) -> list[dict[str, Any]]:
        """The chat messages for one image in this family's chat shape."""
        text = self.prompt.text if text is None else text
        system = self.prompt.system if system is None else system
        image_part = {"type": "image_url", "image_url": {"url": data_uri(image, mime)}}
        parts: list[dict[str, Any]] = [image_part]
        if text is not None:
            text_part = {"type": "text", "text": text}
            parts = [image_part, text_part] if self.prompt.image_first else [text_part, image_part]
        messages: list[dict[str, Any]] = []
        if system is not None:
            messages.append({"role": "system", "content": system})
        messages.append({"role": "user", "content": parts})
        return messages

    def body(
        self,
        image: bytes,
        mime: str,
        *,
        temperature: float,
        max_tokens: int,
        attempt: int = 0,
        text: str | None = None,
        sampling: Sampling | None = None,
    ) -> dict[str, Any]:
        """The keyword arguments of ``chat.completions.create`` for one image (model added by
        the client): messages, the token budget, temperature, the sampling fields, and the
        vLLM-only fields in ``extra_body``."""
        sampling = sampling or self.sampling
        fields = sampling.fields()
        if attempt > 0 and self.retries.retry_top_p is not None:
            fields["top_p"] = self.retries.retry_top_p
        body: dict[str, Any] = {"messages": self.messages(image, mime, text), "temperature": temperature}
        extra: dict[str, Any] = {}
        for name in sampling.token_fields:
            # max_completion_tokens is not an argument of every openai SDK's create(): extra_body.
            (body if name == "max_tokens" else extra)[name] = max_tokens
        for name, value in fields.items():
            # top_k and repetition_penalty are vLLM's, not OpenAI's: they go in extra_body.
            (body if name in ("top_p", "presence_penalty", "frequency_penalty") else extra)[name] = value
        extra.update(json.loads(json.dumps(dict(sampling.extra))))  # a deep copy, JSON-clean
        if extra:
            body["extra_body"] = extra
        return body

    def streamed(self, body: dict[str, Any]) -> dict[str, Any]:
        """``body`` as a streamed request (usage in the stream; vLLM's stream fields if any)."""
        extra = {**body.get("extra_body", {}), **self.stream_extra}
        out = {**body, "stream_options": dict(self.stream_options)}
        if extra:
            out["extra_body"] = extra
        return out

    # -- reading a page ------------------------------------------------------------------------

    async def read(self, page: PageInput, tools: PageTools, max_tokens: int) -> Reading:
        """Read one page: one request, its answer parsed. Multi-request families override this."""
        answer = await tools.ask(
            lambda temperature, attempt: self.body(
                page.image, page.mime, temperature=temperature, max_tokens=max_tokens, attempt=attempt
            ),
            self.retries,
        )
        layout = self.parse(answer.text, width=page.width, height=page.height, page=page.page)
        return Reading(layout, [answer], answer.result.text, page.image, page.width, page.height)

    def parse(self, text: str, *, width: int, height: int, page: int) -> PageLayout:
        """The family's answer for a ``width`` x ``height`` image as a page layout."""
        raise NotImplementedError

    # -- writing an answer (the simulated server, the round-trip tests) ---------------------------

    def page_texts(self) -> tuple[str | None, ...]:
        """The prompt texts of this family's page requests (None: the image alone): the recipe's
        own and the other prompts its model's code offers for a page (a server that checks
        requests, ``llm_ocr/engines/sim/checks.py``, takes any of them for a page request)."""
        return (self.prompt.text,)

    def write(self, view: View, kind: str = "page", prompt: str | None = None) -> str:
        """The answer this family's model gives for an image showing ``view``, to a page request
        of ``kind`` (``"page"``, or a pass of a multi-request family, as the simulator's check of
        the request names it) asking ``prompt`` (None: the recipe's own): its markup, its labels,
        its boxes in its own coordinate space. :meth:`parse` reads it back.

        The view is of the image as sent: a whole page, a piece of one, or (MinerU's second
        pass) one block cropped from it; the writer never needs to know which.
        """
        raise NotImplementedError(f"{self.title} has no writer: its answers cannot be simulated")

    def page_reshaped(self, kind: str) -> bool:
        """Whether a page request of ``kind`` sends the page resized to another aspect ratio
        (MinerU's layout pass sends it as a square): a server that recognises pages must not
        compare their aspect."""
        return False

    def reports_rotation(self, kind: str) -> bool:
        """Whether the answer to a page request of ``kind`` says how the image is turned
        (olmOCR-2's front matter): a server that recognises pages must recognise them turned."""
        return False



def data_uri(image: bytes, mime: str) -> str:
    """An image as a ``data:`` URI, the form vLLM accepts in an ``image_url`` part."""
    return f"data:{mime};base64,{base64.b64encode(image).decode('ascii')}"
