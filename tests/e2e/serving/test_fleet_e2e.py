"""A machine with four GPUs: a fake nvidia-smi lists them, the fake `vllm` runs the simulator on
each, and llm-ocr starts one server per GPU behind its dispatcher."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

from tests.conftest import REPO, read_stage, run_cli
from tests.docs import make_corpus
from tests.serving.test_presets import fake_smi

FAKES = REPO / "tests" / "fakes"
#: What nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits prints for 4 L4s.
FOUR_L4 = "NVIDIA L4, 23034\n" * 4


def env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {
        "PATH": f"{FAKES}{os.pathsep}{fake_smi(tmp_path, FOUR_L4)}{os.pathsep}{os.environ['PATH']}",
        "LLM_OCR_TEST_PYTHON": sys.executable,
        "FAKE_VLLM_ARGV_FILE": str(tmp_path / "argv-{gpu}.json"),
        "FAKE_VLLM_SIM_ARGS": f"--prefill-ms 100 --request-log {tmp_path / 'requests-{gpu}.jsonl'}",
        **extra,
    }


def extract(tmp_path: Path, *extra: str, **environ: str):
    make_corpus(tmp_path / "docs", documents=8, pages=3)
    return run_cli(
        "extract", str(tmp_path / "docs"), "--output", str(tmp_path / "out"), "--engine", "vllm", "--workers", "0",
        "--progress", "off", *extra, env=env(tmp_path, **environ), timeout=240,
    )  # fmt: skip


def served(tmp_path: Path, gpu: int) -> int:
    """Chat requests the server on GPU ``gpu`` answered."""
    path = tmp_path / f"requests-{gpu}.jsonl"
    return sum(json.loads(line).get("status") == 200 for line in path.read_text().splitlines()) if path.exists() else 0


def test_four_gpus_get_four_servers_and_share_the_pages(tmp_path: Path) -> None:
    result = extract(tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    argvs = [json.loads((tmp_path / f"argv-{gpu}.json").read_text()) for gpu in range(4)]
    ports = {a[a.index("--port") + 1] for a in argvs}
    assert len(ports) == 4  # one server per GPU, each on its own port
    assert all(a[a.index("--max-num-seqs") + 1] == "64" for a in argvs)  # each sized as one L4
    assert all("--data-parallel-size" not in a for a in argvs)
    counts = [served(tmp_path, gpu) for gpu in range(4)]
    assert sum(counts) == 24 and min(counts) >= 5, counts  # the dispatcher shared the pages
    rows = read_stage(tmp_path / "out", "extract")
    assert len(rows) == 24 and {r["status"] for r in rows} == {"ok"}
    logs = sorted(p.name for p in (tmp_path / "out/_state/logs").glob("*.log"))
    assert logs == [f"server-00000-of-00001-gpu{g}.log" for g in range(4)]
    gpu = json.loads((tmp_path / "out/_state/extract/done-00000-of-00001.json").read_text())["gpu"]
    assert gpu["preset"] == "l4-24gb-x4" and gpu["gpus"] == 4 and gpu["price_per_gpu_hour"] == 0.80


def test_one_gpu_dying_for_good_does_not_stop_the_others(tmp_path: Path) -> None:
    """The server on GPU 2 crashes at its third request and has no restarts left: its pages in
    flight go to the other three, and the run finishes every page."""
    result = extract(tmp_path, "--server-max-restarts", "0", "--max-in-flight", "8", FAKE_VLLM_SIM_ARGS_GPU2="--crash-after 3")
    assert result.returncode == 0, result.stderr[-3000:]
    assert re.search(r"gpu 2\].*gone for good|gone for good.*3 of 4 servers left", result.stderr, re.S), result.stderr[-3000:]
    rows = read_stage(tmp_path / "out", "extract")
    assert sorted((r["doc_id"], r["page"]) for r in rows) == [(f"doc{d:03d}.pdf", p) for d in range(8) for p in (1, 2, 3)]
    assert {r["status"] for r in rows} == {"ok"}
    # It died on its third request; the first two may still have been in flight then.
    lost_gpu = served(tmp_path, 2)
    assert lost_gpu <= 2
    assert sum(served(tmp_path, g) for g in (0, 1, 3)) == 24 - lost_gpu  # each page answered once


def test_gpus_flag_and_vllm_parallel_flags_mean_one_server(tmp_path: Path) -> None:
    result = extract(tmp_path, "--server-args", "--data-parallel-size 4")
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.glob("argv-*.json")) == ["argv-.json"]  # one server, no device set
    argv = json.loads((tmp_path / "argv-.json").read_text())
    assert argv[-2:] == ["--data-parallel-size", "4"]


def test_a_gpu_whose_server_cannot_start_is_left_out(tmp_path: Path) -> None:
    """ServerFleet alone: the server on device 1 exits at once; the other two serve."""
    import asyncio

    from llm_ocr.serving.command_lines import free_port, sim_command
    from llm_ocr.serving.vllm.fleet import ServerFleet
    from llm_ocr.serving.vllm.process import ServerFailed

    def command(device: str, port: int) -> list[str]:
        if device == "1":
            return [sys.executable, "-c", "import sys; print('CUDA error: uncorrectable ECC error'); sys.exit(1)"]
        return sim_command("m", host="127.0.0.1", port=port, extra_args=["--instant"])

    async def go(devices: list[str]) -> tuple[list[str], dict[str, float]]:
        fleet = ServerFleet(
            devices, command, ports=free_port, host="127.0.0.1", log_path=lambda d: tmp_path / f"gpu{d}.log",
            startup_timeout=60, max_restarts=0,
        )  # fmt: skip
        async with fleet:
            return [s.name for s in fleet.members], await fleet.metrics()

    names, metrics = asyncio.run(go(["0", "1", "2"]))
    assert names == ["vllm[gpu 0]", "vllm[gpu 2]"]
    assert metrics["running"] == 0 and "waiting" in metrics
    assert "ECC error" in (tmp_path / "gpu1.log").read_text()
    try:
        asyncio.run(go(["1"]))
    except ServerFailed as exc:
        assert "none of the 1 servers started" in str(exc)
    else:
        raise AssertionError("a fleet with no server up must fail")


def test_a_page_that_kills_whichever_gpu_it_is_sent_to_is_quarantined_and_no_server_is_lost(tmp_path: Path) -> None:
    """The crash tracker over four servers: each server's deaths are its own, so the poison page
    is isolated and quarantined without spending any one server's restart budget."""
    ledger = tmp_path / "crashes.txt"
    sim = f"--corpus {tmp_path / 'docs'} --prefill-ms 100 --crash-on-page doc002.pdf:3 --crash-ledger {ledger}"
    result = extract(tmp_path, "--server-max-restarts", "2", FAKE_VLLM_SIM_ARGS=sim)
    assert result.returncode == 1, result.stderr[-3000:]  # finished, one page failed
    rows = read_stage(tmp_path / "out", "extract")
    assert sorted((r["doc_id"], r["page"]) for r in rows) == [(f"doc{d:03d}.pdf", p) for d in range(8) for p in (1, 2, 3)]
    (bad,) = [r for r in rows if r["status"] != "ok"]
    assert (bad["doc_id"], bad["page"], bad["quarantined"]) == ("doc002.pdf", 3, True)
    crashes = ledger.read_text().splitlines()
    assert bad["error"] == f"the model server crashed on this page {len(crashes)} times; quarantined"
    assert "gone for good" not in result.stderr  # no server's budget was spent on the poison page
