"""Every family's request against real vLLM serving a tiny model of the family's architecture.

The simulated server checks each request against the family's recipe
(``llm_ocr/engines/sim/checks.py``); this tier checks what only vLLM itself can: that the architecture's chat template and processor
accept the request the recipe builds (the message roles, the image and text parts in the
recipe's order, the prompt text or none), that the sampling and vLLM-only fields arrive in the
engine's ``SamplingParams`` as the recipe sets them, and that the family's server flags start
vLLM. One server per architecture (``tests/vllm_real/tiny_models.py``), started through
llm-ocr's own launcher (:class:`~llm_ocr.serving.vllm.process.ManagedServer` on
:func:`~llm_ocr.serving.command_lines.vllm_command`), serves every family of that architecture
under each family's model name (``--served-model-name`` takes several); Qwen2.5-VL's is the
tier's shared server (``tiny_server``: with an API key, and the generic recipe's name besides); ``llm_ocr.extract``
then reads real PDFs through it once per family, in the test's process (what is tested is the
family's request, not the command's start-up: ``llm-ocr run``'s test launches from the command).
"""

from __future__ import annotations

import importlib.util
import shlex
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
from tests.conftest import read_stage
from tests.docs import make_corpus
from tests.vllm_real.conftest import SERVER_ARGS, SERVER_COMMAND, VLLM_ENV
from tests.vllm_real.servers import (
    ARCHITECTURES,
    DUMMY_WEIGHTS,
    SHARED_ARCHITECTURE,
    LoopThread,
    TierServer,
    served_names,
)

# func_only: the guard times each test's own body. The module's first test also starts every
# architecture's server (the ``servers`` fixture, bounded by its own waits: 900 s for the starts);
# counted in the first test's 600 s, the guard fired while that test's extract was still working
# (a fresh clone's tier beside another run's, 2026-11-27: 14 CPU vLLM servers on 2 cores).
pytestmark = [pytest.mark.vllm, pytest.mark.timeout(600, func_only=True)]

FAMILY_MODELS = [(arch, name) for arch, names in ARCHITECTURES.items() for name in names]


@pytest.fixture(scope="module")
def servers(request: pytest.FixtureRequest, tiny_models: dict[str, Path], server_loop: LoopThread,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, TierServer]]:
    """Every architecture's server: the shared one (``tiny_server``) for :data:`SHARED_ARCHITECTURE`,
    one of its own for each other, started while the shared one starts (two starts at a time,
    :attr:`LoopThread.START_SLOTS`) and stopped at the end of the module."""
    logs = tmp_path_factory.mktemp("family-servers")
    started: dict[str, TierServer] = {}
    for arch, names in ARCHITECTURES.items():
        if arch == SHARED_ARCHITECTURE:
            continue
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

    starting = [server_loop.submit(server_loop.start(s.server)) for s in started.values()]
    try:
        shared = request.getfixturevalue("tiny_server")  # starts beside them, if not yet started
        for future in starting:
            future.result(timeout=900)
        yield {SHARED_ARCHITECTURE: shared, **started}
    finally:
        for future in starting:
            future.cancel()
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
            max_tokens=24, tile_dense_pages=False, workers=0, progress="off", api_key=server.api_key,
            **({"recipe": recipe} if recipe else {}),
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
