"""The shard rules (llm_ocr.sharding), checked exhaustively on small cases.

The stage tests run the rules end to end; these pin the properties every stage relies on:
each document goes to exactly one shard, a later stage with the upstream's shard count takes
exactly the upstream shard's documents, the parts a shard opens are all it needs, and the
input split stays contiguous and balanced by bytes.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest

from llm_ocr.sharding import check_shard, output_owner, round_robin_owner, upstream_shards_for, weighted_owners

DOCS = 600


def _upstream_rules(upstream: int):
    # Both ways an upstream stage may have split the documents: round-robin (files, outputs of
    # earlier versions) and contiguous runs (dataset row groups).
    return {
        "round-robin": lambda d: round_robin_owner(d, upstream),
        "contiguous": lambda d: d * upstream // DOCS,
    }


@pytest.mark.parametrize("upstream", range(1, 10))
@pytest.mark.parametrize("shards", range(1, 10))
def test_a_later_stage_takes_every_document_once_balanced_from_the_parts_it_opens(upstream: int, shards: int) -> None:
    for name, owner_of in _upstream_rules(upstream).items():
        taken = Counter()
        for doc in range(DOCS):
            part_shard = owner_of(doc)
            owner = output_owner(doc, part_shard, upstream, shards)
            assert 0 <= owner < shards
            # The shard opens the part that holds the document: nothing is missed.
            assert part_shard in upstream_shards_for(owner, shards, upstream), (name, doc)
            if shards == upstream:
                assert owner == part_shard  # `llm-ocr run`: the documents it extracted, no others
            taken[owner] += 1
        assert sum(taken.values()) == DOCS
        assert max(taken.values()) <= 1.25 * DOCS / shards + 1, (name, taken)
        assert min(taken[s] for s in range(shards)) >= 0.75 * DOCS / shards - 1, (name, taken)


@pytest.mark.parametrize("upstream, shards", [(8, 3), (3, 8), (64, 7), (5, 64)])
def test_a_shard_opens_few_upstream_shards(upstream: int, shards: int) -> None:
    opened = [len(upstream_shards_for(s, shards, upstream)) for s in range(shards)]
    # Its own overlap of the upstream shards, plus at most the partial one at each end.
    assert max(opened) <= -(-upstream // shards) + 1
    assert all(r.start >= 0 and r.stop <= upstream for r in (upstream_shards_for(s, shards, upstream) for s in range(shards)))


def test_weighted_owners_are_contiguous_and_balanced_by_bytes() -> None:
    rng = random.Random(3)
    # Files of very different sizes: row groups of 10 KB next to row groups of 1 MB.
    weights = [rng.choice([10_000, 50_000, 1_000_000]) for _ in range(400)]
    for shards in (1, 2, 5, 8, 16, 64):
        owners = weighted_owners(weights, shards)
        assert owners == sorted(owners) and set(owners) == set(range(shards))
        load = Counter()
        for weight, owner in zip(weights, owners):
            load[owner] += weight
        share = sum(weights) / shards
        # Never more than the share plus the one row group on each boundary.
        assert max(load.values()) <= share + max(weights), (shards, load)


def test_weighted_owners_with_more_shards_than_units_and_empty_units() -> None:
    owners = weighted_owners([100, 0, 100, 100], 64)
    assert owners == sorted(owners) and len(set(owners) - {owners[1]}) == 3  # each unit its own shard
    assert weighted_owners([0, 0, 0], 2) == [0, 0, 1]  # nothing to weigh: split by count
    assert weighted_owners([], 4) == []


def test_bad_shards_are_refused() -> None:
    for num_shards, index in ((0, 0), (2, 2), (2, -1)):
        with pytest.raises(ValueError, match="invalid shard"):
            check_shard(num_shards, index)
