"""``llm-ocr models``: the model families llm-ocr has a recipe for, and what each one gives.

For each family: the model names it matches, what its answer holds (boxes, figure crops, HTML
tables, math, figure descriptions), the vLLM command llm-ocr starts for it, the image (and vLLM)
its launches run on each platform, with the platform's CUDA-driver check, and where its recipe
comes from (docs/models.md has the same, with every source).
"""

from __future__ import annotations

import argparse
import json
import shlex
from typing import Any

from llm_ocr.gpu_presets import PRESETS
from llm_ocr.launchers.core.images import ImageChoice, choices
from llm_ocr.options import DenseOptions
from llm_ocr.serving.command_lines import vllm_command
from llm_ocr.vlm.families import FAMILIES, Family, family_named


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``models`` sub-command."""
    parser = sub.add_parser(
        "models",
        help="list the model families llm-ocr has a recipe for: names matched, outputs, serve command, sources",
        description="The model families llm-ocr runs, each with its exact recipe (see docs/models.md). "
        "A model is matched to its family by its served name; --recipe FAMILY picks one for a fine-tune.",
    )
    parser.add_argument("family", nargs="?", help="show one family in full (default: all, briefly)")
    parser.add_argument("--gpu-preset", default="a100-80gb", help="GPU preset of the serve command shown (default "
                                                                  "%(default)s)")
    parser.add_argument("--json", action="store_true", help="print the families as JSON")
    parser.set_defaults(handler=run)


def describe(family: Family, preset: str) -> dict[str, Any]:
    """What ``llm-ocr models`` shows of one family, as plain data."""
    model = family.models[0] if family.models else "MODEL"
    command = vllm_command(model, host="127.0.0.1", port=8000, preset=PRESETS[preset], family=family)
    out = family.outputs
    return {
        "family": family.name,
        "title": family.title,
        "models": list(family.models),
        "matches": list(family.patterns) or ["(any model no other family matches)"],
        "outputs": {
            "boxes": out.boxes,
            "figure_crops": out.figure_crops,
            "html_tables": out.html_tables,
            "math": out.math,
            "figure_descriptions": out.figure_descriptions,
            "notes": out.notes,
        },
        "request": {
            "prompt": family.prompt.text,
            "system": family.prompt.system,
            "image_first": family.prompt.image_first,
            "temperature": family.retries.temperatures[0],
            **family.sampling.fields(),
            "max_tokens": family.sampling.max_tokens,
            "extra_body": dict(family.sampling.extra),
            "retry_temperatures": list(family.retries.temperatures[: family.retries.count + 1]),
        },
        "page_image": family.rendering.options(),
        # docs/gpu-time.md section 5: a page longer than one answer is read in pieces by every
        # family, tiles where its boxes can join them, bands otherwise (Family.dense).
        "dense_pages": dense_pages(family),
        # docs/gpu-time.md section 4: a page longer than 1:3 (a 1:60 log strip) is read in segments.
        "long_pages": long_pages(family),
        # The knobs of reading a page in pieces (the same for every family): each one's default,
        # unit and provenance (reasoned, measured on a named model, or fitted to the simulator).
        "dense_options": DenseOptions.knobs(),
        "serve": shlex.join(command),
        "images": {platform: _image(choice) for platform, choice in choices(family).items()},
        "needs": family.serving.needs,
        "sources": [{"fact": s.fact, "where": s.where} for s in family.sources],
    }


def long_pages(family: Family) -> str:
    """What happens to a page far longer than wide (a 1:60 strip), for ``llm-ocr models``."""
    return (f"cut into overlapping segments of at most 1:2, each rendered from the source as a page of its own "
            f"({_page_size(family)}), read at once; never sent under {family.min_readable_side} px on a side")


def _page_size(family: Family) -> str:
    rendering = family.rendering
    if rendering.long_side:
        return f"{rendering.long_side} px on its longer side"
    return f"{rendering.dpi:g} DPI" + (f", at most {rendering.max_pixels:,} pixels" if rendering.max_pixels else "")


def dense_pages(family: Family) -> str:
    """What happens to a page whose text is longer than one answer, for ``llm-ocr models``."""
    if family.dense == "blocks":
        return ("read whole: a layout pass, then a request per block, so no answer holds the page's text "
                "(no tiles; --no-tile-dense-pages changes nothing)")
    if family.dense == "tiles":
        how = "read in tiles joined by their boxes, columns in reading order"
    else:
        how = ("read in bands joined by the text their overlap repeats: column by column where the page has "
               "columns (a masthead across them first), each column in bands down it; full width where it has none")
        if family.rendering.long_side:
            how += " (or at a context too small for a square piece at its resolution)"
    return f"{how}; a piece whose answer runs out is cut in two and read again (--no-tile-dense-pages: read whole)"


def _image(choice: ImageChoice | str) -> dict[str, Any]:
    """One platform's image as plain data: the image, its vLLM and CUDA, the driver check; or
    ``missing``, why there is none and what to build (a launch there needs ``--image``)."""
    if isinstance(choice, str):
        return {"missing": choice}
    image = choice.image
    return {"image": image.ref, "vllm": image.vllm, "cuda": f"{image.cuda[0]}.{image.cuda[1]}", "check": choice.check,
            "source": image.source}


def _image_line(platform: str, image: dict[str, Any]) -> str:
    if "missing" in image:
        return f"{platform}: none, pass --image"
    base = " (base of a pyxis --image)" if platform == "slurm" else ""
    return f"{platform}: {image['image']}{base} (vLLM {image['vllm']}, CUDA {image['cuda']})"


def _flags(outputs: dict[str, Any]) -> str:
    names = {"boxes": "boxes", "figure_crops": "figure crops", "html_tables": "HTML tables", "math": "math",
             "figure_descriptions": "figure descriptions"}  # fmt: skip
    have = [label for key, label in names.items() if outputs[key]]
    return ", ".join(have) or "Markdown text only"


def run(args: argparse.Namespace) -> int:
    """Handle ``llm-ocr models``."""
    if args.gpu_preset not in PRESETS:
        print(f"unknown --gpu-preset {args.gpu_preset!r}; choose one of {', '.join(PRESETS)}")
        return 2
    chosen = [family_named(args.family)] if args.family else list(FAMILIES)
    rows = [describe(f, args.gpu_preset) for f in chosen]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for row in rows:
        print(f"{row['family']}  ({row['title']})")
        print(f"  models:  {', '.join(row['models']) or '-'}")
        print(f"  matches: {', '.join(row['matches'])}")
        notes = f"; {row['outputs']['notes']}" if row["outputs"]["notes"] else ""
        print(f"  outputs: {_flags(row['outputs'])}{notes}")
        print(f"  dense:   {row['dense_pages']}")
        print(f"  strips:  {row['long_pages']}")
        print(f"  serve:   {row['serve']}")
        if row["needs"]:
            print(f"  needs:   {row['needs']}")
        if args.family:
            for platform, image in row["images"].items():
                print(f"  image:   {_image_line(platform, image)}")
                print(f"           {image.get('missing') or image['check']}")
            print("  request: " + json.dumps(row["request"], ensure_ascii=False))
            print("  page image: " + json.dumps(row["page_image"]))
            for source in row["sources"]:
                print(f"  source:  {source['fact']}\n           <- {source['where']}")
        else:
            print("  images:  " + "; ".join(_image_line(p, i) for p, i in row["images"].items()))
            where = sorted({s["where"].split(" ")[0] for s in row["sources"]})
            print(f"  recipe from: {', '.join(where) or '-'}")
        print()
    return 0
