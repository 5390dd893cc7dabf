"""A transaction seen through a savepoint that opens on first use."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

from settlekit.store.database import Row, Tx


class ScopedTx(Tx):
    """`tx` as one caller sees it: a savepoint is opened lazily before the caller's first statement (callers
    that never touch the database cost no round trips), then released or rolled back as a unit."""

    def __init__(self, tx: Tx, name: str):
        self._tx = tx
        self.dialect = tx.dialect
        self._name = name
        self.is_open = False  # a plain attribute: the dispatcher reads it once per event

    def _enter(self) -> None:
        if not self.is_open:
            self._tx.execute(f"SAVEPOINT {self._name}")
            self.is_open = True

    def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        self._enter()
        return self._tx.execute(sql, params)

    def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        self._enter()
        return self._tx.fetchall(sql, params)

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self._enter()
        self._tx.executemany(sql, rows)

    def write_ledger_rows(self, tenant_id: str, job_id: str, entries: Sequence[Sequence[Any]],
                          postings: Sequence[Sequence[Any]], allocations: Sequence[Sequence[Any]],
                          sums: Sequence[Sequence[Any]]) -> None:
        self._enter()
        self._tx.write_ledger_rows(tenant_id, job_id, entries, postings, allocations, sums)

    def savepoint(self) -> contextlib.AbstractContextManager[None]:
        self._enter()
        return self._tx.savepoint()

    def after_commit(self, callback: Callable[[], None]) -> None:
        self._tx.after_commit(callback)  # the enclosing transaction's commit

    @property
    def raw(self) -> Any:
        self._enter()
        return self._tx.raw

    def notify(self) -> None:
        self._enter()
        self._tx.notify()

    def release(self) -> None:
        if self.is_open:
            self.is_open = False
            self._tx.execute(f"RELEASE SAVEPOINT {self._name}")

    def rollback(self) -> None:
        if self.is_open:
            self.is_open = False
            self._tx.execute(f"ROLLBACK TO SAVEPOINT {self._name}")
            self._tx.execute(f"RELEASE SAVEPOINT {self._name}")
