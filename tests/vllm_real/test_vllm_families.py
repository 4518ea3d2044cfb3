"""Every family's request against real vLLM serving a tiny model of the family's architecture.

The simulated server checks each request against the family's recipe
(``llm_ocr/engines/sim/checks.py``); this tier checks what only vLLM itself can: that the architecture's chat template and processor
accept the request the recipe builds (the message roles, the image and text parts in the
recipe's order, the prompt text or none), that the sampling and vLLM-only fields arrive in the
engine's ``SamplingParams`` as the recipe sets them, and that the family's server flags start
vLLM. One server per architecture (``tests/vllm_real/tiny_models.py``), started through
llm-ocr's own launcher (:class:`~llm_ocr.serving.vllm.process.ManagedServer` on
:func:`~llm_ocr.serving.command_lines.vllm_command`), serves every family of that architecture
under each family's model name (``--served-model-name`` takes several); ``llm_ocr.extract``
then reads real PDFs through it once per family, in the test's process (what is tested is the
family's request, not the command's start-up: ``llm-ocr run``'s test launches from the command).
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import shlex
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

if importlib.util.find_spec("vllm") is None:
    pytest.skip("vLLM is not installed (pip install 'llm-ocr[test-vllm]'; see scripts/test-vllm)", allow_module_level=True)

import llm_ocr
from llm_ocr.gpu_presets import PRESETS
from llm_ocr.serving.command_lines import free_port, vllm_command
from llm_ocr.serving.vllm.process import ManagedServer
from llm_ocr.vlm.families import family_for
from tests.conftest import REPO, read_stage
from tests.docs import make_corpus
from tests.vllm_real.conftest import SERVER_ARGS, SERVER_COMMAND, VLLM_ENV
from tests.vllm_real.servers import LoopThread, TierServer

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(600)]

#: Each architecture's served model names: the first one's family flags start the server.
#: PaddleOCR-VL (1.0 to 1.6) is missing: vLLM 0.32's processor info reads
#: ``image_processor.max_pixels``, which transformers 5.19's ``PaddleOCRVLImageProcessor`` no
#: longer has (it keeps the bounds in ``size``), so vLLM cannot start it with this pair of
#: versions (docs/models.md). So is Unlimited-OCR: its DeepSeek-OCR encoder is built at full size
#: whatever the config, and vLLM's CPU attention has no R-SWA mask (docs/testing.md).
ARCHITECTURES: dict[str, tuple[str, ...]] = {
    "qwen2_5_vl": ("nanonets/Nanonets-OCR2-3B", "Qwen/Qwen2.5-VL-7B-Instruct", "allenai/olmOCR-2-7B-1025"),
    "qwen3_vl": ("Qwen/Qwen3-VL-8B-Instruct", "datalab-to/chandra", "FireRedTeam/FireRed-OCR"),
    "lightonocr": ("lightonai/LightOnOCR-2-1B", "lightonai/LightOnOCR-2-1B-bbox-soup", "lightonai/LightOnOCR-3-1B"),
    "glm_ocr": ("zai-org/GLM-OCR",),
    # LightOnOCR-3's 0.8B and 4B are Qwen3.5 models, as is Surya OCR 2; Infinity-Parser2-Pro a
    # Qwen3.5 mixture of experts, served with its own flags (--reasoning-parser qwen3...).
    "qwen3_5": ("lightonai/LightOnOCR-3-4B", "datalab-to/surya-ocr-2"),
    "qwen3_5_moe": ("infly/Infinity-Parser2-Pro",),
    # NAME@RECIPE: the model served as NAME, read with --recipe RECIPE (a variant of NAME's family).
    "qianfan_ocr": ("baidu/Qianfan-OCR", "baidu/Qianfan-OCR@qianfan-ocr-think"),
}
FAMILY_MODELS = [(arch, name) for arch, names in ARCHITECTURES.items() for name in names]


def served_names(names: tuple[str, ...]) -> list[str]:
    """The model names a server answers to (``NAME@RECIPE`` entries share NAME's)."""
    return list(dict.fromkeys(n.partition("@")[0] for n in names))
#: Weights are random anyway: vLLM draws them from the config (no weight files to build).
DUMMY_WEIGHTS = "--load-format dummy"


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every architecture's tiny model, built in one process (``LLM_OCR_TINY_MODELS=DIR`` caches)."""
    cached = os.environ.get("LLM_OCR_TINY_MODELS")
    root = Path(cached) if cached else tmp_path_factory.mktemp("tiny-models")
    missing = [a for a in ARCHITECTURES if not (root / a / "tiny_model.json").exists()]
    if missing:
        subprocess.run(
            [sys.executable, "-m", "tests.vllm_real.tiny_models", str(root), *missing],
            cwd=REPO, check=True, capture_output=True, timeout=600, env={**os.environ, **VLLM_ENV},
        )  # fmt: skip
    return {a: root / a for a in ARCHITECTURES}


@pytest.fixture(scope="module")
def servers(tiny_models: dict[str, Path], server_loop: LoopThread,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, TierServer]]:
    """Every architecture's server, started at once (their start-ups overlap) and stopped at the end."""
    logs = tmp_path_factory.mktemp("family-servers")
    started: dict[str, TierServer] = {}
    for arch, names in ARCHITECTURES.items():
        port = free_port()
        command = vllm_command(
            str(tiny_models[arch]), host="127.0.0.1", port=port, preset=PRESETS["l4-24gb"], served_model_name=names[0],
            family=family_for(names[0]), server_command=shlex.split(SERVER_COMMAND),
            extra_args=[*shlex.split(SERVER_ARGS), *shlex.split(DUMMY_WEIGHTS), "--served-model-name",
                        *served_names(names)],
        )  # fmt: skip
        log_path = logs / f"{arch}.log"
        server = ManagedServer(command, host="127.0.0.1", port=port, log_path=log_path, env=VLLM_ENV,
                               startup_timeout=420, max_restarts=0, name=f"vllm-{arch}")  # fmt: skip
        started[arch] = TierServer(arch, server, log_path, served_names(names))

    async def start_all() -> None:
        await asyncio.gather(*(s.server.start() for s in started.values()))
        await asyncio.gather(*(s.server.wait_ready() for s in started.values()))

    try:
        server_loop.run(start_all(), timeout=540)
        yield started
    finally:
        for s in started.values():
            server_loop.run(s.server.stop(), timeout=60)


@pytest.fixture(scope="module")
def documents(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Real PDFs (text layer, a chart on odd pages) every family reads."""
    folder = tmp_path_factory.mktemp("family-docs")
    make_corpus(folder, documents=1, pages=2)
    return folder


_LOCK = threading.Lock()  # one family's extract at a time per server: the log slices stay its own


@pytest.mark.parametrize(("architecture", "model"), FAMILY_MODELS, ids=[m for _, m in FAMILY_MODELS])
def test_family_request_is_accepted_by_its_architecture(
    servers: dict[str, TierServer], documents: Path, tmp_path: Path, architecture: str, model: str
) -> None:
    """``llm_ocr.extract(model=NAME)`` against the architecture's vLLM: every page answered
    (a request the chat template or processor refused would be an error row), and every
    request vLLM parsed carries the family's sampling fields."""
    server = servers[architecture]
    model, _, recipe = model.partition("@")
    with _LOCK:
        mark = server.mark()
        out = tmp_path / "out"
        result = llm_ocr.extract(
            str(documents), output=str(out), endpoint=server.base_url, model=model,
            # A random model runs to max_tokens without looping: without tile_dense_pages=False
            # every page would be taken for a dense one and read in pieces (the request is tested).
            max_tokens=24, tile_dense_pages=False, workers=0, progress="off", **({"recipe": recipe} if recipe else {}),
        )  # fmt: skip
        logged = server.requests(since=mark)
    assert result.ok, result
    rows = read_stage(out, "extract")
    assert sorted(r["page"] for r in rows) == [1, 2]
    for row in rows:
        assert row["status"] in ("ok", "truncated"), row["error"]
        assert row["model"] == model and row["prompt_tokens"] > 0
    assert logged, "vLLM logged no request"
    family = family_for(model, recipe or None)
    # every attempt's temperature (olmOCR-2 makes 8 attempts, its 7th at 0.9)
    ladder = {family.retries.temperature(i) for i in range(16)}
    for request in logged:
        assert request.param("max_tokens") == "24"
        assert float(request.param("temperature")) in ladder
        # The family's own sampling arrived in the engine as set. At temperature 0 vLLM samples
        # greedily and resets top_p to 1 and top_k to 0 itself (vllm/sampling_params.py,
        # SamplingParams.__post_init__): those two are checked on sampled requests only.
        greedy = float(request.param("temperature")) < 1e-5
        for name, value in family.sampling.fields().items():
            if name in ("top_p", "top_k") and (greedy or (name == "top_p" and family.retries.retry_top_p is not None)):
                continue
            assert float(request.param(name)) == pytest.approx(value), (name, request.params)
        for name, value in family.sampling.extra.items():
            if name == "skip_special_tokens":
                assert request.param(name) == str(value)
        assert request.output is not None
    # What the model generated reached the row: no server-side parser (Infinity-Parser2's
    # --reasoning-parser qwen3, with thinking disabled per request) moved it out of the answer.
    outputs = [r.output for r in logged if r.output is not None]
    for row in rows:
        # The row's text is the start of an answer vLLM generated; an empty row only where vLLM
        # generated an empty answer (a random model may end its answer at its first token).
        raw = row["raw"] or ""
        assert not outputs or (raw in outputs if not raw else any(o.startswith(raw) for o in outputs)), (
            row["raw"], row["status"], row["error"], outputs)
