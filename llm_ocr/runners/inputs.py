"""A shard's input documents, under the sharding rule its output folder was begun with.

Dataset rows used to be sharded round-robin like files (``doc_index % num_shards``); they now
go by whole row groups (:mod:`llm_ocr.sharding`). ``doc_id`` and ``doc_index`` are the same
under both rules, but which shard owns a row is not: resuming an output begun under the old
rule with the new one would redo, and duplicate, rows another shard already wrote. So the rule
is recorded in ``OUT/_state/input-sharding.json`` before a shard writes anything, and an output
that holds Extract parts but no record was begun under the old rule and keeps it.
"""

from __future__ import annotations

import json
import logging

from llm_ocr.options import DatasetOptions
from llm_ocr.sources import InputPlan, plan_inputs
from llm_ocr.sources.manifest_write import MANIFEST_FOLDER, manifest_inputs
from llm_ocr.storage import Storage
from llm_ocr.storage.parts import list_parts
from llm_ocr.storage.state import STATE_DIR

log = logging.getLogger(__name__)

RULE_FILE = "input-sharding.json"
ROW_GROUPS, ROWS = "row-groups", "rows"


def dataset_rule(out: Storage) -> str:
    """The dataset sharding rule of ``out``: the recorded one, else ``rows`` if Extract parts
    exist (an output begun before the record existed), else ``row-groups``, recorded now."""
    path = out.path(STATE_DIR, RULE_FILE)
    if out.exists(path):
        try:
            rule = json.loads(out.read_bytes(path)).get("datasets")
        except (ValueError, OSError, AttributeError):
            rule = None
        if rule in (ROW_GROUPS, ROWS):
            return rule
    rule = ROWS if list_parts(out.child("extract")) else ROW_GROUPS
    out.write_atomic(path, json.dumps({"datasets": rule}).encode())
    return rule


def check_inputs(inputs: list[str], dataset: DatasetOptions, storage_options: dict, out: Storage | None = None
                 ) -> InputPlan:
    """Check ``inputs`` now, reading only (raising :class:`~llm_ocr.sources.InputError`): their plan.

    A stage calls it before the output is probed or written, so that a missing or empty INPUT
    fails with its own message and leaves no ``OUT/_state`` behind. When ``out`` holds the
    listing of these very INPUTs (``OUT/_state/manifest/``, written by ``llm-ocr launch``), the
    plan is that manifest's: the shard reads its own rows of it instead of listing the folders."""
    if out is not None and inputs:
        url = out.display(out.path(STATE_DIR, MANIFEST_FOLDER))
        if manifest_inputs(url, storage_options) == list(inputs):
            log.info("INPUT: reading the listing of %s written at launch, %s", ", ".join(inputs), url)
            return plan_inputs([url], dataset=dataset, storage_options=storage_options)
    return plan_inputs(inputs, dataset=dataset, storage_options=storage_options)


def rows_round_robin(plan: InputPlan, out: Storage) -> bool:
    """Whether ``plan``'s dataset rows go round-robin (``by_rows``): the rule ``out`` was begun
    with (:func:`dataset_rule`, recorded in ``out`` now if it has none)."""
    by_rows = plan.has_datasets and dataset_rule(out) == ROWS
    if by_rows:
        log.warning(
            "%s was begun by an older llm-ocr that shards dataset rows round-robin: keeping that rule "
            "(every shard reads the whole dataset); write to a new --output to read only each shard's share",
            out.display(out.root),
        )
    return by_rows
