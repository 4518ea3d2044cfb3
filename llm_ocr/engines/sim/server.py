"""The simulated vLLM/DeepSeek-OCR HTTP server (aiohttp): routes, scheduling, faults.

Request validation lives in :mod:`.protocol`, the answers in :mod:`.content`.

Scheduling model: ``slots`` sequences run at once (vLLM's ``--max-num-seqs``); the rest wait
in FIFO order. A request spends ``prefill_ms`` then decodes its tokens; the time per token of
every running sequence is ``decode_ms_per_token * (1 + load_slowdown * running / slots)``,
re-evaluated every 50 ms, so a batch that fills up slows every member down, like a GPU whose
step time grows with batch size. The model itself lives in :mod:`.timing` (the benchmark
replays it to compute a perfect client's time). With ``instant`` no time passes at all.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import collections
import contextlib
import hashlib
import json
import math
import os
import random
import re
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from llm_ocr.vlm.families import Family, family_for
from llm_ocr.vlm.verifier import CATEGORIES

from ..frame.answers import schema_instance
from ..frame.app import FrameConfig, OpenAIServer
from ..frame.app import serve as serve_frame
from ..frame.protocol import (
    ApiError,
    ChatRequest,
    admit_max_tokens,
    error_response,
    estimate_prompt_tokens,
    is_json_int,
    parse_chat_request,
)
from ..frame.streaming import SseAnswer
from . import FAULT_KINDS, content, families
from . import fields as sim_fields
from .checks import RecipeError, check_image, check_request
from .corpus import CorpusIndex, LayoutBlock, build_corpus
from .crops import region_blocks
from .damage import Damage, damaged
from .images import ImageFacts, analyse_image
from .poison import PoisonPages
from .timing import DECODE_STEP_S, TimingModel, per_token_seconds  # noqa: F401 - re-exported

_DECODE_STEP_S = DECODE_STEP_S  # the old private name, kept for existing imports
#: A piece of a page sent at under this share of the scale the family renders it at as a page
#: was cut from a downscaled render (rounding and the renderer's pixel caps stay above it).
DOWNSCALED = 0.8
#: ... unless the context is too small for that: a piece is owed at least the scale at which its
#: image fills this share of the context left beside the answer (a client keeps the rest for
#: the prompt and for uneven cuts: an image cut in two until it fits may be a third of it).
CONTEXT_SHARE = 0.25
#: An image at least this many times as long as wide is taken for a segment of a long page.
SEGMENT_SHAPED = 1.9
_IMAGE_URI = re.compile(r"^data:(image/[\w.+-]+);base64,", re.IGNORECASE)


@dataclass
class SimConfig(FrameConfig):
    """Settings of the simulated server (one field per command-line option) beyond the shared ones."""

    corpus: list[str] = field(default_factory=list)
    render_dpi: float = 144.0  # how the client rendered corpus pages: where their crops lie
    slots: int = 64
    prefill_ms: float = 20.0
    decode_ms_per_token: float = 0.0
    load_slowdown: float = 1.0
    output_tokens_mean: float = 0.0  # 0: synthetic answers keep their natural length
    output_tokens_sigma: float = 0.5
    loop_rate: float = 0.0
    loop_repeat_rate: float = 1.0
    error_rate: float = 0.0
    hang_rate: float = 0.0
    reset_rate: float = 0.0
    crash_after: int = 0
    seed: int = 0
    startup_delay: float = 0.0
    instant: bool = False
    poison: PoisonPages | None = None
    #: Structured answers to documents (Fields): first answers that are not JSON, invented values.
    fields_invalid_rate: float = 0.0
    fields_invent_rate: float = 0.0
    #: Whether response_format / structured_outputs are accepted (False: HTTP 400, like an
    #: endpoint without structured outputs).
    structured_outputs: bool = True
    #: The family every served name plays (default: each name's own, like llm-ocr picks it).
    recipe: str | None = None
    #: The family a served name plays, by name (before ``recipe``): one server playing several
    #: families, or two recipes of one model under two names.
    recipes: dict[str, str] = field(default_factory=dict)
    #: Answer requests that stray from the family's recipe as a real model would, instead of
    #: refusing them (400).
    lenient: bool = False
    #: A weaker model: which page images are read garbled, or with most of their text dropped.
    damage: Damage = field(default_factory=Damage)


@dataclass
class Fault:
    """One fault to apply to a chat request."""

    kind: str
    status: int = 500
    seconds: float = 3600.0
    message: str | None = None
    source: str = "queued"  # or "random"


class SimServer(OpenAIServer):
    """State and handlers of one simulated server."""

    cfg: SimConfig

    def __init__(self, cfg: SimConfig) -> None:
        super().__init__(cfg)
        self.corpus: CorpusIndex | None = None
        self.faults: collections.deque[Fault] = collections.deque()
        self.rng = random.Random(cfg.seed)
        self.kv_tokens = 0.0
        self.stats: dict[str, Any] = {
            "requests": 0,
            "responses": {},
            "prompt_kinds": {},
            "verify_categories": {},
            "faults_applied": {},
            "known_pages": 0,
            "known_crops": 0,
            "synthetic_pages": 0,
            "max_running": 0,
            "max_waiting": 0,
            "ngram_processor_off": 0,
            "special_tokens_skipped": 0,
            "recipe_refused": 0,
            "unreadable_refused": 0,
            "families": {},
        }
        self.memory = families.Memory()
        self._sem: asyncio.Semaphore | None = None
        self._start_now: asyncio.Event | None = None
        #: Set to end every hang under way (``POST /sim/release``); a new one holds the next hangs.
        self._release = asyncio.Event()
        self._holding: dict[asyncio.Event, int] = {}  # requests held under each release event
        self.timing = TimingModel(
            slots=cfg.slots,
            prefill_ms=cfg.prefill_ms,
            decode_ms_per_token=cfg.decode_ms_per_token,
            load_slowdown=cfg.load_slowdown,
        )

    # -- lifecycle ---------------------------------------------------------------------------

    def extra_routes(self) -> list[web.RouteDef]:
        """Fault injection and counters: ``/sim/faults`` and ``/sim/stats``."""
        return [
            web.post("/sim/faults", self.add_faults),
            web.post("/sim/ready", self.end_startup),
            web.get("/sim/faults", self.list_faults),
            web.delete("/sim/faults", self.clear_faults),
            web.post("/sim/release", self.release_hangs),
            web.get("/sim/stats", self.get_stats),
            web.post("/sim/verify", self.verify),
        ]

    def version_string(self) -> str:
        return "simulated"

    def refresh_metrics(self) -> None:
        self.metrics.kv_cache_usage = min(1.0, self.kv_tokens / (self.cfg.slots * self.cfg.max_model_len))

    async def become_ready(self) -> None:
        """Index the corpus (in a thread) and wait out the startup delay, then serve."""
        self._sem = asyncio.Semaphore(self.cfg.slots)
        self.open_log()
        self._start_now = asyncio.Event()
        startup = self._wait_startup_delay(self._start_now)
        if self.cfg.corpus:  # indexed while the start-up delay runs
            _, self.corpus = await asyncio.gather(startup, asyncio.to_thread(build_corpus, list(self.cfg.corpus)))
        else:
            await startup
        self.ready = True

    async def _wait_startup_delay(self, start_now: asyncio.Event) -> None:
        try:
            await asyncio.wait_for(start_now.wait(), timeout=self.cfg.startup_delay)
        except asyncio.TimeoutError:
            pass

    async def end_startup(self, request: web.Request) -> web.Response:
        """``POST /sim/ready``: end the startup delay now (a test decides when the server is
        ready instead of racing a clock); ready once the corpus is indexed too."""
        if self._start_now is not None:
            self._start_now.set()
        return web.json_response({"ready": self.ready})

    async def add_faults(self, request: web.Request) -> web.Response:
        """Queue faults for the next chat requests: ``{"kind", "count", "status", "seconds",
        "message"}``; each chat request takes the next queued fault, in order.

        Transport faults act before validation: ``error`` answers HTTP ``status`` (default
        500) with OpenAI error JSON; ``hang`` holds the request ``seconds`` (default 3600, then
        answers normally), until ``POST /sim/release`` (then answers normally) or until the client
        disconnects; ``reset`` aborts the connection
        without a response; ``crash`` exits the process with code 1 at once. Content faults
        are consumed by the next request even when it then fails validation: ``loop`` (a
        valid start, then one phrase until ``max_tokens``, finish_reason "length"), ``empty``
        (content ""), ``untagged`` (the page as plain text without grounding tags) and
        ``bad_boxes`` (out-of-range, inverted, non-numeric, truncated and a thousand boxes).
        """
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return error_response(400, "Body must be JSON.")
        kind = body.get("kind") if isinstance(body, dict) else None
        if kind not in FAULT_KINDS:
            return error_response(400, f"kind must be one of {', '.join(FAULT_KINDS)}.")
        count, status = body.get("count", 1), body.get("status", 500)
        seconds = body.get("seconds", 3600.0)
        if not is_json_int(count) or count < 1 or not is_json_int(status) or not 100 <= status <= 599:
            return error_response(400, "count must be a positive integer and status an HTTP status.")
        if not isinstance(seconds, (int, float)) or seconds < 0:
            return error_response(400, "seconds must be a non-negative number.")
        for _ in range(count):
            self.faults.append(Fault(kind, status, float(seconds), body.get("message")))
        return web.json_response({"queued": len(self.faults)})

    async def list_faults(self, request: web.Request) -> web.Response:
        """The queued faults, next first."""
        return web.json_response({"faults": [f.__dict__ for f in self.faults]})

    async def clear_faults(self, request: web.Request) -> web.Response:
        """Drop every queued fault."""
        n = len(self.faults)
        self.faults.clear()
        return web.json_response({"cleared": n})

    async def release_hangs(self, request: web.Request) -> web.Response:
        """``POST /sim/release``: every ``hang`` under way ends now and its request is answered
        normally (a test holds a run's first request, lets it prepare what it sends next, and
        then lets it go on); later hangs hold again. Answers ``{"released": N}``: the requests
        it ended (held ones, or ones whose client had already gone)."""
        released, self._release = self._release, asyncio.Event()
        released.set()
        # How many it let go: requests held under this release, counted as they were held, so
        # a test knows exactly which held requests a release ended (one held just after is not).
        return web.json_response({"released": self._holding.pop(released, 0)})

    async def verify(self, request: web.Request) -> web.Response:
        """``POST /sim/verify``: a **simulated** verifier (llm-ocr's verifier interface,
        ``{"image": data URI, "text": ..., "category": "text"|"formula"|"table"}`` ->
        ``{"probability": p}``). It knows the truth of ``--corpus`` pages: for a whole page, or a
        region of one it finds (as it finds tiles, at ``--render-dpi``), ``p`` is the share of
        the true words the text holds; for a region too small to find, the share of the text's
        words some known page holds. An oracle for tests, not a model, and nothing about how a
        real verifier scores. A request without a category Jev knows is refused."""
        try:
            body = await request.json()
            match = _IMAGE_URI.match(body["image"]) if isinstance(body, dict) else None
            text = body["text"] if isinstance(body, dict) else None
            if match is None or not isinstance(text, str):
                raise ValueError("expected {\"image\": \"data:image/...;base64,...\", \"text\": \"...\", "
                                 "\"category\": \"text\"}")
            category = body.get("category")
            if category not in CATEGORIES:
                raise ValueError(f"category must be one of {', '.join(CATEGORIES)}, got {category!r}")
            image = base64.b64decode(body["image"][match.end():], validate=True)
        except (ValueError, KeyError, binascii.Error, json.JSONDecodeError, UnicodeDecodeError) as exc:
            return error_response(400, f"Bad verify request: {exc}")
        if self.corpus is None or not len(self.corpus):
            return error_response(400, "The simulated verifier only knows the pages of --corpus.")
        try:
            facts = await asyncio.to_thread(analyse_image, image, self.corpus, False, False, False,
                                            self.cfg.render_dpi)
        except ApiError as exc:
            return error_response(exc.status, exc.message, exc.type)
        self.count("prompt_kinds", "verify")
        self.count("verify_categories", category)
        if facts.known is not None:
            blocks = facts.known.blocks if facts.region is None else region_blocks(facts.known.blocks, facts.region)
            probability = content.word_recall(content.render_plain(blocks), text)
        else:
            pages = self.corpus.pages
            probability = max(content.word_recall(text, content.render_plain(page.blocks)) for page in pages)
        return web.json_response({"probability": probability, "simulated": True})

    async def get_stats(self, request: web.Request) -> web.Response:
        """Counters since start, plus the live queue state."""
        live = {
            "ready": self.ready,
            "running": self.metrics.running,
            "waiting": self.metrics.waiting,
            "queued_faults": len(self.faults),
            "corpus_pages": len(self.corpus) if self.corpus is not None else 0,
        }
        return web.json_response({**self.stats, **live})

    # -- chat ------------------------------------------------------------------------------------

    def _next_fault(self) -> Fault | None:
        # Always draw the same three numbers per request so a --seed run is reproducible
        # whatever faults were queued on demand.
        u_err, u_hang, u_reset = self.rng.random(), self.rng.random(), self.rng.random()
        if self.faults:
            return self.faults.popleft()
        if self.cfg.crash_after and self.stats["requests"] >= self.cfg.crash_after:
            return Fault("crash", source="random")
        if u_err < self.cfg.error_rate:
            return Fault("error", 500, source="random")
        if u_hang < self.cfg.hang_rate:
            return Fault("hang", source="random")
        if u_reset < self.cfg.reset_rate:
            return Fault("reset", source="random")
        return None

    async def _chat(self, request: web.Request, record: dict[str, Any]) -> web.StreamResponse:
        body = await self.read_body(request, record)
        if isinstance(body, web.StreamResponse):
            return body

        fault = self._next_fault()
        if fault is not None:
            record["fault"] = fault.kind
        if fault is not None and fault.kind in ("crash", "reset", "error", "hang"):
            self.count("faults_applied", fault.kind)
            if fault.kind == "crash":
                record["outcome"] = "crash"
                self.write_log(record)
                print("simulated server: injected crash, exiting with code 1", file=sys.stderr, flush=True)
                os._exit(1)
            if fault.kind == "reset":
                record["outcome"] = "reset"
                if request.transport is not None:
                    request.transport.abort()  # RST-like close: the client sees no response at all
                raise asyncio.CancelledError  # nothing can be written on an aborted connection
            if fault.kind == "error":
                record["outcome"] = "error"
                return error_response(fault.status, fault.message or f"Injected fault: HTTP {fault.status}.")
            record["outcome"] = "hang"
            # Cancelled when the client disconnects; ends early on POST /sim/release.
            release = self._release
            self._holding[release] = self._holding.get(release, 0) + 1
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(release.wait(), fault.seconds)
            # A finite hang (``seconds``) ends as a slow but normal request.
            record["outcome"] = "cancelled"
            fault = None

        try:
            req = parse_chat_request(body, self.cfg.served_model_names, conversations=True)
            if req.structured and not self.cfg.structured_outputs:
                raise ApiError(400, "response_format is not supported by this server (structured outputs are off).")
            family = family_for(req.model, self.cfg.recipes.get(req.model, self.cfg.recipe))
            page_kind = self._page_kind(family, body, record)
            if page_kind is not None:
                self.count("families", f"{family.name}:{page_kind}")
                if req.kind == "conversation":
                    # A family's page request with a system message (Nanonets-OCR2, Qwen) is a
                    # page to read, not a Fields conversation.
                    req = parse_chat_request(body, self.cfg.served_model_names)
            self.count("prompt_kinds", "structured" if req.structured else req.kind)
            if req.kind == "conversation":
                return await self._conversation(request, req, record, fault)
            if not req.ngram_enabled:
                self.stats["ngram_processor_off"] += 1
            need_colour = req.kind in ("describe", "figure", "other") or bool(req.structured)
            # A crop of a known page (a tile or band of a dense page, a segment of a long one) is
            # looked for in the page requests of every family (at the client's --render-dpi, the
            # family's own scale, the scale its rule gives the piece); in a page resized to another
            # shape (MinerU's layout pass) only as a piece spanning a long page's width; not in a
            # block cropped from one (its second pass: the layout pass's blocks are remembered).
            crops_at = self.cfg.render_dpi if page_kind is not None and page_kind != families.BLOCK_PASS else None
            facts = await asyncio.to_thread(
                analyse_image, req.image, self.corpus, need_colour,
                families.matches_any_aspect(family, page_kind), families.reads_rotation(family, page_kind), crops_at,
                family.rendering,
            )
            if page_kind is not None:
                record["image_size"] = [facts.width, facts.height]  # the log redacts the image itself
                self._check_image(family, facts.width, facts.height, record)
                if page_kind != families.BLOCK_PASS:
                    self._check_readable(family, facts, record, req.max_tokens)
            prompt_tokens = families.prompt_tokens(family, facts.width, facts.height, req.prompt,
                                                   self.cfg.tokens_per_char)
            if prompt_tokens is None:
                prompt_tokens = estimate_prompt_tokens(facts.width, facts.height, req.prompt, self.cfg.tokens_per_char)
            max_tokens = admit_max_tokens(prompt_tokens, req.max_tokens, self.cfg.max_model_len)
        except ApiError as exc:
            record["outcome"] = "error"
            return error_response(exc.status, exc.message, exc.type)

        if fault is None and self._loops(req, facts):
            fault = Fault("loop", source="random")
            record["fault"] = "loop"
        if fault is not None:
            self.count("faults_applied", fault.kind)
        if facts.known is not None:
            self.stats["known_pages" if facts.region is None else "known_crops"] += 1
            record["known_page"] = {"source": facts.known.source, "page": facts.known.index + 1}
            if facts.region is not None:
                record["known_page"]["region"] = [round(v, 4) for v in facts.region]
            self._crash_if_poison(facts.known.source, facts.known.index + 1, record)
        elif req.kind in ("markdown", "ocr", "free"):
            self.stats["synthetic_pages"] += 1

        if page_kind is not None and families.answers(family):
            text = self._family_answer(family, page_kind, body, req, facts, fault, max_tokens)
        else:
            text = self._answer(req, facts, fault, max_tokens)
        text, completion_tokens, finish = self.fit_answer(req, text, max_tokens)
        if not req.stream:
            await self._run_in_slot(prompt_tokens, completion_tokens)
            return self.completion(req, text, finish, prompt_tokens, completion_tokens, record)
        # Streamed: the role chunk goes out with the first token (after the prefill, as in
        # vLLM), then the text each decode step produced; a client that leaves cancels us here,
        # which frees the slot, and only the tokens generated until then are counted.
        stream = SseAnswer(self, req, text, prompt_tokens, record)
        with stream.abort_on_disconnect():

            async def decoded(tokens: float) -> None:
                if stream.response is None:
                    await stream.open(request)
                await stream.send(tokens)

            await self._run_in_slot(prompt_tokens, completion_tokens, decoded)
            if stream.response is None:
                await stream.open(request)
            return await stream.finish(finish, completion_tokens)
        return stream.closed_response()

    async def _conversation(
        self, request: web.Request, req: ChatRequest, record: dict[str, Any], fault: Fault | None
    ) -> web.StreamResponse:
        """A request that is not a page to OCR: a document's text (and maybe a page image) with
        a structured question about it (Fields). The answer is read from the text, and from a
        known page's text layer when the image is one (:mod:`.fields`)."""
        text = req.user_text
        prompt_tokens = math.ceil(len(req.prompt) * self.cfg.tokens_per_char) + 8
        if req.image:
            facts = await asyncio.to_thread(analyse_image, req.image, self.corpus, False)
            prompt_tokens += estimate_prompt_tokens(facts.width, facts.height, "", self.cfg.tokens_per_char)
            if facts.known is not None:
                text = content.render_plain(facts.known.blocks) + "\n\n" + text
        max_tokens = admit_max_tokens(prompt_tokens, req.max_tokens, self.cfg.max_model_len)
        schema = req.schema if req.structured == "json" else sim_fields.schema_in_prompt(req.system)
        if fault is not None and fault.kind == "empty":
            answer, applied = "", "empty"
        elif schema is None and not req.structured:
            answer, applied = content.render_plain(content.synthetic_blocks(hashlib.sha256(text.encode()).digest())), None  # noqa: E501 - not wrapped yet
        else:
            answer, applied = sim_fields.answer(
                schema, text, repair=req.follows_answer, seed=self.cfg.seed,
                invalid_rate=self.cfg.fields_invalid_rate, invent_rate=self.cfg.fields_invent_rate,
            )
        if applied is not None:
            record["fault"] = applied
            self.count("faults_applied", applied)
        self.count("prompt_kinds", "repair" if req.follows_answer else "conversation")
        text_out, completion_tokens, finish = self.fit_answer(req, answer, max_tokens)
        if req.stream:
            raise ApiError(400, "the simulated server does not stream conversations.")
        await self._run_in_slot(prompt_tokens, completion_tokens)
        return self.completion(req, text_out, finish, prompt_tokens, completion_tokens, record)
    def _page_kind(self, family: Family, body: dict[str, Any], record: dict[str, Any]) -> str | None:
        """The kind of page request ``body`` is for ``family`` (None: not a page request);
        raises :class:`ApiError` 400 for one that strays from the recipe, unless lenient."""
        try:
            return check_request(family, body)
        except RecipeError as exc:
            if self.cfg.lenient:
                return "page"
            self.stats["recipe_refused"] += 1
            record["recipe_refused"] = str(exc)
            raise ApiError(400, f"request strays from the {family.title} recipe: {exc}") from None

    def _check_image(self, family: Family, width: int, height: int, record: dict[str, Any]) -> None:
        """Refuse (400) a page image the family's recipe would not send (too large for the size
        the model was trained on), unless lenient."""
        try:
            check_image(family, width, height)
        except RecipeError as exc:
            if self.cfg.lenient:
                return
            self.stats["recipe_refused"] += 1
            record["recipe_refused"] = str(exc)
            raise ApiError(400, f"request strays from the {family.title} recipe: {exc}") from None

    def _check_readable(
        self, family: Family, facts: ImageFacts, record: dict[str, Any], max_tokens: int | None = None
    ) -> None:
        """Refuse (400, counted in ``unreadable_refused``) a piece of a page no model of the family
        reads: a side under the family's minimum readable size, or a piece of a known page cut
        from a downscaled render: its scale under :data:`DOWNSCALED` of the scale it is owed, the
        one the family's rule gives that piece as a page, or, if lower, the one at which the piece
        would fill :data:`CONTEXT_SHARE` of the context left beside the answer (a piece too large
        for the context at the family's scale is read at a lower one, or cut in two at its scale).
        Unless lenient."""
        problem = None
        least = family.min_readable_side
        # Only a piece of a page is held to the minimum: a crop found on a known page, or an
        # image shaped like a long page's segment (1:2 or longer; one too small to be found is
        # taken for a page). A whole page image smaller than the minimum is resized by the
        # model's processor, as vLLM's are (Qwen2-VL's smart_resize raises it to min_pixels).
        short, long = sorted((facts.width, facts.height))
        piece = facts.region is not None or long >= SEGMENT_SHAPED * short
        if piece and short < least:
            problem = (f"a {facts.width} x {facts.height} px image is under {family.title}'s minimum readable size "
                       f"({least} px a side)")
        elif facts.known is not None and facts.region is not None and facts.known.size_pt[0]:
            w_pt = facts.region.width * facts.known.size_pt[0]
            h_pt = facts.region.height * facts.known.size_pt[1]
            dpi = self.cfg.render_dpi if family.rendering.long_side is None else None
            wanted = family.rendering.page_scale(w_pt, h_pt, dpi, min_page_side=0)
            room = self.cfg.max_model_len - (max_tokens or 0)
            if max_tokens is not None and room > 0:
                fits = math.sqrt(CONTEXT_SHARE * room * family.serving.pixels_per_token / max(w_pt * h_pt, 1e-9))
                wanted = min(wanted, fits)
            got = facts.width / max(w_pt, 1e-9)
            if got < DOWNSCALED * wanted:
                problem = (f"a piece of a page ({w_pt:.0f} x {h_pt:.0f} pt) sent at {got * 72:.0f} DPI, cut from a "
                           f"downscaled render: {family.title} reads it as a page at {wanted * 72:.0f} DPI")
        if problem is None or self.cfg.lenient:
            return
        self.stats["unreadable_refused"] += 1
        record["unreadable_refused"] = problem
        raise ApiError(400, f"unreadable image for the {family.title} recipe: {problem}")

    def _family_answer(
        self, family: Family, kind: str, body: dict[str, Any], req: ChatRequest, facts: ImageFacts,
        fault: Fault | None, max_tokens: int,
    ) -> str:
        """A page request of a family other than DeepSeek-OCR, answered in its own format (the
        family's writer) with what the image shows: a known page, the part of it a crop is, or a
        synthetic page."""
        if fault is not None and fault.kind == "empty":
            return ""
        if facts.known is not None and facts.region is not None:
            blocks = region_blocks(facts.known.blocks, facts.region)
        elif facts.known is not None:
            blocks = facts.known.blocks
        else:
            blocks = content.synthetic_blocks(facts.sha256)
        blocks = self._damaged(blocks, facts, max_tokens)
        text = families.answer(family, kind, body, facts, blocks, self.memory)
        if fault is not None and fault.kind == "loop":
            chars = int(max_tokens / self.cfg.tokens_per_char) + 16
            return content.loop_text(text[: len(text) // 3], facts.sha256, chars)
        return text

    def _loops(self, req: ChatRequest, facts: ImageFacts) -> bool:
        """Whether this page loops: decided by image and prompt, not drawn, since at temperature
        0 a page that loops loops again when retried with the same request. A retry at a higher
        temperature loops again for ``loop_repeat_rate`` of such pages (per temperature)."""
        if self.cfg.loop_rate <= 0:
            return False
        h = hashlib.sha256(f"{self.cfg.seed}|{req.prompt}|".encode() + facts.sha256).digest()
        if int.from_bytes(h[:8], "big") / 2**64 >= self.cfg.loop_rate:
            return False
        if req.temperature <= 0 or self.cfg.loop_repeat_rate >= 1:
            return True
        h = hashlib.sha256(f"{self.cfg.seed}|{req.temperature:.3f}|".encode() + facts.sha256).digest()
        return int.from_bytes(h[:8], "big") / 2**64 < self.cfg.loop_repeat_rate

    def _crash_if_poison(self, source: str, page: int, record: dict[str, Any]) -> None:
        """Exit at once, like vLLM on a CUDA illegal memory access, if this page is poison."""
        spec = self.cfg.poison.should_crash(source, page) if self.cfg.poison else None
        if spec is None:
            return
        assert self.cfg.poison is not None
        self.cfg.poison.record(spec)
        record["outcome"] = "crash"
        self.write_log(record)
        print(f"simulated server: page {spec} is poison, exiting with code 1", file=sys.stderr, flush=True)
        os._exit(1)

    def _answer(self, req: ChatRequest, facts: ImageFacts, fault: Fault | None, max_tokens: int) -> str:
        """The model's text before token truncation."""
        kind = fault.kind if fault is not None else None
        if kind == "empty":
            return ""
        if kind == "bad_boxes":
            return content.bad_boxes_text(facts.sha256)
        if facts.known is not None and facts.region is not None:
            blocks = region_blocks(facts.known.blocks, facts.region)  # a crop: the text it shows
        elif facts.known is not None:
            blocks = facts.known.blocks
        elif self.cfg.output_tokens_mean > 0 and req.kind in ("markdown", "ocr", "free") and not req.structured:
            # A long-tailed answer length, fixed per image and seed (like a page's true length).
            tokens = content.lognormal_tokens(
                facts.sha256, self.cfg.seed, self.cfg.output_tokens_mean, self.cfg.output_tokens_sigma
            )
            chars = max(1, math.floor(tokens / self.cfg.tokens_per_char))
            if req.kind == "free":
                blocks = content.sized_blocks(facts.sha256, chars, content.render_plain)
            else:
                markdown = req.kind == "markdown"
                render = lambda b: content.render_grounding(b, markdown=markdown)  # noqa: E731
                blocks = content.sized_blocks(facts.sha256, chars, render)
        else:
            blocks = content.synthetic_blocks(facts.sha256)
        if req.kind in ("markdown", "ocr", "free") and not req.structured:
            blocks = self._damaged(blocks, facts, max_tokens)
        if kind == "untagged":
            return content.render_plain(blocks)
        if req.structured:
            desc = content.describe(facts.sha256, facts.width, facts.height, facts.colour)
            if req.structured == "choice":
                text = str(req.choices[0]) if req.choices else ""
            elif req.structured == "json_object":
                text = json.dumps({"description": desc}, ensure_ascii=False)
            else:
                text = json.dumps(schema_instance(req.schema, desc), ensure_ascii=False)
            start = text[: len(text) // 2]
        elif req.kind in ("markdown", "ocr"):
            text = content.render_grounding(blocks, markdown=req.kind == "markdown")
            start = content.render_grounding(blocks[:2], markdown=req.kind == "markdown")
        elif req.kind == "free":
            text = content.render_plain(blocks)
            start = content.render_plain(blocks[:2])
        else:
            text = content.describe(facts.sha256, facts.width, facts.height, facts.colour)
            start = text[: len(text) // 2]
        if kind == "loop":
            # Enough characters to overrun max_tokens, so the answer ends with "length". With
            # the n-gram processor on, only a unit longer than its window can loop (vLLM blocks
            # shorter repeats): a table row of 1.2-2.5 windows; without it, a short phrase.
            unit_tokens = 0 if req.ngram_window is None else req.ngram_window
            chars = int(max_tokens / self.cfg.tokens_per_char) + 16
            return content.loop_text(start, facts.sha256, chars,
                                     min_unit_chars=int(unit_tokens / self.cfg.tokens_per_char))
        return text

    def _damaged(self, blocks: list[LayoutBlock], facts: ImageFacts, max_tokens: int) -> list[LayoutBlock]:
        """A page's blocks as the weaker model this server may play reads them (:mod:`.damage`);
        a rambling reading is other text, enough of it to overrun ``max_tokens``."""
        whole = facts.known is not None and facts.region is None
        known = (facts.known.source, facts.known.index + 1) if whole and facts.known is not None else None
        kind = self.cfg.damage.of(facts.sha256, self.cfg.seed, known)
        if kind is None:
            return blocks
        self.count("faults_applied", kind)
        if kind == "ramble":
            # Plain text is the shortest rendering: any family's markup only lengthens it.
            chars = int(max_tokens / self.cfg.tokens_per_char) + 16
            return content.ramble_blocks(facts.sha256, chars)
        return damaged(blocks, facts.sha256, kind)

    async def _run_in_slot(
        self, prompt_tokens: int, completion_tokens: int, decoded: Callable[[float], Awaitable[None]] | None = None
    ) -> None:
        """Wait for a slot, then spend prefill and decode time (see the module docstring);
        ``decoded`` is told the tokens generated so far after each decode step."""
        assert self._sem is not None
        m = self.metrics
        m.waiting += 1
        self.stats["max_waiting"] = max(self.stats["max_waiting"], m.waiting)
        try:
            await self._sem.acquire()
        finally:
            m.waiting -= 1
        held = 0.0  # KV tokens this request holds, released when it leaves its slot
        try:
            m.running += 1
            self.stats["max_running"] = max(self.stats["max_running"], m.running)
            self.kv_tokens += prompt_tokens
            held += prompt_tokens
            if self.cfg.instant:
                return
            loop = asyncio.get_running_loop()
            deadline = loop.time()
            generated = 0.0
            for seconds, tokens in self.timing.slot_steps(completion_tokens, lambda: m.running):
                # Sleep until the model's deadline rather than for ``seconds``: timer overshoot
                # and a busy event loop (parsing image bodies, other requests, a loaded CPU)
                # would otherwise add up over hundreds of steps and make the server slower
                # than its own timing model, which a GPU's step time does not depend on.
                deadline += seconds
                await asyncio.sleep(max(0.0, deadline - loop.time()))
                self.kv_tokens += tokens
                held += tokens
                if decoded is not None and tokens > 0:
                    generated += tokens
                    await decoded(generated)
        finally:
            m.running -= 1
            self.kv_tokens -= held
            self._sem.release()


async def serve(cfg: SimConfig) -> int:
    """Run the server until SIGTERM/SIGINT; returns the process exit code."""
    return await serve_frame(SimServer(cfg), "simulated DeepSeek-OCR server ready on {url}")
