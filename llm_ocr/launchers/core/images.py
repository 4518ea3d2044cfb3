"""Which image a launch runs a model family's server in, on each platform, and why.

A family names its images (:class:`~llm_ocr.vlm.families.base.Images`): builds of one vLLM for
different CUDA versions on Docker Hub, and an AWS Deep Learning Container for SageMaker. The
platform decides among them by its GPU driver, with the same rules the job applies at start
(:mod:`llm_ocr.container.cuda`): Cloud Run documents its L4 driver (535.216.03, CUDA 12.2), so a
CUDA 13 build is refused there before anything is submitted; Hugging Face Jobs and SageMaker
Processing do not document theirs, so the build that runs on the most drivers (the lowest CUDA
major) is taken and the job checks at start. A family with no image for a platform stops the
launch before submitting, with a message naming ``--image`` and what to build.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from llm_ocr.container.cuda import CudaMismatch, Driver, ImageCuda, verdict
from llm_ocr.launchers.core.spec import LaunchError, LaunchRequest

if TYPE_CHECKING:  # the families load pyarrow and numpy: imported where an image is chosen
    from llm_ocr.vlm.families import Family
    from llm_ocr.vlm.families.base import ServingImage

#: The GPU driver each platform documents (None: undocumented, checked by the job at start).
#: Cloud Run: https://cloud.google.com/run/docs/configuring/jobs/gpu ("Supported GPU types", L4).
PLATFORM_DRIVERS: dict[str, Driver | None] = {
    "hf-jobs": None,
    "cloud-run": Driver("535.216.03", (12, 2)),
    "sagemaker": None,
    "slurm": None,
    "k8s": None,
    "aws-batch": None,
}
#: The platforms in the order ``llm-ocr models`` lists them.
PLATFORMS = ("hf-jobs", "sagemaker", "cloud-run", "aws-batch", "slurm", "k8s")


class NoImage(Exception):
    """A family has no known image for a platform; the message says why and what to build."""


@dataclass(frozen=True)
class ImageChoice:
    """The image a family's launches use on one platform, and the driver check's word on it."""

    platform: str
    image: ServingImage
    #: The CUDA check against the platform's documented driver, or why there is none.
    check: str


def image_for(family: Family, platform: str) -> ImageChoice:
    """The image ``family``'s server runs in on ``platform``; :class:`NoImage` when there is none
    (the message names ``--image`` and what to build)."""
    images = family.images
    if platform == "sagemaker":
        if images.sagemaker is None:
            raise NoImage(_none(family, platform, images.sagemaker_missing or images.missing
                                or "no AWS vLLM Deep Learning Container is named"))
        return ImageChoice(platform, images.sagemaker, "SageMaker Processing hosts' drivers are not documented: the "
                                                       "job checks its CUDA at start")
    if not images.docker:
        raise NoImage(_none(family, platform, images.missing or "no image is named"))
    driver = PLATFORM_DRIVERS.get(platform)
    if driver is None:
        # An undocumented driver: the build that runs on the most drivers (CUDA minor version
        # compatibility covers a whole major version), checked again by the job at start.
        image = min(images.docker, key=lambda i: i.cuda)
        where = ("the cluster's GPU driver is not known" if platform in ("slurm", "k8s")
                 else "the platform does not document its GPU driver")
        return ImageChoice(platform, image, f"{where}: the job checks CUDA {image.cuda[0]}.{image.cuda[1]} "
                                            "against it at start")
    refusals = []
    for image in sorted(images.docker, key=lambda i: i.cuda):
        try:
            note = verdict(driver, ImageCuda(image.cuda, "the family's declaration"), image_name=image.ref)
        except CudaMismatch:
            refusals.append(f"{image.ref} (CUDA {image.cuda[0]}.{image.cuda[1]})")
            continue
        return ImageChoice(platform, image, note)
    raise NoImage(_none(family, platform, (
        f"its images are built for a newer CUDA than the platform's GPU driver {driver.version} runs (CUDA "
        f"{driver.cuda[0]}.{driver.cuda[1]}): {', '.join(refusals)}; build one FROM a CUDA {driver.cuda[0]} build of "
        "the same vLLM"
    )))


def choices(family: Family) -> dict[str, ImageChoice | str]:
    """Every platform's image for ``family``, or why there is none (``llm-ocr models``)."""
    out: dict[str, ImageChoice | str] = {}
    for platform in PLATFORMS:
        try:
            out[platform] = image_for(family, platform)
        except NoImage as exc:
            out[platform] = str(exc)
    return out


def _none(family: Family, platform: str, why: str) -> str:
    return (f"{family.title} ({family.name}) has no stock image for {platform}: {why}. Pass --image IMAGE "
            "(an image with that vLLM and llm-ocr in a venv of its own; see the platform's Dockerfile)")


def launch_image(request: LaunchRequest, platform: str) -> ImageChoice | None:
    """The stock image of ``request``'s jobs on ``platform`` when they serve a model and no
    ``--image`` is given (None otherwise); :class:`~llm_ocr.launchers.core.spec.LaunchError` when the
    family has none there. Platforms call it first, so nothing is checked, built or sent before."""
    if request.image or not request.needs_model:
        return None
    from llm_ocr.vlm.families import family_named

    try:
        return image_for(family_named(request.family), platform)
    except NoImage as exc:
        raise LaunchError(str(exc)) from None


def image_note(request: LaunchRequest, chosen: ImageChoice, shown: str | None = None) -> str:
    """The plan's note on the chosen image: which, its vLLM, for which family, and the CUDA check."""
    return f"image {shown or chosen.image.ref} (vLLM {chosen.image.vllm}) for {request.family}: {chosen.check}"
