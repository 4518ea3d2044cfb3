"""Typed options and their one binding to CLI flags and ``LLM_OCR_*`` environment variables.

Each option group is a pydantic model whose fields carry descriptions; :func:`add_options`
turns the fields into ``--kebab-case`` flags (help text from the description) and
:func:`resolve_options` builds the validated model from flags, then environment, then defaults.
"""

from __future__ import annotations

import argparse
import json
import os
import typing
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, Field, SecretStr, ValidationError, field_validator

from llm_ocr.vlm import families
from llm_ocr.vlm.recipes import DEFAULT_MODEL

ENV_PREFIX = "LLM_OCR_"

M = TypeVar("M", bound=BaseModel)


class JobOptions(BaseModel):
    """Where a stage reads and writes, which server it talks to, and how it runs."""

    output: str = Field(..., description="Output folder or URL (local path, s3://, gs://, hf://...).")
    endpoint: str | None = Field(
        None, description="OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1 (given: launch nothing)."
    )
    model: str = Field(DEFAULT_MODEL, description="Served model name.")
    recipe: str | None = Field(
        None,
        description="Model family whose recipe to use (request, server flags, parser), for a fine-tune served "
        "under another name: one of llm-ocr models' names (default: chosen from --model).",
    )
    api_key: SecretStr | None = Field(None, description="API key for the endpoint (prefer the LLM_OCR_API_KEY variable).")
    num_shards: int | None = Field(None, ge=1, description="Number of shards (default: from the platform, else 1).")
    shard_index: int | None = Field(None, ge=0, description="This shard's index (default: from the platform, else 0).")
    max_in_flight: int | None = Field(
        None, ge=1, description="Requests in flight at once (default: the GPU preset's max-num-seqs plus a queue, else 64)."
    )
    workers: int | None = Field(
        None, ge=0, description="Render/crop worker processes (default: one per core; 0 = a thread in-process)."
    )
    storage_options: dict[str, Any] = Field(
        default_factory=dict, description="JSON object of fsspec storage options for inputs and output."
    )
    progress: Literal["auto", "live", "log", "off"] = Field(
        "auto", description="Progress display: live on a terminal, periodic log lines otherwise."
    )
    progress_interval: float = Field(30.0, gt=0, description="Seconds between progress log lines.")
    flush_interval: float = Field(120.0, gt=0, description="Seconds between part writes at most (bounds loss on a crash).")
    grace_period: float = Field(30.0, ge=0, description="Seconds in-flight pages may finish after SIGTERM/SIGINT.")
    gpu_price_per_hour: float | None = Field(
        None, ge=0, description="US$ per GPU-hour for the cost estimate in the stats (default: the preset's list price)."
    )
    part_rows: int = Field(1000, ge=1, description="Rows per Parquet part at most.")

    @field_validator("recipe")
    @classmethod
    def _known_recipe(cls, value: str | None) -> str | None:
        if value is not None:
            families.family_named(value)  # raises with the choices
        return value


def _env_name(field: str) -> str:
    return ENV_PREFIX + field.upper()


def _is_bool(annotation: Any) -> bool:
    return annotation is bool or (typing.get_origin(annotation) is typing.Union and bool in typing.get_args(annotation) and len(typing.get_args(annotation)) == 2 and type(None) in typing.get_args(annotation))


def add_options(parser: argparse.ArgumentParser, *models: type[BaseModel], exclude: set[str] = frozenset()) -> None:  # type: ignore[assignment]
    """Add one ``--flag`` per field of ``models`` (defaults stay None: resolved later)."""
    for model in models:
        group = parser.add_argument_group(model.__name__, (model.__doc__ or "").strip().splitlines()[0])
        for name, info in model.model_fields.items():
            if name in exclude:
                continue
            flag = "--" + name.replace("_", "-")
            help_text = f"{info.description or ''} [env {_env_name(name)}]"
            if not info.is_required():
                default = info.get_default(call_default_factory=True)
                if default not in (None, {}, []):
                    help_text += f" (default: {default})"
            if _is_bool(info.annotation):
                group.add_argument(flag, dest=name, action=argparse.BooleanOptionalAction, default=None, help=help_text)
            else:
                group.add_argument(flag, dest=name, default=None, metavar=name.upper(), help=help_text)


def resolve_options(model: type[M], args: argparse.Namespace, **overrides: Any) -> M:
    """Build ``model`` from parsed flags, then ``LLM_OCR_*`` variables, then field defaults."""
    values: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        value = overrides.get(name, getattr(args, name, None))
        if value is None:
            value = os.environ.get(_env_name(name))
        if value is None:
            continue
        annotation = str(info.annotation)
        if isinstance(value, str) and ("dict" in annotation or "list" in annotation):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as exc:
                raise OptionError(f"--{name.replace('_', '-')} must be JSON: {exc}") from exc
        values[name] = value
    try:
        return model.model_validate(values)
    except ValidationError as exc:
        problems = "; ".join(
            f"--{'.'.join(str(p) for p in err['loc']).replace('_', '-')}: {err['msg']}" for err in exc.errors()
        )
        raise OptionError(problems) from exc


class OptionError(Exception):
    """An option has an invalid value; the message names the flag."""
