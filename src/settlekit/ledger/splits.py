"""SettlementSplits.v1 in integer arithmetic (03-ledger.md §4)."""

from __future__ import annotations

from dataclasses import dataclass

from settlekit.ledger.accounts import MAX_AMOUNT_CENTS
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
    gets the rest after royalties. Integer division equals settld's float math for every amount <= 10**12."""
    if not 0 <= coverage_fee <= amount <= MAX_AMOUNT_CENTS:
        raise SplitsInvalid(
            "coverage fee must be within 0..amount and the amount within the cap",
            amountCents=amount,
            coverageFeeCents=coverage_fee,
        )
    if royalties < 0:
        raise SplitsInvalid("royalties must not be negative", royaltiesCents=royalties)
    service = amount - coverage_fee
    platform = service // 5
    insurance = service // 50
    operator = service // 20 if had_assist else 0
    owner = service - platform - operator - royalties - insurance
    if owner < 0:
        raise SplitsInvalid("owner payout would be negative", amountCents=amount, royaltiesCents=royalties)
    return SettlementSplits(amount, coverage_fee, service, platform, insurance, operator, royalties, owner)
