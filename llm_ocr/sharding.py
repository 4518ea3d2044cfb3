"""Which shard handles which document: the rules every stage uses, in one place.

A document has one global position, ``doc_index`` (its place in the listing of the inputs), and
each stage splits the documents into ``num_shards`` disjoint shards. Two rules cover every case:

**The input** (Extract, and the page flow of ``llm-ocr run``):

- document *files* go round-robin (:func:`round_robin_owner`): listing a folder costs nothing
  and round-robin balances shards even when one folder dominates;
- *dataset rows* go in contiguous runs of whole Parquet row groups, balanced by the bytes each
  shard must read (:func:`weighted_owners`) (a row group is the smallest thing a Parquet reader fetches, so a shard
  that owns whole row groups reads only its own bytes, plus the footers). Round-robin would
  make every shard read every row group.

**A stage's output** read by the next stage (Describe reads Extract, Assemble reads Describe or
Extract), :func:`output_owner`: a document's rows all sit in the parts of the one upstream
shard that handled it (``part-U-of-N``). With the same ``num_shards`` as upstream, shard ``U``
takes exactly upstream shard ``U``'s documents, so ``llm-ocr run`` describes and assembles the
very documents it extracted, whatever rule the input used. With another ``num_shards``, each
upstream shard's documents are spread proportionally over the shards that overlap it (below),
so every document is still taken by exactly one shard, shards stay balanced, and each reads
only the parts of the one or few upstream shards it overlaps.

Neither rule needs anything but the numbers given: no stage needs the input to know its share.
"""

from __future__ import annotations

from collections.abc import Sequence


def check_shard(num_shards: int, shard_index: int) -> None:
    """Raise ``ValueError`` unless ``0 <= shard_index < num_shards``."""
    if num_shards < 1 or not 0 <= shard_index < num_shards:
        raise ValueError(f"invalid shard {shard_index} of {num_shards}: need 0 <= shard_index < num_shards")


def round_robin_owner(doc_index: int, num_shards: int) -> int:
    """The shard of a document file: ``doc_index % num_shards``."""
    return doc_index % num_shards


def weighted_owners(weights: Sequence[int], num_shards: int) -> list[int]:
    """The shard of each of a run of consecutive units (row groups), by weight (bytes).

    Lay the units end to end on ``[0, total)``; shard ``s`` owns the units whose midpoint falls
    in ``[s * total / N, (s + 1) * total / N)``. Each shard gets a contiguous run, owners never
    decrease, and a shard's weight is within one unit of ``total / N``; with more shards than
    units some shards own nothing. Units of zero weight (empty row groups) follow their neighbour.
    """
    total = sum(weights)
    if total <= 0:  # nothing to balance by: split by count
        return [k * num_shards // max(1, len(weights)) for k in range(len(weights))]
    owners = []
    before = 0
    for weight in weights:
        # 2 * midpoint * N // (2 * total): integer arithmetic, no rounding drift on huge totals.
        owners.append(min(num_shards - 1, (2 * before + weight) * num_shards // (2 * total)))
        before += weight
    return owners


def output_owner(doc_index: int, upstream_shard: int, upstream_shards: int, num_shards: int) -> int:
    """The shard (of ``num_shards``) that takes a document found in upstream shard
    ``upstream_shard`` of ``upstream_shards``.

    Upstream shard ``U`` covers positions ``[U * M, U * M + M)`` of a line ``N * M`` long
    (``N`` upstream shards, ``M`` shards now); its documents spread over those positions by
    ``doc_index % M``, and shard ``S`` takes positions ``[S * N, S * N + N)``. With ``M == N``
    that is just ``U``.
    """
    return (upstream_shard * num_shards + doc_index % num_shards) // upstream_shards


def upstream_shards_for(shard_index: int, num_shards: int, upstream_shards: int) -> range:
    """The upstream shards whose documents :func:`output_owner` may give to ``shard_index``."""
    first = shard_index * upstream_shards // num_shards
    last = (shard_index * upstream_shards + upstream_shards - 1) // num_shards
    return range(first, min(last, upstream_shards - 1) + 1)
