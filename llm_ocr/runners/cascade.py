"""Routes and per-model accounting around a page reading (docs/routes.md).

* :func:`open_route`: with ``--route text-layer``, the CPU engine that lays out text-layer pages
  (``--route-endpoint``, else one launched for the shard).
* :func:`first_reading`: a page's row from its sound text layer without a model request, else the
  model's reading; either way with its route, why, and how much text the page seemed to hold.
* :class:`ModelTally`: pages, tokens and server time per model, for the completion markers.
"""

from __future__ import annotations

import importlib.util
from collections import Counter
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from llm_ocr.options import ServerOptions, StageSpec
from llm_ocr.outcomes import RunError
from llm_ocr.records import PageResult
from llm_ocr.runners.lifecycle import Shard
from llm_ocr.runners.workers import WorkerPool, crop_figures
from llm_ocr.sources.base import DocumentRef, PageFailure, PageImage
from llm_ocr.sources.text_lines import LayerPage, layer_page
from llm_ocr.stages.extract import ExtractContext, extract_page
from llm_ocr.stages.routes import LAYOUT_FAMILY, RouteContext, layer_of, route_page
from llm_ocr.vlm.families import family_named
from llm_ocr.vlm.recipes import DEFAULT_MODEL

#: The context the launched CPU engine gets: the longest page's markup must fit one answer.
ROUTE_CONTEXT = 262_144
#: The name the CPU engine serves (its default): the markup it answers in is DeepSeek-OCR's.
LAYOUT_MODEL = DEFAULT_MODEL
NO_CPU_ENGINE = (
    "--route text-layer lays text-layer pages out with the CPU engine, which needs its extra: pip install "
    "'llm-ocr[cpu]' (or give --route-endpoint URL of a running `llm-ocr serve --engine cpu`)"
)


@dataclass
class ModelTally:
    """Pages by the route of the reading their row holds; per model: pages it read in this
    stage, how many of those readings are used, its tokens."""

    routes: Counter[str] = field(default_factory=Counter)
    models: dict[str, dict[str, int]] = field(default_factory=dict)

    def row(self, page: PageResult) -> PageResult:
        """Count the route of a row about to be written; returns it."""
        self.routes[page.used_route] += 1
        return page

    def read(self, page: PageResult, used: bool) -> None:
        """Count the model reading ``page`` (a row, or the reading a row set aside)."""
        if not page.model:
            return
        entry = self.models.setdefault(page.model, {"pages": 0, "used": 0, "prompt_tokens": 0, "completion_tokens": 0})
        entry["pages"] += 1
        entry["used"] += used
        entry["prompt_tokens"] += page.prompt_tokens or 0
        entry["completion_tokens"] += page.completion_tokens or 0

    def stats(self, busy: Mapping[str, float], layout_s: float | None = None) -> dict[str, Any]:
        """What the completion marker records: ``routes`` (pages by route), ``models`` (each
        model's counts and ``busy_s``, the seconds its server had at least one of this stage's
        requests in flight) and, with the text-layer route, ``layout_s`` (the CPU engine's)."""
        names = sorted(set(self.models) | set(busy))
        empty = {"pages": 0, "used": 0, "prompt_tokens": 0, "completion_tokens": 0}
        models = {name: {**self.models.get(name, empty), "busy_s": round(busy.get(name, 0.0), 3)} for name in names}
        stats: dict[str, Any] = {"routes": dict(sorted(self.routes.items())), "models": models}
        if layout_s is not None:
            stats["layout_s"] = round(layout_s, 3)
        return stats


@asynccontextmanager
async def open_route(shard: Shard, spec: StageSpec, pool: WorkerPool) -> AsyncIterator[RouteContext | None]:
    """The text-layer route's context (None without ``--route text-layer``): the CPU engine at
    ``--route-endpoint``, else one launched for this shard (a :class:`RunError` before any page
    when the ``cpu`` extra is missing)."""
    options = spec.route
    if options.route != "text-layer":
        yield None
        return
    if options.route_endpoint is None and importlib.util.find_spec("rapidocr") is None:
        raise RunError(NO_CPU_ENGINE)
    launch = ServerOptions.model_validate({
        "engine": "cpu", "server_args": f"--max-model-len {ROUTE_CONTEXT}",
        "server_startup_timeout": spec.server.server_startup_timeout,
        "server_max_restarts": spec.server.server_max_restarts,
    })
    # No key: the job's --api-key is the model endpoint's, never sent to another server.
    async with shard.connect(spec.client, launch, url=options.route_endpoint, model=LAYOUT_MODEL, api_key="",
                             log_prefix="route", own_server=True) as endpoint:
        family = family_named(LAYOUT_FAMILY)
        storage = shard.job.storage_options

        async def read_layer(location: str, page: int, width: int, height: int, image: bytes) -> LayerPage:
            return await pool.run(layer_page, location, page, width, height, image, storage)

        yield RouteContext(
            endpoint.client, read_layer=read_layer, crop=partial(pool.run, crop_figures),
            max_tokens=family.max_tokens(None, await endpoint.client.max_model_len() or ROUTE_CONTEXT),
        )


async def first_reading(
    ref: DocumentRef,
    item: PageImage | PageFailure,
    num_pages: int | None,
    ctx: ExtractContext,
    route: RouteContext | None,
    tally: ModelTally,
) -> PageResult:
    """The page's row: from its text layer when the route takes it (no model request), else the
    model's reading (``route = "model"``, and ``route_note`` saying why the layer was not used)."""
    layer = None
    if route is not None and isinstance(item, PageImage):
        layer = await layer_of(ref, item, route)
        if layer is not None and layer.sound:
            routed = await route_page(ref, item, num_pages, layer, route)
            if routed is not None:
                routed.text_estimate = _estimate(item)
                return routed
    row = await extract_page(ref, item, num_pages, ctx)
    row.route = "model"
    if layer is not None:
        row.route_note = layer.note if not layer.sound else f"{layer.note}, but the CPU engine could not: model"
    row.text_estimate = _estimate(item)
    tally.read(row, used=True)
    return row


def _estimate(item: PageImage | PageFailure) -> int | None:
    estimate = item.text_estimate if isinstance(item, PageImage) else None
    return estimate.chars if estimate is not None else None
