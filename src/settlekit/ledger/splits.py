"""SettlementSplits.v1 (03-ledger.md §4), with settld's float arithmetic."""

from __future__ import annotations

import math
from dataclasses import dataclass

from settlekit.events.canonical import is_safe_int
from settlekit.ledger.errors import SplitsInvalid


@dataclass(frozen=True, slots=True)
class SettlementSplits:
    amount: int
    coverage_fee: int
    service: int
    platform: int
    insurance: int
    operator: int
    royalties: int
    owner: int

    def as_dict(self) -> dict[str, int]:
        return {
            "amountCents": self.amount,
            "coverageFeeCents": self.coverage_fee,
            "serviceCents": self.service,
            "platformCents": self.platform,
            "insuranceCents": self.insurance,
            "operatorCents": self.operator,
            "royaltiesCents": self.royalties,
            "ownerCents": self.owner,
        }


def compute_splits(amount: int, coverage_fee: int, had_assist: bool, royalties: int) -> SettlementSplits:
    """platform 20 %, insurance 2 %, operator 5 % (only with assist) of the service amount, floored; owner
    gets the rest after royalties.

    The shares are computed as settld 0.1.0 does, `floor(service * 0.2)` in IEEE doubles (Python floats have
    the same semantics), not as exact integer division: near 2**53 the two differ and v1 outputs must match.
    Messages are settld's."""
    if not (is_safe_int(amount) and is_safe_int(coverage_fee) and is_safe_int(royalties)):
        raise SplitsInvalid("amountCents must be a safe integer", amountCents=amount)
    if coverage_fee < 0:
        raise SplitsInvalid("coverageFeeCents must be >= 0", coverageFeeCents=coverage_fee)
    if coverage_fee > amount:
        raise SplitsInvalid(
            "coverageFeeCents exceeds amountCents", amountCents=amount, coverageFeeCents=coverage_fee
        )
    service = amount - coverage_fee
    platform = math.floor(service * 0.2)
    insurance = math.floor(service * 0.02)
    operator = math.floor(service * 0.05) if had_assist else 0
    owner = service - platform - operator - royalties - insurance
    if owner < 0:
        raise SplitsInvalid(
            "settlement splits invalid: owner payout would be negative", amountCents=amount, royaltiesCents=royalties
        )
    return SettlementSplits(amount, coverage_fee, service, platform, insurance, operator, royalties, owner)
