"""How options are given: CLI flags, ``LLM_OCR_*`` environment variables, keyword arguments.

The options themselves are declared once, as the typed models of :mod:`llm_ocr.options` (and a
launch's in :mod:`llm_ocr.launchers.core.spec`); this module binds them:

- :func:`add_options` turns a model's fields into ``--kebab-case`` flags, one argument group per
  model (help from the description; a boolean is ``--flag/--no-flag``, a list a repeatable flag),
  and :func:`plain_help` makes a parser print that help as plain text;
- :func:`join_fragments` lets an option whose value is a piece of a command line
  (``--server-args "--enforce-eager"``) take a value that starts with ``-``;
- :func:`resolve_options` builds the validated model from flags or keyword arguments, then the
  environment, then the defaults;
- :func:`check_names` refuses a keyword no model declares, naming the closest one;
- :func:`annotation_text` writes an option's type as a keyword signature shows it;
- :func:`as_flags` writes values back as the flags a job's command line carries.
"""

from __future__ import annotations

import argparse
import copy
import difflib
import json
import os
import re
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, TypeVar, cast

from pydantic import BaseModel, SecretStr, ValidationError

ENV_PREFIX = "LLM_OCR_"

M = TypeVar("M", bound=BaseModel)

#: How messages name an option: as the CLI flag (``--max-in-flight``) or the keyword (``max_in_flight``).
Naming = Literal["flag", "keyword"]


class OptionError(Exception):
    """An option has an invalid value, or no such option exists; the message names it."""


def flag_name(name: str) -> str:
    """``max_in_flight`` -> ``--max-in-flight``."""
    return "--" + name.replace("_", "-")


def env_name(name: str) -> str:
    """``max_in_flight`` -> ``LLM_OCR_MAX_IN_FLIGHT``."""
    return ENV_PREFIX + name.upper()


def _shown(name: str, naming: Naming) -> str:
    return flag_name(name) if naming == "flag" else name


def _args_of(annotation: Any) -> tuple[Any, ...]:
    return typing.get_args(annotation) if typing.get_origin(annotation) in (typing.Union, types.UnionType) else ()


def _without_none(annotation: Any) -> Any:
    args = [a for a in _args_of(annotation) if a is not type(None)]
    return args[0] if len(args) == 1 else annotation


def _is_bool(annotation: Any) -> bool:
    return _without_none(annotation) is bool


def _is_list(annotation: Any) -> bool:
    return typing.get_origin(_without_none(annotation)) in (list, tuple)


def _extra(info: Any, key: str) -> Any:
    extra = info.json_schema_extra
    return extra.get(key) if isinstance(extra, dict) else None


#: A reST role, as in :class:`x` or :mod:`~a.b` (with a tilde, only the last part is shown).
_ROLE = re.compile(r":[a-z]+:`(~?)([^`]+)`")
#: Inline code: two backticks around it (reST) or one (Markdown).
_CODE = re.compile(r"``([^`]+)``|`([^`]+)`")
#: Bold: two asterisks around it (reST and Markdown).
_BOLD = re.compile(r"\*\*([^*]+)\*\*")


def plain(text: str) -> str:
    """``text`` without reST/Markdown inline markup, as a terminal shows ``--help``: roles and
    bold lose their markers; inline code loses its backticks, and is quoted when it holds a space
    (``llm-ocr models`` -> 'llm-ocr models', ``--endpoint`` -> --endpoint)."""
    text = _ROLE.sub(lambda m: m.group(2).rsplit(".", 1)[-1] if m.group(1) else m.group(2), text)
    text = _CODE.sub(lambda m: f"'{code}'" if " " in (code := m.group(1) or m.group(2)) else code, text)
    return _BOLD.sub(r"\1", text)


class _PlainText(argparse.HelpFormatter):
    """Mixed into a parser's help formatter: descriptions, epilogs and option help as :func:`plain` text."""

    def add_text(self, text: str | None) -> None:
        if isinstance(text, str) and text != argparse.SUPPRESS:
            text = plain(text)
        super().add_text(text)

    def add_argument(self, action: argparse.Action) -> None:
        text = action.help
        if text and text != argparse.SUPPRESS:
            action = copy.copy(action)  # the parser's own action keeps its text
            action.help = plain(text)
        super().add_argument(action)


_PLAIN_FORMATTERS: dict[type[argparse.HelpFormatter], type[argparse.HelpFormatter]] = {}


def plain_help(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``parser``, and the parsers of its sub-commands, printing their help as plain text: the
    descriptions are the code's docstrings and option descriptions, written in reST and Markdown,
    which a terminal would show as is (a flag in double backticks). Each keeps its own formatter's
    layout."""
    base = parser.formatter_class
    if isinstance(base, type) and issubclass(base, argparse.HelpFormatter) and not issubclass(base, _PlainText):
        if base not in _PLAIN_FORMATTERS:
            _PLAIN_FORMATTERS[base] = cast(type[argparse.HelpFormatter],
                                           type(f"Plain{base.__name__}", (_PlainText, base), {}))
        parser.formatter_class = _PLAIN_FORMATTERS[base]
    for action in parser._actions:  # argparse lists a parser's actions nowhere public
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                plain_help(sub)
    return parser


def option_group_title(model: type[BaseModel]) -> str:
    """The ``--help`` heading of a model's options: ``ServerOptions`` -> ``server options``."""
    name = model.__name__
    return (name[: -len("Options")] if name.endswith("Options") else name).lower() + " options"


#: The metavars of options whose value is a piece of a command line (``--server-args``,
#: ``--server-command``, ``--engine-args``, ``--sbatch-option``): :func:`join_fragments` lets their
#: value start with ``-``.
FRAGMENT_METAVARS = frozenset({"ARGS", "COMMAND", "OPTION"})


def fragment_flags(parser: argparse.ArgumentParser) -> set[str]:
    """The long flags of ``parser`` and its sub-commands whose metavar is in :data:`FRAGMENT_METAVARS`."""
    flags: set[str] = set()
    for action in parser._actions:  # argparse lists a parser's actions nowhere public
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                flags |= fragment_flags(sub)
        elif action.metavar in FRAGMENT_METAVARS:
            flags.update(flag for flag in action.option_strings if flag.startswith("--"))
    return flags


def join_fragments(argv: Sequence[str], flags: Iterable[str]) -> list[str]:
    """``argv`` with each of ``flags`` joined to the token after it (``--server-args --instant``
    -> ``--server-args=--instant``). argparse takes a lone value that starts with ``-`` for an
    option ("expected one argument"), but such a flag's value is a piece of a command line, which
    usually does; the joined form is what argparse accepts. Nothing after ``--`` is touched."""
    wanted = set(flags)
    out: list[str] = []
    tokens = list(argv)
    i = 0
    while i < len(tokens):
        word = tokens[i]
        if word == "--":
            return out + tokens[i:]
        if word in wanted and i + 1 < len(tokens):
            out.append(f"{word}={tokens[i + 1]}")
            i += 2
            continue
        out.append(word)
        i += 1
    return out


def add_options(
    parser: argparse.ArgumentParser, *models: type[BaseModel], exclude: Iterable[str] = (), environment: bool = True
) -> None:
    """Add one ``--flag`` per field of ``models`` (defaults stay None: resolved later); the help
    names each one's ``LLM_OCR_*`` variable unless ``environment`` is False (none is read).

    A field may say how it is typed on the command line in its ``json_schema_extra``:
    ``metavar``, ``repeat: True`` for a value given once per flag (``--env A=1 --env B=2``), and
    ``family_default: True`` when its default is the model family's (its help says so; the
    model's own default, one family's value, is not shown).
    """
    skip = set(exclude)
    for model in models:
        summary = " ".join((model.__doc__ or "").strip().split("\n\n")[0].split())
        group = parser.add_argument_group(option_group_title(model), summary)
        for name, info in model.model_fields.items():
            if name in skip:
                continue
            help_text = (info.description or "") + (f" [env {env_name(name)}]" if environment else "")
            if not info.is_required() and not _extra(info, "family_default"):
                default = info.get_default(call_default_factory=True)
                if default not in (None, {}, [], (), ""):
                    help_text += f" (default: {default})"
            metavar = _extra(info, "metavar") or name.upper()
            if _is_bool(info.annotation):
                group.add_argument(flag_name(name), dest=name, action=argparse.BooleanOptionalAction, default=None,
                                   help=help_text)
            elif _extra(info, "repeat"):
                group.add_argument(flag_name(name), dest=name, action="append", default=None, metavar=metavar,
                                   help=help_text + " (repeatable)")
            else:
                group.add_argument(flag_name(name), dest=name, default=None, metavar=metavar, help=help_text)


def resolve_options(
    model: type[M],
    given: argparse.Namespace | Mapping[str, Any],
    *,
    naming: Naming = "flag",
    environment: bool = True,
    **overrides: Any,
) -> M:
    """Build ``model`` from ``given`` (parsed flags, or keyword arguments), then ``LLM_OCR_*``
    variables (unless ``environment`` is False), then field defaults. A flag or variable's text
    is JSON for a dict or list field; errors name the option as ``naming`` says."""
    values: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        value = overrides.get(name)
        if value is None:
            value = given.get(name) if isinstance(given, Mapping) else getattr(given, name, None)
        if value is None and environment:
            value = os.environ.get(env_name(name))
        if value is None:
            continue
        annotation = str(info.annotation)
        if isinstance(value, str) and ("dict" in annotation or "list" in annotation) and not _extra(info, "repeat"):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as exc:
                raise OptionError(f"{_shown(name, naming)} must be JSON: {exc}") from exc
        values[name] = value
    try:
        return model.model_validate(values)
    except ValidationError as exc:
        problems = "; ".join(
            f"{_shown('.'.join(str(p) for p in err['loc']), naming)}: "
            + ("required, and not given" if err["type"] == "missing" else err["msg"])
            for err in exc.errors()
        )
        raise OptionError(problems) from exc


def expand_aliases(stage: str, options: Mapping[str, Any], caller: str) -> dict[str, Any]:
    """``options`` with the short Fields keywords (``schema=``) under their option names, for a
    stage that runs Fields; giving both forms raises :class:`OptionError`."""
    from llm_ocr.options import FIELDS_ALIASES
    from llm_ocr.stage_table import STAGES

    expanded = dict(options)
    if stage not in STAGES or "fields" not in STAGES[stage].groups:
        return expanded
    for short, name in FIELDS_ALIASES.items():
        if short in expanded:
            if expanded.get(name) is not None:
                raise OptionError(f"{caller}: give {short}= or {name}=, not both")
            expanded[name] = expanded.pop(short)
    return expanded


def check_names(given: Iterable[str], known: Iterable[str], where: str) -> None:
    """Raise :class:`OptionError` for a keyword in ``given`` that is not in ``known``, naming the
    closest known one (``max_inflight`` -> did you mean ``max_in_flight``?)."""
    known = list(known)
    for name in given:
        if name in known:
            continue
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]!r}?" if close else f"; {where} takes: {', '.join(sorted(known))}"
        raise OptionError(f"{where} has no option {name!r}{hint}")


def annotation_text(annotation: Any) -> str:
    """How an option's type reads in a keyword signature or a ``TypedDict`` (``int | None``,
    ``Literal['jpeg', 'png']``); a secret is given as a plain ``str``."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is type(None):
        return "None"
    if annotation is typing.Any:
        return "Any"
    if annotation is SecretStr:
        return "str"
    if origin is typing.Literal:
        return "Literal[" + ", ".join(repr(a) for a in args) + "]"
    if origin in (typing.Union, types.UnionType):
        return " | ".join(annotation_text(a) for a in args)
    if origin is not None:
        return f"{origin.__name__}[{', '.join(annotation_text(a) for a in args)}]"
    return str(annotation.__name__)


def as_flags(values: Mapping[str, Any]) -> list[str]:
    """Keyword values as the command-line flags that give them (a bool is ``--x``/``--no-x``, a
    list one flag per item, a dict JSON; None is left out)."""
    flags: list[str] = []
    for name, value in values.items():
        flag = flag_name(name)
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        if value is True:
            flags.append(flag)
        elif value is False:
            flags.append("--no-" + name.replace("_", "-"))
        elif isinstance(value, (list, tuple)):
            for item in value:
                flags += [flag, str(item)]
        elif isinstance(value, dict):
            flags += [flag, json.dumps(value)]
        elif value is not None:
            flags += [flag, str(value)]
    return flags
