"""The stage table: every stage's command, API function and keyword types agree, and a new stage
is one entry (its runner and options aside), seen as a user sees them: ``llm-ocr STAGE --help all``,
``help(llm_ocr.STAGE)``, a call, in subprocesses."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli

STAGE_NAMES = ["run", "extract", "describe", "assemble", "fields"]

#: The command line's short spellings, which keywords do not have all of (``from`` is Python's), and
#: ``--json`` (how the command ends: a Python caller has the result itself).
CLI_ONLY = {"schema", "from", "help", "json"}


def help_options(stage: str) -> set[str]:
    """The long options ``llm-ocr STAGE --help all`` lists, in snake_case (``--no-x`` as ``x``)."""
    done = run_cli(stage, "--help", "all", env={"COLUMNS": "200"})
    assert done.returncode == 0, done.stderr
    flags = re.findall(r"^\s{2}--([a-z0-9-]+)", done.stdout, flags=re.MULTILINE)
    return {flag.replace("-", "_") for flag in flags} - CLI_ONLY


def signature_options(stage: str) -> dict[str, str]:
    """The parameters of ``llm_ocr.STAGE`` as ``inspect.signature`` (and so ``help()``) shows them."""
    code = ("import inspect, json, llm_ocr; "
            f"print(json.dumps({{n: str(p.kind) for n, p in inspect.signature(llm_ocr.{stage}).parameters.items()}}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120, check=True)
    parameters: dict[str, str] = json.loads(done.stdout)
    return parameters


@pytest.mark.parametrize("stage", STAGE_NAMES)
def test_help_of_each_api_function_lists_the_options_its_command_takes(stage: str) -> None:
    """``help(llm_ocr.fields)`` once showed only ``**options``: each function's signature must name
    every option of ``llm-ocr STAGE`` as a keyword-only parameter, and nothing else."""
    parameters = signature_options(stage)
    keywords = {name for name, kind in parameters.items() if kind == "KEYWORD_ONLY"}
    assert "VAR_KEYWORD" not in parameters.values()
    assert keywords == help_options(stage) - {"output"}
    positional = [name for name, kind in parameters.items() if kind == "POSITIONAL_OR_KEYWORD"]
    assert positional == (["inputs", "output"] if stage in ("run", "extract") else ["output"])


def test_pydoc_shows_the_options_of_fields() -> None:
    done = subprocess.run([sys.executable, "-m", "pydoc", "llm_ocr.fields"], capture_output=True, text=True, cwd=REPO,
                          timeout=120, check=True, env={"PAGER": "cat", "PATH": "/usr/bin:/bin"})
    assert "fields_schema: 'str | None' = None" in done.stdout
    assert "fields_from: \"Literal['markdown', 'images', 'both']\" = 'markdown'" in done.stdout
    assert "A schema that cannot be used raises" in done.stdout  # its docstring


def test_a_new_stage_is_one_entry_in_the_table(tmp_path: Path) -> None:
    """A stage added to the table (as a later ``escalate`` will be: it reads OUT and takes --model)
    is a command with its options and help, an API function with its options, a stage ``arun`` and
    the launcher accept, and runs its runner, named only by its import path."""
    (tmp_path / "escalation.py").write_text(textwrap.dedent("""
        from llm_ocr.runners.shard import ShardOutcome

        async def escalate_shard(spec, stop=None):
            print("RUNNER", spec.job.output, spec.job.model, spec.inputs, flush=True)
            return ShardOutcome(1, {"stage": "escalate"})
    """))
    (tmp_path / "main.py").write_text(textwrap.dedent("""
        import asyncio, inspect, sys
        from llm_ocr.stage_table import STAGES, Stage

        STAGES["escalate"] = Stage(
            "escalate", ("job", "client"), "escalation:escalate_shard", markers=("extract",),
            summary="flagged pages of OUT/extract -> a second model", description="Escalate flagged pages.",
            doc="Read the flagged pages of ``output/extract`` again with another model.",
        )
        import llm_ocr
        from llm_ocr.cli import main
        from llm_ocr.launchers.core.spec import LaunchOptions

        print("SIGNATURE", inspect.signature(llm_ocr.escalate))
        print("DOC", llm_ocr.escalate.__doc__)
        print("CALL", llm_ocr.escalate(sys.argv[1], model="big-model").exit_code)
        print("ARUN", asyncio.run(llm_ocr.arun(None, sys.argv[1], stage="escalate")).exit_code)
        print("LAUNCH", LaunchOptions(output="hf://datasets/o/n", num_shards=2, stage="escalate").stage)
        print("CLI", main(["escalate", "--output", sys.argv[1], "--model", "cli-model"]))
        main(["escalate", "--help", "all"])
    """))
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, str(tmp_path / "main.py"), str(out)], capture_output=True, text=True,
                          cwd=tmp_path, timeout=120, check=False, env={"PYTHONPATH": f"{tmp_path}:{REPO}", "COLUMNS": "200",
                                                           "PATH": "/usr/bin:/bin"})
    lines = done.stdout.splitlines()
    assert done.returncode == 0, done.stderr
    signature = next(line for line in lines if line.startswith("SIGNATURE"))
    assert "(output: 'PathOrUrl', *, endpoint:" in signature and "max_attempts: 'int' = 4" in signature
    assert "dpi" not in signature  # not an option of its groups
    assert "DOC Read the flagged pages of ``output/extract`` again with another model." in lines
    runs = [line for line in lines if line.startswith("RUNNER")]
    assert runs == [f"RUNNER {out} big-model []", f"RUNNER {out} deepseek-ai/DeepSeek-OCR []", f"RUNNER {out} cli-model []"]
    assert "CALL 1" in lines and "ARUN 1" in lines and "LAUNCH escalate" in lines and "CLI 1" in lines
    assert "Escalate flagged pages." in done.stdout and "--max-attempts MAX_ATTEMPTS" in done.stdout
    assert "exit status: 0 every page ok or truncated" in done.stdout


def test_a_run_that_cannot_run_raises_the_runners_own_error(tmp_path: Path) -> None:
    """One ``RunError``: the one a runner raises reaches the caller as it is, not re-raised as a
    second class with the first as its cause (two tracebacks for one message)."""
    code = f"import llm_ocr; llm_ocr.assemble({str(tmp_path / 'empty')!r})"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120,
                          check=False)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1].endswith("RunError: nothing to assemble: "
                                                         f"{tmp_path / 'empty'} holds no Extract or Describe output; "
                                                         "run those stages first")
    assert "direct cause" not in done.stderr
    assert len(re.findall(r"^\S*RunError: ", done.stderr, flags=re.MULTILINE)) == 1
