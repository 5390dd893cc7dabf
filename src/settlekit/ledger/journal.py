"""Exports of a closed period (docs/finance.md): JournalCsv.v1 bytes and the GL batch over a tenant's chart of
accounts mapping (GlMapping.v1). Pure: rows in, text out; the writer hashes exactly the bytes it emits."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final

from settlekit.errors import ValidationError
from settlekit.events.canonical import canonical_json
from settlekit.ledger import accounts as A
from settlekit.ledger.close import PeriodEntry

JOURNAL_CSV: Final = "JournalCsv.v1"
GL_MAPPING: Final = "GlMapping.v1"
GL_BATCH: Final = "GlBatch.v1"
CSV_COLUMNS: Final = ("entry_id", "at", "memo", "account_id", "party_id", "debit_cents", "credit_cents")
_NEEDS_QUOTES: Final = frozenset(',"\r\n')


def csv_field(value: str) -> str:
    """RFC 4180 quoting: a field with a comma, quote, CR or LF is quoted, its quotes doubled."""
    if _NEEDS_QUOTES.isdisjoint(value):
        return value
    return '"' + value.replace('"', '""') + '"'


def csv_line(fields: tuple[str, ...]) -> str:
    """One CSV record ending in LF; fields are joined as they are unless one needs quotes."""
    line = ",".join(fields)
    if line.count(",") == len(fields) - 1 and '"' not in line and "\n" not in line and "\r" not in line:
        return line + "\n"
    return ",".join(csv_field(f) for f in fields) + "\n"


CSV_HEADER: Final = csv_line(CSV_COLUMNS)


def posting_rows(entry: PeriodEntry) -> Iterator[tuple[str, str, str, int]]:
    """(account, party, party role, cents) per posting, one per party share when a split plan divided it; a
    posting without an allocation has an empty party."""
    shares: dict[int, list[tuple[str, str, int]]] = {}
    for index, party, role, amount in entry.allocations:
        shares.setdefault(index, []).append((party, role, amount))
    for index, (account, amount) in enumerate(entry.postings):
        parts = shares.get(index)
        if not parts:
            yield account, "", "", amount
            continue
        for party, role, share in parts:
            yield account, party, role, share


def journal_lines(entry: PeriodEntry) -> Iterator[str]:
    """The entry's CSV rows (text, each ending in LF)."""
    for account, party, _role, cents in posting_rows(entry):
        debit, credit = (cents, 0) if cents > 0 else (0, -cents)
        yield csv_line((entry.entry_id, entry.at, entry.memo or "", account, party, str(debit), str(credit)))


class HashingWriter:
    """Encodes text as UTF-8, hashes exactly those bytes (SHA-256) and hands them to `sink` (may be None)."""

    def __init__(self, sink: Callable[[bytes], Any] | None = None):
        self._sha = hashlib.sha256()
        self._sink = sink
        self.bytes_written = 0

    def write(self, text: str) -> None:
        data = text.encode("utf-8")
        self._sha.update(data)
        self.bytes_written += len(data)
        if self._sink is not None:
            self._sink(data)

    def hexdigest(self) -> str:
        return self._sha.hexdigest()


def require_gl_mapping(doc: Any) -> dict[str, Any]:
    """A GlMapping.v1 document: `{schemaVersion, accounts: {ourAccountId: {glAccount, name?}}}`; every key is one
    of our accounts and every glAccount a non-blank string."""
    if not isinstance(doc, Mapping) or doc.get("schemaVersion") != GL_MAPPING:
        raise ValidationError(f"the mapping must be a {GL_MAPPING} object", code="FINANCE_GL_MAPPING_INVALID")
    accounts = doc.get("accounts")
    if not isinstance(accounts, Mapping) or not accounts:
        raise ValidationError("mapping.accounts must be a non-empty object", code="FINANCE_GL_MAPPING_INVALID")
    for ours, target in accounts.items():
        if ours not in A.CHART_OF_ACCOUNTS:
            raise ValidationError(f"{ours!r} is not one of our accounts", code="FINANCE_GL_MAPPING_INVALID",
                                  accountId=ours)
        gl = target.get("glAccount") if isinstance(target, Mapping) else None
        if not isinstance(gl, str) or not gl.strip():
            raise ValidationError(f"accounts.{ours}.glAccount must be a non-blank string",
                                  code="FINANCE_GL_MAPPING_INVALID", accountId=ours)
    return dict(doc)


def gl_account(mapping: Mapping[str, Any], account_id: str) -> str:
    target = mapping["accounts"].get(account_id)
    if target is None:
        raise ValidationError(f"account {account_id} has no glAccount in the tenant's mapping",
                              code="FINANCE_GL_ACCOUNT_UNMAPPED", accountId=account_id)
    return str(target["glAccount"])


def gl_batch_head(tenant_id: str, month: str, close_hash: str, mapping_hash: str) -> str:
    """The GL batch JSON up to its `lines` array (the lines follow, then `gl_batch_tail`)."""
    head = canonical_json({"batchType": GL_BATCH, "tenantId": tenant_id, "month": month,
                           "closeArtifactHash": close_hash, "mappingHash": mapping_hash})
    return head[:-1] + ',"lines":['


def gl_lines(entry: PeriodEntry, mapping: Mapping[str, Any]) -> Iterator[str]:
    """The entry's GL lines as canonical JSON objects (no separators)."""
    for account, party, role, cents in posting_rows(entry):
        debit, credit = (cents, 0) if cents > 0 else (0, -cents)
        yield canonical_json({"entryId": entry.entry_id, "at": entry.at, "memo": entry.memo or "",
                              "glAccount": gl_account(mapping, account), "accountId": account, "partyId": party,
                              "partyRole": role, "debitCents": debit, "creditCents": credit})


def gl_batch_tail(rows: int) -> str:
    return f'],"lineCount":{rows}}}\n'
