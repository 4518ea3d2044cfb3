"""Write ``llm_ocr/keywords.py``: the Python API's keyword types, for editors and type checkers.

One ``TypedDict`` per stage of the stage table (``llm_ocr/stage_table.py``), its options' types
and help taken from the option models, and one for ``llm_ocr.launch`` (the launch's, every
platform's and the launched stage's options)::

    python scripts/keyword_types.py > llm_ocr/keywords.py

The test suite runs it and fails when the file it wrote is not what it writes now.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Any

# The package beside this script, installed or not.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from llm_ocr.config import annotation_text
from llm_ocr.launchers import PLATFORMS, platform_class
from llm_ocr.launchers.core.api import REFUSED
from llm_ocr.launchers.core.spec import LaunchOptions
from llm_ocr.options import FIELDS_ALIASES
from llm_ocr.stage_table import STAGES

#: The package's line width (pyproject.toml's ruff line-length).
WIDTH = 120

HEADER = '''"""Keyword types of the Python API, for editors and type checkers (generated: do not edit).

Derived from the stage table and the option models (:mod:`llm_ocr.stage_table`,
:mod:`llm_ocr.options`, :mod:`llm_ocr.launchers`) by
``python scripts/keyword_types.py > llm_ocr/keywords.py``; the test suite checks that it is current.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict
'''


def keyword_types_source() -> str:
    """The source of ``llm_ocr/keywords.py``."""
    blocks = []
    for stage in STAGES.values():
        names = set(stage.option_names()) - {"output"}
        fields = [(name, info) for model in stage.models().values() for name, info in model.model_fields.items()
                  if name in names]
        known = dict(fields)
        fields += [(short, known[name]) for short, name in FIELDS_ALIASES.items() if name in known]
        blocks.append(typed_dict(f"{stage.name.capitalize()}Keywords", f"Keyword arguments of ``llm_ocr."
                                 f"{stage.name}()``: the options of ``llm-ocr {stage.name}``.", fields))
    blocks.append(typed_dict("LaunchKeywords", "Keyword arguments of ``llm_ocr.launch()``: the options of ``llm-ocr "
                             "launch``, of every platform, and of the launched stage.", launch_fields()))
    return HEADER + "".join(blocks)


def launch_fields() -> list[tuple[str, Any]]:
    """``llm_ocr.launch``'s keywords: the launch's own, then each platform's, then the stages'
    (``run`` takes every stage option) but those a launch refuses."""
    fields = [(name, info) for name, info in LaunchOptions.model_fields.items() if name not in ("output", "num_shards")]
    seen = {name for name, _ in fields}
    for platform in sorted(PLATFORMS):
        for name, info in platform_class(platform).options.model_fields.items():
            if name not in seen:
                seen.add(name)
                fields.append((name, info))
    for model in STAGES["run"].models().values():
        for name, info in model.model_fields.items():
            if name not in seen and name not in REFUSED and name != "output":
                seen.add(name)
                fields.append((name, info))
    known = dict(fields)
    return fields + [(short, known[name]) for short, name in FIELDS_ALIASES.items()]


def typed_dict(name: str, doc: str, fields: list[tuple[str, Any]]) -> str:
    """A ``TypedDict`` class named ``name``: one key per option, typed, with its help as a docstring."""
    lines = [f"\n\nclass {name}(TypedDict, total=False):", *_docstring(doc), ""]
    for key, info in fields:
        lines.append(f"    {key}: {annotation_text(info.annotation)}")
        description = (info.description or "").replace("\\", "\\\\").replace('"""', "'''")
        if description:
            lines += _docstring(description)
    return "\n".join(lines) + "\n"


def _docstring(text: str) -> list[str]:
    """``text`` as a docstring indented in a class body, wrapped at :data:`WIDTH`."""
    return textwrap.wrap(f'"""{text}"""', WIDTH, initial_indent="    ", subsequent_indent="    ",
                         break_long_words=False, break_on_hyphens=False)


if __name__ == "__main__":
    sys.stdout.write(keyword_types_source())
