"""Fields on real vLLM: the structured-output request llm-ocr sends is one vLLM enforces.

The tiny model's weights are random, so what it says is noise; but vLLM's structured outputs
constrain its decoding to the schema, so every answer must parse and validate (an enum, a
boolean, a string with a ``pattern``) on the first request, with no repair. If vLLM ignored the
request's ``response_format`` (as it ignores the old ``guided_json``), a random model would
answer free text and every row would be ``invalid``.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import jsonschema
import pytest

if importlib.util.find_spec("vllm") is None:
    pytest.skip("vLLM is not installed (pip install 'llm-ocr[test-vllm]'; see scripts/test-vllm)", allow_module_level=True)

import llm_ocr
from llm_ocr.testing import SimulatedServer
from tests.conftest import REPO, read_stage
from tests.vllm_real.conftest import NO_WHITESPACE
from tests.vllm_real.servers import SERVED, TierServer

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]

#: Every value bounded (an enum, a boolean, a patterned string) and the whole answer short (the
#: tiny model's tokenizer spends about a token per character): a random model cannot run past
#: max_tokens inside an endless string.
SCHEMA = {
    "type": "object",
    "properties": {
        "kind": {"type": "string", "enum": ["invoice", "receipt"]},
        "paid": {"type": "boolean"},
        "ref": {"type": "string", "pattern": "^[A-Z]{2}[0-9]$"},
    },
    "required": ["kind", "paid", "ref"],
    "additionalProperties": False,
}


def test_fields_answers_from_real_vllm_validate_on_the_first_request(tiny_server: TierServer, tmp_path: Path) -> None:
    # The random model may favour whitespace, which JSON allows anywhere: the shared server keeps
    # it out of the grammar (a server option; the request is unchanged).
    assert NO_WHITESPACE in " ".join(tiny_server.server.command)
    docs = tmp_path / "docs"
    docs.mkdir()
    for name in ("invoice-2024-0017.pdf", "receipt-0381.pdf"):
        shutil.copy(REPO / "samples" / name, docs)
    out = tmp_path / "out"
    with SimulatedServer("--instant", corpus=docs) as sim:  # the OCR: what Fields reads
        ran = llm_ocr.run(str(docs), output=str(out), endpoint=sim.base_url, workers=0, progress="off")
    assert ran.ok, ran
    schema_file = tmp_path / "fields.schema.json"
    schema_file.write_text(json.dumps(SCHEMA))

    mark = tiny_server.mark()
    result = llm_ocr.fields(
        str(out), schema=str(schema_file), fields_max_tokens=128, progress="off", endpoint=tiny_server.base_url,
        model=SERVED, api_key=tiny_server.api_key,
    )  # fmt: skip
    rows = read_stage(out, "fields")
    assert len(rows) == 2, result
    for row in rows:
        assert row["status"] == "ok", (row["validation_errors"], row["error"])
        assert row["requests"] == 1 and not row["repaired"] and row["structured"] == "json_schema"
        jsonschema.validate(json.loads(row["fields"]), SCHEMA, format_checker=jsonschema.FormatChecker())
    assert result.ok, result

    # vLLM parsed the response_format into its structured-outputs parameters, schema and all.
    logged = tiny_server.requests(since=mark)
    assert len(logged) == 2
    for request in logged:
        assert request.param("structured_outputs").startswith(f"StructuredOutputsParams(json={SCHEMA!r}")
    # What the rows hold is what vLLM generated.
    canonical = lambda text: json.dumps(json.loads(text), sort_keys=True)  # noqa: E731
    assert sorted(canonical(r.output or "") for r in logged) == sorted(canonical(r["fields"]) for r in rows)
