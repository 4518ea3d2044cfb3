"""Secrets out of what llm-ocr prints or stores: one list of what is secret, one way to hide it.

What is secret:

- the value of an **environment variable** whose name says so (:data:`SECRET_NAME`): ``HF_TOKEN``,
  ``HUGGING_FACE_HUB_TOKEN``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``,
  ``GOOGLE_OAUTH_ACCESS_TOKEN``, ``OPENAI_API_KEY``, ``VLLM_API_KEY``, ``LLM_OCR_API_KEY`` and the
  stages' ``LLM_OCR_*_API_KEY``, ...;
- the value of a **command-line flag** whose name says so (:data:`SECRET_FLAG`): ``--api-key``
  (all its values: vLLM's takes several), ``--hf-token``, ``--token``, ... (not ``--*-per-token``,
  a rate);
- anything **shaped** like a credential wherever it appears: Hub tokens (``hf_...``), OpenAI-style
  keys (``sk-...``), AWS access key ids, ``Bearer ...``, a URL's ``user:password@``, signed-URL and
  token query parameters, and ``name=value`` / ``'name': 'value'`` where the name is a secret's.

:class:`Redactor` replaces, in any text, every secret value it was given or finds in the
environment (the values themselves, wherever they appear: a server that rejects a flag repeats
the whole command line, its key too), then the shapes. :func:`redact_command` hides the values
of a command line by position, for logging the command itself.

Imports nothing of the package: every layer uses it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence

#: Environment variable names that hold secrets (substrings, any case).
SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|API_KEY|ACCESS_KEY|PRIVATE_KEY", re.IGNORECASE)

#: Flags whose value is a secret ("per-token" is a rate: the simulator's --decode-ms-per-token).
SECRET_FLAG = re.compile(r"^--?[\w-]*(?<!per-)(key|token|secret|password|passwd|credentials?)$", re.IGNORECASE)

MASK = "***"

#: Values too plain to be anyone's secret: replacing them everywhere would only garble the text
#: (``TOKENIZERS_PARALLELISM=false``, ``HF_HUB_DISABLE_IMPLICIT_TOKEN=1``).
_PLAIN = frozenset({"true", "false", "none", "null", "yes", "no", "on", "off", "auto", "default", "empty"})
_MIN_LENGTH = 4

#: A value after a secret's name, unless it is a placeholder (``...``, ``***``, ``API_KEY``,
#: ``NAME=SECRET_ID``: help texts and our own hints name secrets without holding one; ``None``).
_VALUE = r"(?!(?:\.\.\.|\*\*\*|(?-i:None|[A-Z][A-Z_]*(?:=[A-Z_]+)?))(?:[\s'\",}&)\]]|$))[^\s'\",}&)\]]+"

#: Credentials by their shape, each with what replaces it.
_SHAPES: tuple[tuple[re.Pattern[str], str], ...] = (
    # A secret's flag and its value, as a server repeats its command line.
    (re.compile(r"(?<![\w-])(--?[\w-]*(?<!per-)(?:key|token|secret|password|passwd|credentials?))(=|\s+)" + _VALUE,
                re.IGNORECASE), rf"\1\2{MASK}"),
    # name=value, 'name': 'value', "name": "value" (a config or an argparse Namespace printed whole).
    (re.compile(r"(?<![\w-])((?:[\w-]*[_-])?(?:api[_-]?key|secret(?:[_-]access[_-]key)?|password|passwd|credentials?"
                r"|(?:hf|access|auth|session|refresh|hub|bearer)[_-]?token)|token)"
                r"(['\"]?\s*[:=]\s*\[?\s*['\"]?)" + _VALUE,
                re.IGNORECASE), rf"\1\2{MASK}"),
    (re.compile(r"\bhf_[A-Za-z0-9]{16,}"), f"hf_{MASK}"),  # Hub tokens (case-sensitive: not HF_ENDPOINT)
    (re.compile(r"\bsk-[A-Za-z0-9_-]{16,}"), f"sk-{MASK}"),  # OpenAI-style keys
    (re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"), MASK),  # AWS access key ids
    (re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=-]{6,}"), rf"\1{MASK}"),
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@'\"]+@"), rf"\1{MASK}@"),  # URL credentials
    (re.compile(r"(?i)([?&](?:X-Amz-Credential|X-Amz-Signature|X-Amz-Security-Token|Signature|sig|access_token|token"
                r"|api_key|apikey|key)=)[^&\s'\"]+"), rf"\1{MASK}"),
)


def is_secret_name(name: str) -> bool:
    """Whether environment variable ``name`` holds a secret by its name."""
    return bool(SECRET_NAME.search(name))


def _worth_hiding(value: str) -> bool:
    plain = value.strip().lower()
    return len(plain) >= _MIN_LENGTH and plain not in _PLAIN and not _is_number(plain)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def env_secrets(environ: Mapping[str, str]) -> list[str]:
    """The values of ``environ``'s secret variables (:data:`SECRET_NAME`)."""
    return [value for name, value in environ.items() if is_secret_name(name) and _worth_hiding(value)]


def command_secrets(command: Sequence[str]) -> list[str]:
    """The values of a command line's secret flags (every value of ``--api-key A B``, ``--token=T``)."""
    found: list[str] = []
    hiding = False
    for arg in command:
        if arg.startswith("-") and len(arg) > 1 and not _is_number(arg):
            flag, eq, value = arg.partition("=")
            hiding = bool(SECRET_FLAG.match(flag))
            if hiding and eq:
                found.append(value)
                hiding = False
            continue
        if hiding:
            found.append(arg)
    return [value for value in found if _worth_hiding(value)]


def redact_command(command: Sequence[str]) -> list[str]:
    """``command`` with secret values replaced by ``***`` (for logging it).

    Values after flags such as ``--api-key``/``--hf-token`` (all of them: ``--api-key`` takes
    several), ``--flag=value`` forms of those, and credential-shaped strings anywhere.
    """
    out: list[str] = []
    hiding = False
    for arg in command:
        if arg.startswith("-") and len(arg) > 1 and not _is_number(arg):
            flag, eq, _value = arg.partition("=")
            hiding = bool(SECRET_FLAG.match(flag))
            if hiding and eq:
                out.append(f"{flag}={MASK}")
                hiding = False
                continue
            out.append(_shapes(arg))
            continue
        out.append(MASK if hiding else _shapes(arg))
    return out


def _shapes(text: str) -> str:
    for pattern, replacement in _SHAPES[2:]:  # a lone argument: its flag is judged by position
        text = pattern.sub(replacement, text)
    return text


class Redactor:
    """Hides secrets in text: the values given, those of the environment's secret variables
    (read when it is made), and credential shapes.

    Args:
        values: secrets known besides the environment's (a server's key, storage options).
        environ: the environment whose secret variables are hidden (default this process's).
    """

    def __init__(self, values: Iterable[str] = (), *, environ: Mapping[str, str] | None = None) -> None:
        known = {v for v in values if isinstance(v, str) and _worth_hiding(v)}
        known.update(env_secrets(os.environ if environ is None else environ))
        # Longest first: a secret that contains another is replaced whole.
        self._values = sorted(known, key=len, reverse=True)

    @classmethod
    def for_process(cls, command: Sequence[str], env: Mapping[str, str] | None = None) -> Redactor:
        """What a process started with ``command`` and ``env`` (added to this process's
        environment) could repeat: its flags' secrets, and its whole environment's."""
        return cls(command_secrets(command), environ={**os.environ, **(env or {})})

    def __call__(self, text: str) -> str:
        """``text`` with every known secret value and every credential shape replaced."""
        for value in self._values:
            text = text.replace(value, MASK)
        for pattern, replacement in _SHAPES:
            text = pattern.sub(replacement, text)
        return text


def redact(text: str, values: Iterable[str] = ()) -> str:
    """``text`` without ``values``, the environment's secrets, or anything shaped like a credential."""
    return Redactor(values)(text)
