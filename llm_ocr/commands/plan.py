"""``llm-ocr plan INPUT... --model M``: pages, GPU-hours, wall time and cost before anything runs.

The estimate is :mod:`llm_ocr.planning`; this module parses the flags and prints it.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from llm_ocr.argtypes import positive_int

log = logging.getLogger("llm_ocr")


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``plan`` sub-command."""
    from llm_ocr.planning.estimate import PLATFORMS
    from llm_ocr.vlm.recipes import DEFAULT_MODEL

    parser = sub.add_parser(
        "plan",
        help="estimate pages, GPU-hours, wall time and cost of a run on each platform and GPU (runs nothing)",
        description="Count the pages of the inputs without rendering them (the listing, each PDF's page tree, "
        "Parquet footers) and estimate, for every machine of every platform, the GPU-hours, the wall time at "
        "--num-shards and the cost, from published pages/s of the model's family or the ones you measured "
        "with `llm-ocr bench-accuracy --gpu`. Every figure is an estimate, labelled with its source.",
    )
    parser.add_argument("inputs", nargs="+", metavar="INPUT", help="files, folders or datasets, as for llm-ocr run")
    parser.add_argument("--model", default=DEFAULT_MODEL, help="served model name (default %(default)s)")
    parser.add_argument("--recipe", default=None, help="model family, for a fine-tune served under another name")
    parser.add_argument("--num-shards", type=positive_int, default=1, help="shards run at once (default 1)")
    parser.add_argument("--platform", action="append", choices=PLATFORMS, metavar="PLATFORM",
                        help=f"only this platform (repeatable): {', '.join(PLATFORMS)} (default: all but k8s and ray, "
                        "whose rows are slurm's: your cluster's GPUs)")
    parser.add_argument("--pages", type=positive_int, default=None, help="take this many pages instead of counting")
    parser.add_argument("--pages-per-s", type=float, default=None, help="your own pages/s per GPU, for every machine")
    parser.add_argument("--gpu-price-per-hour", type=float, default=None,
                        help="US$ per GPU-hour of your own cluster's GPUs (the slurm, k8s and ray rows)")
    parser.add_argument("--sample", type=positive_int, default=None,
                        help="count at most this many documents one by one and extrapolate (default 2000)")
    parser.add_argument("--config", default=None, help="dataset configuration, as for llm-ocr run")
    parser.add_argument("--split", default="train", help="dataset split (default %(default)s)")
    parser.add_argument("--image-column", default=None, help="dataset column holding the page images")
    parser.add_argument("--storage-options", default=None, help="JSON object of fsspec storage options")
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    parser.add_argument("--write-manifest", default=None, metavar="FOLDER",
                        help="list the file and folder INPUTs once and write them as a Parquet manifest to FOLDER "
                        "(e.g. OUT/manifest/), an INPUT whose shards read only their own rows (docs/manifests.md)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Handle ``llm-ocr plan``."""
    from llm_ocr.options import DatasetOptions
    from llm_ocr.planning.estimate import DEFAULT_PLATFORMS, plan
    from llm_ocr.sources import InputError
    from llm_ocr.sources.counting import DEFAULT_SAMPLE
    from llm_ocr.vlm.families import UnknownRecipe

    if args.pages_per_s is not None and args.pages_per_s <= 0:
        log.error("--pages-per-s must be greater than 0")
        return 2
    storage_options = json.loads(args.storage_options) if args.storage_options else None
    dataset = DatasetOptions(config=args.config, split=args.split, image_column=args.image_column)
    listed = None
    if args.write_manifest:
        from llm_ocr.sources import plan_inputs
        from llm_ocr.sources.manifest_write import write_manifest

        try:
            listed = plan_inputs(args.inputs, dataset=dataset, storage_options=storage_options)
            written = write_manifest(listed, args.write_manifest, inputs=args.inputs, storage_options=storage_options)
        except InputError as exc:
            log.error("%s", exc)
            return 2
        print(f"wrote a manifest of {written.rows:,} documents ({written.files} file(s), {written.bytes:,} bytes) "
              f"to {written.url}: pass it as the INPUT", file=sys.stderr)
    try:
        result = plan(
            args.inputs, model=args.model, recipe=args.recipe, num_shards=args.num_shards,
            platforms=args.platform or DEFAULT_PLATFORMS, pages=args.pages, pages_per_s=args.pages_per_s,
            gpu_price_per_hour=args.gpu_price_per_hour,
            dataset=dataset, storage_options=storage_options, sample=args.sample or DEFAULT_SAMPLE, input_plan=listed,
        )  # fmt: skip
    except (InputError, UnknownRecipe) as exc:
        log.error("%s", exc)
        return 2
    print(json.dumps(result.to_dict(), indent=2) if args.json else result)
    return 0
