"""``llm-ocr STAGE --help [GROUP]``: a stage's help, short unless more is asked for.

A stage takes up to some 150 options in a dozen groups, one per option model of
:mod:`llm_ocr.options`; listed in full, ``llm-ocr run --help`` ran to 525 lines. ``--help``
shows the options most runs set (:data:`llm_ocr.options.COMMON_OPTIONS`) in full and names every
other one under its group; ``--help GROUP`` shows one group in full, ``--help all`` every option.

argparse has no public way to list a parser's groups and actions, so this module reads its
``_action_groups``, ``_group_actions`` and ``_actions``; the text itself is argparse's own
formatting (``formatter_class``), so it wraps to the terminal like any other help.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import textwrap
from collections.abc import Sequence
from typing import Any

from llm_ocr.config import option_group_title, plain
from llm_ocr.options import COMMON_OPTIONS
from llm_ocr.stage_table import STAGES

#: ``--help all``: every option of the stage.
ALL = "all"


def stage_usage(stage: str) -> str:
    """The usage line of ``llm-ocr STAGE`` (argparse's own would list every option: 60 lines)."""
    reads = "INPUT... " if STAGES[stage].reads_inputs else ""
    return f"%(prog)s {reads}--output OUT [options]"


def add_help_option(parser: argparse.ArgumentParser, stage: str) -> None:
    """``-h/--help [GROUP]`` for the parser of ``llm-ocr STAGE`` (made with ``add_help=False``)."""
    parser.add_argument("-h", "--help", action=StageHelp, stage=stage,
                        help=f"show this help and exit; --help GROUP: a group of options below in full; --help {ALL}: "
                        "every option")


class StageHelp(argparse.Action):
    """``--help [GROUP]``: print the stage's help (:func:`stage_help`) and exit."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, default: Any = argparse.SUPPRESS,
                 help: str | None = None, *, stage: str) -> None:
        super().__init__(option_strings, dest=dest, default=default, nargs="?", metavar="GROUP", help=help)
        self.stage = stage

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        group = values if isinstance(values, str) else None
        if group is not None and group != ALL and group not in STAGES[self.stage].groups:
            parser.error(f"--help {group}: no such group of options; give one of "
                         f"{', '.join(STAGES[self.stage].groups)}, or {ALL}")
        sys.stdout.write(stage_help(parser, self.stage, group))
        parser.exit()


def stage_help(parser: argparse.ArgumentParser, stage: str, group: str | None = None) -> str:
    """The help of ``llm-ocr STAGE``: short (``group`` None), one group's options in full
    (``group`` one of the stage's groups), or every option (``group`` :data:`ALL`)."""
    if group == ALL:
        return parser.format_help()
    sections = {g.title: g for g in parser._action_groups}
    groups = {key: sections[option_group_title(model)] for key, model in STAGES[stage].models().items()}
    formatter = parser.formatter_class(prog=parser.prog)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    if group is not None:
        chosen = groups[group]
        formatter.start_section(chosen.title)
        formatter.add_text(chosen.description)
        formatter.add_arguments(chosen._group_actions)
        formatter.end_section()
        return formatter.format_help()
    formatter.add_text(parser.description)
    grouped = {id(action) for g in groups.values() for action in g._group_actions}
    positionals = [action for action in parser._actions if not action.option_strings]
    if positionals:
        formatter.start_section("positional arguments")
        formatter.add_arguments(positionals)
        formatter.end_section()
    formatter.start_section("common options")
    formatter.add_arguments([action for action in parser._actions if action.option_strings
                             and (id(action) not in grouped or action.dest in COMMON_OPTIONS)])
    formatter.end_section()
    text = formatter.format_help()
    rest = {key: [a for a in g._group_actions if a.dest not in COMMON_OPTIONS] for key, g in groups.items()}
    text += _by_group({key: (groups[key].description or "", actions) for key, actions in rest.items() if actions},
                      parser.prog)
    if parser.epilog:
        epilog = parser.formatter_class(prog=parser.prog)
        epilog.add_text(parser.epilog)
        text += "\n" + epilog.format_help()
    return text


def _by_group(groups: dict[str, tuple[str, list[argparse.Action]]], prog: str) -> str:
    """The options not shown in full: under each group's name and description, their flags."""
    width = max(40, shutil.get_terminal_size().columns - 2)  # argparse's own rule
    indent = " " * (2 + max(len(key) for key in groups) + 2)
    lines = textwrap.wrap(f"other options, by group ('{prog} --help GROUP' shows a group in full, '--help {ALL}' "
                          "every option):", width, break_on_hyphens=False)
    for key, (description, actions) in groups.items():
        lines += textwrap.wrap(plain(description), width, initial_indent=f"  {key}".ljust(len(indent)),
                               subsequent_indent=indent)
        flags = ", ".join(_flag(action) for action in actions)
        lines += textwrap.wrap(flags, width, initial_indent=indent, subsequent_indent=indent, break_on_hyphens=False)
    return "\n" + "\n".join(lines) + "\n"


def _flag(action: argparse.Action) -> str:
    """How a flag is named in the list: ``--cut-loops/--no-cut-loops`` as ``--[no-]cut-loops``."""
    if isinstance(action, argparse.BooleanOptionalAction):
        return "--[no-]" + action.option_strings[0][2:]
    return action.option_strings[-1]
