"""A launched server's output reaches the console and ``OUT/_state/logs`` only redacted.

The server's stdout and stderr go through :class:`~llm_ocr.serving.vllm.server_log.LogRelay`,
which redacts each whole line with a :class:`~llm_ocr.redaction.Redactor` made for the server's
command line and environment, before anything is written to its log file; the "last lines of
the server log" llm-ocr prints read that file.
"""

from __future__ import annotations

import os
import sys
import typing
from pathlib import Path

from pydantic import BaseModel, SecretStr

from llm_ocr import options
from llm_ocr.config import env_name
from llm_ocr.redaction import Redactor, is_secret_name
from llm_ocr.serving.vllm.server_log import LogRelay
from tests.conftest import REPO, run_cli

ECHO_SERVER = REPO / "tests" / "fakes" / "echo_server.py"

#: Variables of other tools that llm-ocr or its clients read secrets from.
THIRD_PARTY_SECRETS = (
    "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
    "GOOGLE_OAUTH_ACCESS_TOKEN", "OPENAI_API_KEY", "VLLM_API_KEY",
)


def llm_ocr_secret_variables() -> list[str]:
    """``LLM_OCR_*`` variables of every secret option (``--api-key`` and the stages' own keys)."""
    names = []
    for model in vars(options).values():
        if isinstance(model, type) and issubclass(model, BaseModel) and model is not BaseModel:
            for field, info in model.model_fields.items():
                if SecretStr in (info.annotation, *typing.get_args(info.annotation)):
                    names.append(env_name(field))
    return sorted(set(names))


def test_a_secret_cut_in_two_by_the_pipe_is_redacted_whole(tmp_path: Path) -> None:
    secret = "sk-PLANTED-0123456789abcdefXYZ"
    read, write = os.pipe()
    log = tmp_path / "server.log"
    with open(read, "rb") as source:
        relay = LogRelay(source, log, Redactor([secret], environ={}), "test").start()
        # Three writes: the key split across the first two, a last line without its end.
        for piece in (b"key sk-PLANTED-0123", b"456789abcdefXYZ accepted\nprogress 10%\rprogress 20%\r",
                      f"bye {secret}".encode()):
            os.write(write, piece)
        os.close(write)
        assert relay.wait(timeout=60)
    assert log.read_bytes().decode() == "key *** accepted\nprogress 10%\rprogress 20%\rbye ***"


def test_every_secret_a_server_repeats_is_redacted_on_the_console_and_in_its_log(tmp_path: Path) -> None:
    """A server started with every secret-bearing flag and variable llm-ocr knows repeats them
    all and exits: neither llm-ocr's console nor ``OUT/_state/logs`` holds one of them."""
    variables = [*THIRD_PARTY_SECRETS, *llm_ocr_secret_variables()]
    assert "LLM_OCR_API_KEY" in variables and "LLM_OCR_DESCRIBE_API_KEY" in variables
    assert all(is_secret_name(name) for name in variables)  # the one list knows them all
    env = {name: f"PLANTED-{name.lower()}-0123456789" for name in variables}
    # Two keys stay on the server's command line (one alone would move to VLLM_API_KEY), tokens
    # after flags in both forms, and credentials in a URL.
    server_args = ("--api-key sk-PLANTED-key-one-012345 sk-PLANTED-key-two-012345 --hf-token=hf_PLANTEDhubtoken0123456 "
                   "--token PLANTED-bare-token-0123 --download-dir https://user:PLANTED-url-password@example.org/w?"
                   "token=PLANTED-url-token&page=1 --instant")
    out = tmp_path / "out"
    result = run_cli(
        "extract", str(REPO / "samples" / "notes.png"), "--output", str(out), "--engine", "vllm", "--workers", "0",
        "--server-command", f"{sys.executable} {ECHO_SERVER}", "--server-args", server_args,
        env={**env, "ECHO_SERVER_REPEAT": ",".join(variables)},
    )
    assert result.returncode == 2, result.stderr[-3000:]
    logs = list((out / "_state" / "logs").glob("*"))
    assert logs
    stored = "".join(path.read_text() for path in logs)
    # The server did repeat them all (redacted), on the console and in the file...
    assert "last lines of the server log" in result.stderr and "echo-server: error: unrecognized" in result.stderr
    assert result.stderr.count("echo-server repeats ***") == len(variables)
    assert "echo-server env HF_TOKEN=***" in stored and "--api-key *** ***" in stored
    assert "https://***@example.org/w?token=***&page=1" in stored
    # ...and nothing of any of them is left anywhere.
    for where, text in (("stdout", result.stdout), ("stderr", result.stderr), ("log", stored)):
        assert "PLANTED" not in text, f"{where}: {[line for line in text.splitlines() if 'PLANTED' in line][:3]}"
