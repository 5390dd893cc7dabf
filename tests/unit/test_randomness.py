"""Identifiers' random bytes come from the kernel in blocks: UUIDs are version 4, no bytes are handed out twice,
and a forked child never repeats its parent's."""

from __future__ import annotations

import os
import uuid

from settlekit.events.envelope import new_event_id
from settlekit.events.randomness import random_bytes, random_uuid


def test_uuids_are_version_4_and_distinct() -> None:
    made = [random_uuid() for _ in range(5000)]  # more than one block
    assert all(u.version == 4 and u.variant == uuid.RFC_4122 for u in made)
    assert len(set(made)) == len(made)


def test_event_ids_keep_their_form() -> None:
    event_id = new_event_id()
    assert event_id.startswith("evt_") and uuid.UUID(event_id[4:]).version == 4


def test_a_request_larger_than_a_block_is_served() -> None:
    assert len(random_bytes(10_000)) == 10_000


def test_a_forked_child_does_not_repeat_its_parents_bytes() -> None:
    random_bytes(16)  # the parent holds a partly used block
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: send its next bytes and leave at once
        os.write(write_end, random_bytes(16))
        os._exit(0)
    os.close(write_end)
    child = os.read(read_end, 16)
    os.close(read_end)
    os.waitpid(pid, 0)
    assert len(child) == 16 and child != random_bytes(16)
