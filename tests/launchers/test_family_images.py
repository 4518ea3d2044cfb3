"""Each model family's launches run in the image its recipe names, chosen per platform by the
platform's GPU driver; a family with no image there stops the launch before anything is sent.

The launches are the CLI's (``llm-ocr launch PLATFORM ... --model NAME``) on a machine whose
every platform endpoint is unreachable: dry runs plan offline, and a real launch of a family
without an image must fail on the image, naming ``--image``, not on the network. Every test's
command lines run in one interpreter (:func:`ran`): an interpreter per test paid the launcher's
imports five times for a few dry runs each.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from tests.launchers.common import llm_ocr_batch
from tests.launchers.test_real_platform_limits import PLATFORM_ARGS, _offline_env

DRY = ["--num-shards", "1", "--dry-run", "--offline"]


def _dry(platform: str, *extra: str) -> list[str]:
    return ["launch", platform, *PLATFORM_ARGS[platform], *DRY, *extra]


_REAL_HF = ["launch", "hf-jobs", *PLATFORM_ARGS["hf-jobs"], "--num-shards", "1"]
_K8S = ["launch", "k8s", "s3://scans/2024", "--output", "s3://ocr/2024", "--num-shards", "1", "--dry-run", "--offline",
        "--yaml"]
#: The command lines of each test, by test.
CASES: dict[str, list[list[str]]] = {
    "own image": [
        _dry("hf-jobs", "--model", "lightonai/LightOnOCR-3-4B"),
        _dry("hf-jobs", "--model", "deepseek-ai/DeepSeek-OCR"),
        _dry("cloud-run", "--model", "baidu/Unlimited-OCR"),
        _dry("sagemaker", "--model", "deepseek-ai/DeepSeek-OCR"),
        # A fine-tune served under another name gets its family's image through --recipe.
        _dry("hf-jobs", "--model", "my-ocr", "--recipe", "unlimited-ocr"),
    ],
    "no image": [
        # No stock image: vLLM 0.30.0 with transformers 5.16.1 (a real launch, every endpoint unreachable).
        [*_REAL_HF, "--model", "lightonai/LightOnOCR-3-1B"],
        # LightOnOCR-3's only image is a CUDA 13 build; Cloud Run's L4 driver runs CUDA 12.2.
        _dry("cloud-run", "--model", "lightonai/LightOnOCR-3-4B"),
        # No AWS Deep Learning Container has Unlimited-OCR's vLLM.
        _dry("sagemaker", "--model", "baidu/Unlimited-OCR"),
        # --image is the way out: the same launches then plan.
        [*_REAL_HF[:-2], *DRY, "--model", "lightonai/LightOnOCR-3-1B", "--image", "me/lightonocr3-1b:1"],
        _dry("sagemaker", "--model", "baidu/Unlimited-OCR", "--image",
             "123456789012.dkr.ecr.eu-west-1.amazonaws.com/unlimited-ocr:1"),
    ],
    "models": [["models"], ["models", "lightonocr-3"], ["models", "--json"]],
    "k8s": [
        [*_K8S, "--model", "datalab-to/surya-ocr-2"],
        [*_K8S, "--model", "openbmb/MiniCPM-OCR-1.0"],
        [*_K8S, "--model", "openbmb/MiniCPM-OCR-1.0", "--image", "me/minicpm-ocr:1"],
    ],
}


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    """The result of each test's command lines, by test: all run in one interpreter, on a machine
    whose endpoints are unreachable and which has no kubeconfig."""
    env = {k: v for k, v in _offline_env(tmp_path_factory.mktemp("images")).items() if not k.startswith("KUBE")}
    results = iter(llm_ocr_batch([(argv, {}) for cases in CASES.values() for argv in cases], env))
    return {name: [next(results) for _ in cases] for name, cases in CASES.items()}


def test_a_family_runs_in_its_own_image_on_each_platform(ran: dict[str, list[dict[str, Any]]]) -> None:
    lighton, deepseek, unlimited, sagemaker, fine_tune = ran["own image"]
    images = []
    for result in (lighton, deepseek, unlimited, sagemaker, fine_tune):
        assert result["code"] == 0, result["stderr"]
        (job,) = json.loads(result["stdout"])["jobs"]
        images.append(job["image"])
        assert job["env"].get("LLM_OCR_IMAGE") == job["image"]  # named by the job's own CUDA check at start
    assert images[0] == "vllm/vllm-openai:v0.30.0"  # LightOnOCR-3's pin
    assert images[1] == "vllm/vllm-openai:v0.29.0-cu129"  # DeepSeek-OCR's: the stock image, unchanged
    # Cloud Run's L4 driver runs CUDA 12.2: of Unlimited-OCR's two builds, the CUDA 12.9 one.
    assert images[2] == "docker.io/vllm/vllm-openai:unlimited-ocr-cu129"
    assert images[3].endswith(".amazonaws.com/vllm:0.14.0-gpu-py312-cu129-ubuntu22.04-sagemaker")
    assert images[4] == "vllm/vllm-openai:unlimited-ocr-cu129"
    # The plan says which image, for which family, and what the driver check found.
    assert "image docker.io/vllm/vllm-openai:unlimited-ocr-cu129" in unlimited["stderr"]
    assert "535.216.03" in unlimited["stderr"] and "minor version compatibility" in unlimited["stderr"]


def test_a_family_without_an_image_on_a_platform_stops_before_anything_is_sent(ran: dict[str, list[dict[str, Any]]]) -> None:
    one_b, cloud_run, sagemaker, one_b_image, sagemaker_image = ran["no image"]
    for result in (one_b, cloud_run, sagemaker):
        assert result["code"] == 2, result
        assert "--image" in result["stderr"] and result["stdout"] == ""
        assert "could not reach" not in result["stderr"]  # refused on the image, before any network call
    assert "transformers 5.16.1" in one_b["stderr"]
    assert "CUDA 12.2" in cloud_run["stderr"] and "vllm/vllm-openai:v0.30.0 (CUDA 13.0)" in cloud_run["stderr"]
    assert "no AWS Deep Learning Container" in sagemaker["stderr"]
    for result, image in ((one_b_image, "me/lightonocr3-1b:1"),
                          (sagemaker_image, "123456789012.dkr.ecr.eu-west-1.amazonaws.com/unlimited-ocr:1")):
        assert result["code"] == 0, result["stderr"]
        (job,) = json.loads(result["stdout"])["jobs"]
        assert job["image"] == image


def test_models_prints_each_familys_image_per_platform(ran: dict[str, list[dict[str, Any]]]) -> None:
    (listing, one, as_json) = ran["models"]
    assert listing["code"] == one["code"] == as_json["code"] == 0
    rows = {row["family"]: row for row in json.loads(as_json["stdout"])}
    assert rows["lightonocr-3"]["images"]["hf-jobs"]["image"] == "vllm/vllm-openai:v0.30.0"
    assert rows["lightonocr-3"]["images"]["hf-jobs"]["vllm"] == "0.30.0"
    assert "--image" in rows["lightonocr-3"]["images"]["cloud-run"]["missing"]
    assert "--image" in rows["infinity-parser2"]["images"]["hf-jobs"]["missing"]
    assert rows["deepseek-ocr"]["images"]["sagemaker"]["vllm"] == "0.14.0"
    assert "cloud-run: none, pass --image" in one["stdout"]
    assert "535.216.03" in one["stdout"]  # the Cloud Run driver the refusal is about
    assert "unlimited-ocr-cu129" in listing["stdout"]


def test_the_stock_images_are_the_ones_the_containers_and_launchers_name() -> None:
    # The job's own CUDA check names an image to use instead (container/cuda.py, which may not
    # import the families): it must be one of the stock images the families fall back to.
    from llm_ocr.container.cuda import VLLM_IMAGES
    from llm_ocr.launchers.sagemaker.adapter import DLC_VLLM_TAG
    from llm_ocr.vlm.families.base import STOCK_IMAGES

    assert {i.cuda[0]: i.ref for i in STOCK_IMAGES.docker} == VLLM_IMAGES
    assert STOCK_IMAGES.sagemaker is not None and STOCK_IMAGES.sagemaker.ref == DLC_VLLM_TAG


STOCK = "vllm/vllm-openai:v0.29.0-cu129"
#: Every family's Hugging Face Jobs image, as its sources name it (None: none is published, the
#: launch asks for --image). A family added to the registry must be added here, with its reason.
HF_JOBS_IMAGE: dict[str, str | None] = {
    "deepseek-ocr": STOCK,  # the stock images were chosen for it (vLLM 0.29.0)
    "unlimited-ocr": "vllm/vllm-openai:unlimited-ocr-cu129",  # its own build (baidu/Unlimited-OCR README)
    "olmocr": STOCK, "dots-ocr": STOCK, "chandra": STOCK, "chandra-1": STOCK, "mineru": STOCK,
    "granite-docling": STOCK, "paddleocr-vl": STOCK, "glm-ocr": STOCK, "nanonets": STOCK,
    "infinity-parser2": None,  # vLLM 0.17.1 with transformers 5.3.0: no stock image
    "lightonocr-3-1b": None,  # vLLM 0.30.0 with transformers 5.16.1: no stock image
    "lightonocr-3": "vllm/vllm-openai:v0.30.0",  # LightOn's pin
    "lightonocr-bbox": STOCK, "lightonocr": STOCK,
    "surya": "vllm/vllm-openai:v0.20.1",  # Datalab's launcher (surya/settings.py VLLM_DOCKER_IMAGE)
    "qianfan-ocr": "vllm/vllm-openai:v0.32.0-cu129",  # upstream vLLM with the architecture
    "qianfan-ocr-think": "vllm/vllm-openai:v0.32.0-cu129",
    "minicpm-ocr": None,  # OpenBMB's own image, no pinned tag published
    "hunyuan-ocr": STOCK,  # vLLM >= 0.11.0
    "firered-ocr": STOCK,  # a Qwen3-VL fine-tune
    "qwen2.5-vl": STOCK, "qwen3-vl": STOCK, "generic": STOCK,
}  # fmt: skip


def test_every_family_names_its_image_or_why_not_on_every_platform(ran: dict[str, list[dict[str, Any]]]) -> None:
    as_json = ran["models"][2]  # `llm-ocr models --json`
    assert as_json["code"] == 0, as_json["stderr"]
    rows = {row["family"]: row for row in json.loads(as_json["stdout"])}
    from llm_ocr.vlm.families import names

    assert set(rows) == set(names()) == set(HF_JOBS_IMAGE)  # every family, listed and checked here
    for family, row in rows.items():
        assert set(row["images"]) == {"hf-jobs", "sagemaker", "cloud-run", "aws-batch", "slurm", "k8s"}, family
        # AWS Batch's GPU AMI documents no driver either: the same build as Hugging Face Jobs, checked at start.
        assert row["images"]["aws-batch"].get("image") == row["images"]["hf-jobs"].get("image"), family
        for platform, choice in row["images"].items():
            if "missing" in choice:
                assert "--image" in choice["missing"] and family in choice["missing"], (family, platform)
            else:
                assert choice["image"] and choice["vllm"], (family, platform)
        hf = row["images"]["hf-jobs"]
        assert hf.get("image") == HF_JOBS_IMAGE[family], family
    # A family with no Docker Hub image has none on any Docker platform, and says what to build.
    assert "openbmbofficial/minicpm-ocr" in rows["minicpm-ocr"]["images"]["k8s"]["missing"]
    # Surya's CUDA 13 build is refused by Cloud Run's L4 driver (CUDA 12.2).
    assert "535.216.03" in rows["surya"]["images"]["cloud-run"]["missing"]
    assert rows["hunyuan-ocr"]["images"]["sagemaker"]["vllm"] == "0.14.0"


def test_kubernetes_runs_the_familys_image_and_stops_without_one(ran: dict[str, list[dict[str, Any]]]) -> None:
    surya, minicpm, minicpm_image = ran["k8s"]
    assert surya["code"] == 0, surya["stderr"]
    (job,) = [d for d in yaml.safe_load_all(surya["stdout"]) if d["kind"] == "Job"]
    assert job["spec"]["template"]["spec"]["containers"][0]["image"] == "vllm/vllm-openai:v0.20.1"
    assert "image vllm/vllm-openai:v0.20.1 (vLLM 0.20.1) for surya" in surya["stderr"]
    assert minicpm["code"] == 2 and minicpm["stdout"] == ""
    assert "--image" in minicpm["stderr"] and "openbmbofficial/minicpm-ocr" in minicpm["stderr"]
    assert minicpm_image["code"] == 0, minicpm_image["stderr"]
    (job,) = [d for d in yaml.safe_load_all(minicpm_image["stdout"]) if d["kind"] == "Job"]
    assert job["spec"]["template"]["spec"]["containers"][0]["image"] == "me/minicpm-ocr:1"
