"""The error catalogue (`settlekit.errors.CATALOGUE`) lists exactly the codes the package uses, with their HTTP
statuses, and docs/errors.md is generated from it."""

from __future__ import annotations

from collections import defaultdict

from settlekit.errors import CATALOGUE, POSTING_REASONS
from support.error_codes import DOC, Use, errors_markdown, scan

CODES, REASONS = scan()


def _by_code(uses: list[Use]) -> dict[str, list[Use]]:
    found: dict[str, list[Use]] = defaultdict(list)
    for use in uses:
        found[use.code].append(use)
    return found


def test_the_scan_finds_codes_in_every_form() -> None:
    found = _by_code(CODES)
    assert "SIGNER_UNKNOWN" in found  # code= at a raise site
    assert "CONSUMER_NOT_FOUND" in found  # class-level code
    assert "JOB_TERMINAL" in found  # positional code of a helper
    assert "MIGRATIONS_PENDING" in found  # problem body built in the API
    assert "WEBHOOK_BODY_INVALID" in found and "METHOD_NOT_ALLOWED" in found  # code tables
    assert "UNBALANCED_ENTRY" in _by_code(REASONS) and "REFUND_NOT_ALLOWED" in _by_code(REASONS)


def test_every_code_used_is_catalogued() -> None:
    missing = {code: [u.where for u in uses] for code, uses in _by_code(CODES).items() if code not in CATALOGUE}
    assert not missing, f"add these codes to settlekit.errors.CATALOGUE: {missing}"


def test_every_catalogued_code_is_used() -> None:
    unused = sorted(set(CATALOGUE) - {u.code for u in CODES})
    assert not unused, f"no code in src uses these catalogue entries: {unused}"


def test_statuses_match_the_catalogue() -> None:
    wrong = []
    seen: dict[str, set[int]] = defaultdict(set)
    for use in CODES:
        if use.status is None or use.code not in CATALOGUE:
            continue
        seen[use.code].add(use.status)
        spec = CATALOGUE[use.code]
        if use.status not in (spec.status, *spec.other_statuses):
            wrong.append(f"{use.code} is {use.status} at {use.where}, catalogued {spec.status}")
    assert not wrong, wrong
    for code, spec in CATALOGUE.items():
        assert set(spec.other_statuses) <= seen[code], f"{code}: other_statuses not raised anywhere"


def test_posting_reasons_are_catalogued_and_used() -> None:
    used = {u.code for u in REASONS}
    assert used == set(POSTING_REASONS), (sorted(used - set(POSTING_REASONS)), sorted(set(POSTING_REASONS) - used))


def test_one_code_per_failure_for_an_unknown_signer() -> None:
    assert "UNKNOWN_SIGNER_KEY" not in CATALOGUE


def test_docs_errors_md_is_up_to_date() -> None:
    assert DOC.read_text(encoding="utf-8") == errors_markdown(), "run `python tests/support/error_codes.py`"
