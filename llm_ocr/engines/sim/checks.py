"""The simulated server's check of a request against a model family's recipe.

The simulator runs :func:`check_request` on every request it receives and
:func:`check_image` on every page request's image, and refuses (400) what strays from the
recipe, so a test that goes through the whole pipeline proves the requests on the wire, not
the builder's intentions. The recipe itself (prompt, sampling, rendering, the prompt texts of
its page requests) is the family's, in :mod:`llm_ocr.vlm.families`: what the product sends.
Only the checking is here, as only the simulator (and the tests that play a server) check.

Both are dispatched on the family's class: a family whose requests take another shape
(MinerU2.5's two passes) or whose images another rule (LightOnOCR-3's longest side) registers
its own check below; every other family gets the generic one.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from functools import singledispatch
from typing import Any

from llm_ocr.vlm.families.base import Family, Prompt, Sampling
from llm_ocr.vlm.families.lighton3 import LightOnOCR3
from llm_ocr.vlm.families.mineru import LAYOUT_PROMPT, PROMPTS, SAMPLING, SYSTEM_PROMPT, MinerU

#: Page request kinds of a two-pass family: a layout pass, whose blocks the server remembers,
#: then a request per block, cropped from the page (MinerU2.5).
LAYOUT_PASS, BLOCK_PASS = "layout", "block"


class RecipeError(Exception):
    """A request strays from the family's recipe (what the simulated server answers with a 400)."""


# -- reading a request as the server received it ------------------------------------------------


def prompt_text(body: Mapping[str, Any]) -> str | None:
    """The text part of a request's last message (None: the image alone, or no such message)."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not isinstance(messages[-1], dict):
        return None
    parts = messages[-1].get("content")
    if not isinstance(parts, list):
        return None
    texts = [p.get("text") for p in parts if isinstance(p, dict) and p.get("type") == "text"]
    return "\n".join(t for t in texts if isinstance(t, str)) if texts else None


def sent_image(body: Mapping[str, Any]) -> bytes:
    """The image bytes of a request body; b"" if there is none."""
    for message in body.get("messages") or []:
        for part in message.get("content") or [] if isinstance(message, dict) and isinstance(message.get("content"),
                                                                                             list) else []:
            if isinstance(part, dict) and part.get("type") == "image_url":
                url = (part.get("image_url") or {}).get("url", "")
                return base64.b64decode(url.partition(",")[2] or b"")
    return b""


# -- the checks ---------------------------------------------------------------------------------


@singledispatch
def check_request(family: Family, body: Mapping[str, Any]) -> str | None:
    """Refuse (``RecipeError``) a page request that strays from ``family``'s recipe and return
    its kind (``"page"``, or a pass name for multi-request families); None for a request that
    is not a page request of this family (a figure description, a custom prompt).

    ``body`` is the JSON the server received: ``extra_body`` fields are at the top level.
    """
    if prompt_text(body) not in family.page_texts():
        return None
    check_messages(family, body, family.prompt, family.page_texts())
    check_sampling(family, body, family.sampling, retry_top_p=family.retries.retry_top_p)
    return "page"


@singledispatch
def check_image(family: Family, width: int, height: int) -> None:
    """Refuse (``RecipeError``) a page image of ``width`` x ``height`` ``family``'s recipe would
    not send (larger than the model was trained on and its processor leaves it, or not resized
    as the family's client resizes: :meth:`~llm_ocr.vlm.families.base.Rendering.sent_size`).
    Families without such a rule accept any."""
    sent = family.rendering.sent_size(width, height)
    multiple = family.rendering.multiple
    if sent != (width, height) and multiple:
        rule = family.rendering
        raise RecipeError(
            f"{family.title}'s client sends images resized to multiples of {multiple} px a side, "
            f"{rule.min_pixels or multiple**2:,} to {rule.max_pixels or 12_000_000:,} pixels: a {width} x "
            f"{height} image is sent as {sent[0]} x {sent[1]}")


def check_messages(
    family: Family, body: Mapping[str, Any], prompt: Prompt, texts: Sequence[str | None] | None = None
) -> str | None:
    """Check the chat shape against ``prompt`` (or any of ``texts``); returns the text sent."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RecipeError("messages must be a non-empty list")
    expected_roles = (["system"] if prompt.system is not None else []) + ["user"]
    roles = [m.get("role") if isinstance(m, dict) else None for m in messages]
    if roles != expected_roles:
        raise RecipeError(f"{family.title} expects messages with roles {expected_roles}, got {roles}")
    if prompt.system is not None and messages[0].get("content") != prompt.system:
        raise RecipeError(f"{family.title}'s system message must be {prompt.system!r}")
    parts = messages[-1].get("content")
    if not isinstance(parts, list):
        raise RecipeError(f"{family.title} expects the user message as a list of content parts")
    kinds = [p.get("type") if isinstance(p, dict) else None for p in parts]
    wanted = ["image_url"] if prompt.text is None else (
        ["image_url", "text"] if prompt.image_first else ["text", "image_url"]
    )
    if kinds != wanted:
        raise RecipeError(f"{family.title} expects the user content parts {wanted}, got {kinds}")
    if prompt.text is None:
        return None
    sent = next(p["text"] for p in parts if p.get("type") == "text")
    allowed = list(texts) if texts is not None else [prompt.text]
    if sent not in allowed:
        raise RecipeError(f"{family.title}: unexpected prompt text {sent[:120]!r} (expected "
                          f"{str(allowed[0])[:120]!r})")
    return sent


def check_sampling(
    family: Family, body: Mapping[str, Any], sampling: Sampling, *, retry_top_p: float | None = None
) -> None:
    """Check the sampling fields and the vLLM-only fields against ``sampling``."""
    temperatures = family.retries.temperatures
    temperature = body.get("temperature")
    if not isinstance(temperature, (int, float)) or isinstance(temperature, bool):
        raise RecipeError(f"{family.title} requests must set temperature (recipe: {sampling.temperature})")
    first = abs(temperature - temperatures[0]) < 1e-9
    if temperature < temperatures[0] - 1e-9:
        raise RecipeError(
            f"{family.title}: temperature {temperature} is below the recipe's first attempt "
            f"({temperatures[0]}); retries only go hotter"
        )
    for name, value in sampling.fields().items():
        if name == "top_p" and retry_top_p is not None and not first:
            value = retry_top_p
        if body.get(name) != value:
            raise RecipeError(f"{family.title}: {name} must be {value}, got {body.get(name)!r}")
    for name in ("top_p", "top_k", "presence_penalty", "frequency_penalty", "repetition_penalty"):
        if getattr(sampling, name) is None and body.get(name) is not None:
            raise RecipeError(f"{family.title}'s recipe sets no {name}; got {body.get(name)!r}")
    if not any(isinstance(body.get(f), int) for f in sampling.token_fields):
        raise RecipeError(f"{family.title} requests must set {' or '.join(sampling.token_fields)}")
    for name, value in sampling.extra.items():
        if body.get(name) != value:
            raise RecipeError(f"{family.title}: {name} must be {json.dumps(value)}, got {json.dumps(body.get(name))}")
    # vLLM-only fields that change what the model does: a recipe that sends none refuses them
    # (a chat template switched into thinking writes another answer than the recipe parses).
    for name in ("vllm_xargs", "skip_special_tokens", "chat_template_kwargs"):
        if name not in sampling.extra and name in body:
            raise RecipeError(f"{family.title}'s recipe sends no {name}; got {json.dumps(body.get(name))}")


# -- families whose requests or images follow another rule ----------------------------------------


@check_request.register(MinerU)
def _mineru_request(family: MinerU, body: Mapping[str, Any]) -> str | None:
    """MinerU2.5: the layout pass (:data:`LAYOUT_PASS`) or a block's (:data:`BLOCK_PASS`), each with
    its own prompt and sampling (mineru_client.py's ``DEFAULT_SAMPLING_PARAMS``)."""
    text = prompt_text(body)
    if text == LAYOUT_PROMPT:
        kind, sampling = LAYOUT_PASS, SAMPLING["layout"]
    else:
        found = next((k for k, p in PROMPTS.items() if p == text), None)
        if found is None:
            return None
        kind, sampling = BLOCK_PASS, SAMPLING[found]
    check_messages(family, body, Prompt(text, system=SYSTEM_PROMPT), [text])
    check_sampling(family, body, sampling)
    return kind


@check_image.register(LightOnOCR3)
def _lighton3_image(family: LightOnOCR3, width: int, height: int) -> None:
    """LightOnOCR-3: pages at most the trained size on the longer side (lightonocr/render.py)."""
    edge = family.rendering.long_side or 0
    if edge and max(width, height) > edge + 1:
        raise RecipeError(f"{family.title} pages are sent at most {edge} px on the longer side (the size the model "
                          f"was trained on); got {width} x {height}")
