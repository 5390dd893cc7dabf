"""The pure parts of the month close: the statement fold, the JournalCsv.v1 bytes, the leaf bytes, the signed
document and its offline check."""

from __future__ import annotations

import csv
import io

from hypothesis import given, settings
from hypothesis import strategies as st

from settlekit.events.canonical import canonical_json
from settlekit.events.envelope import Signer
from settlekit.ledger import accounts as A
from settlekit.ledger import journal as J
from settlekit.ledger.close import (
    CloseInputs,
    PeriodEntry,
    StreamLeaf,
    TreeHead,
    close_document,
    fold_entries,
    next_month,
    sign_document,
    verify_close_document,
)

SIGNER = Signer.generate()
_accounts = st.sampled_from(A.ACCOUNT_IDS)
_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)


@st.composite
def entries(draw: st.DrawFn) -> PeriodEntry:
    legs = draw(st.lists(st.tuples(_accounts, st.integers(1, 10**12)), min_size=1, max_size=4))
    postings = [(acct, amount) for acct, amount in legs] + [(A.CASH, -sum(a for _, a in legs))]
    allocations = tuple((i, draw(_text), "party", amount) for i, (_, amount) in enumerate(postings)
                        if draw(st.booleans()))
    return PeriodEntry(entry_id=draw(_text), job_id="job_1", event_type=draw(st.sampled_from(
        ["SETTLED", "BOOKED", "CLAIM_PAID", "SLA_CREDIT_ISSUED"])), source_event_id="evt_1",
        at="2026-01-05T10:00:00.000Z", memo=draw(st.none() | _text), postings=tuple(postings),
        allocations=allocations)


@settings(max_examples=200, deadline=None)
@given(st.lists(entries(), max_size=20))
def test_statement_totals_are_the_sums_of_the_entries(items: list[PeriodEntry]) -> None:
    stmt = fold_entries(items).to_json()
    debits = sum(a for e in items for _, a in e.postings if a > 0)
    assert stmt["debitCents"] == stmt["creditCents"] == debits
    assert stmt["entries"] == len(items) and stmt["postings"] == sum(len(e.postings) for e in items)
    for row in stmt["accounts"]:
        amounts = [a for e in items for acct, a in e.postings if acct == row["accountId"]]
        assert row["netCents"] == sum(amounts)
        assert row["debitCents"] == sum(a for a in amounts if a > 0)
    assert stmt["jobsSettled"] == (1 if any(e.event_type == "SETTLED" for e in items) else 0)
    assert fold_entries(list(reversed(items))).to_json()["accounts"] == stmt["accounts"]


@settings(max_examples=200, deadline=None)
@given(st.lists(entries(), max_size=10))
def test_journal_csv_is_rfc4180_and_one_row_per_posting_share(items: list[PeriodEntry]) -> None:
    text = J.CSV_HEADER + "".join(line for e in items for line in J.journal_lines(e))
    rows = list(csv.reader(io.StringIO(text, newline="")))
    assert tuple(rows[0]) == J.CSV_COLUMNS
    expected = [(e.entry_id, e.memo or "", acct, party, cents) for e in items
                for acct, party, _, cents in J.posting_rows(e)]
    assert [(r[0], r[2], r[3], r[4], int(r[5]) - int(r[6])) for r in rows[1:]] == expected
    assert all(r[5] == "0" or r[6] == "0" for r in rows[1:])


def test_csv_quoting_is_exact() -> None:
    assert J.csv_line(("a", "b,c", 'd"e', "f\ng", "")) == 'a,"b,c","d""e","f\ng",\n'
    assert J.csv_line(("plain", "x")) == "plain,x\n"


def test_leaf_bytes_are_canonical_json() -> None:
    leaf = StreamLeaf("job_1", "ab" * 32, 7)
    assert leaf.data() == b'{"eventCount":7,"headChainHash":"' + b"ab" * 32 + b'","streamId":"job_1"}'


def test_months_roll_over_the_year() -> None:
    assert next_month("2026-12") == "2027-01" and next_month("2026-01") == "2026-02"


def test_a_signed_close_verifies_and_any_change_breaks_it() -> None:
    inputs = CloseInputs("t", "2026-01", "00" * 32, 0, None, TreeHead(0, "e3" * 32), 0, 0, None)
    doc = sign_document(close_document(inputs, fold_entries([])), SIGNER)
    assert verify_close_document(doc)["ok"]
    assert canonical_json(sign_document(close_document(inputs, fold_entries([])), SIGNER)) == canonical_json(doc)
    for field, value in (("tenantId", "u"), ("signerKeyId", "key_x"), ("signature", doc["signature"][::-1])):
        assert not verify_close_document({**doc, field: value})["ok"]
    forged = sign_document({k: v for k, v in doc.items() if k not in ("signature", "artifactHash")},
                           Signer.generate())
    assert verify_close_document(forged)["ok"]  # self-consistent, but only pinning the server key tells
    assert not verify_close_document(forged, {SIGNER.key_id: SIGNER.public_key_pem})["ok"]
