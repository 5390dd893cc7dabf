"""What an append answers."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from settlekit.events.envelope import Event


@dataclass
class AppendResult:
    tenant_id: str
    stream_id: str
    events: list[Event]
    first_seq: int
    positions: list[int]
    head_chain_hash: str
    snapshot: dict[str, Any] | None = None
    already_exists: bool = False
    replayed: bool = False
    # events accepted only under a history policy: unsigned, or holding a lone surrogate (not part of the
    # stored answer: an idempotent replay reports 0)
    unsigned: int = 0
    lone_surrogates: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "tenantId": self.tenant_id, "streamId": self.stream_id, "events": self.events,
            "firstSeq": self.first_seq, "positions": self.positions, "headChainHash": self.head_chain_hash,
            "snapshot": self.snapshot, "alreadyExists": self.already_exists,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, replayed: bool) -> AppendResult:
        return cls(tenant_id=data["tenantId"], stream_id=data["streamId"], events=data["events"],
                   first_seq=data["firstSeq"], positions=data["positions"], head_chain_hash=data["headChainHash"],
                   snapshot=data.get("snapshot"), already_exists=data.get("alreadyExists", False),
                   replayed=replayed)
