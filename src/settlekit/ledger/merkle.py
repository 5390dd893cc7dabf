"""RFC 6962 Merkle tree hashing (§2.1): tree hashes, inclusion (audit) paths and consistency proofs, and their
offline verification. Pure: leaves are bytes, hashes are 32-byte digests.

leaf hash = SHA-256(0x00 || data); node hash = SHA-256(0x01 || left || right); the tree over n > 1 leaves splits
at k, the largest power of two below n (left: the first k leaves, right: the rest). The empty tree's hash is
SHA-256 of nothing.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

EMPTY_ROOT = hashlib.sha256(b"").digest()


def leaf_hash(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    """The largest power of two strictly below n (n >= 2)."""
    return 1 << ((n - 1).bit_length() - 1)


def root_from_leaf_hashes(hashes: Sequence[bytes]) -> bytes:
    """MTH over leaf hashes, bottom-up in O(n): pairs fold left to right, a lone last node moves up unchanged,
    which gives RFC 6962's shape for every n."""
    if not hashes:
        return EMPTY_ROOT
    level = list(hashes)
    while len(level) > 1:
        nxt = [node_hash(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0]


def _subtree(hashes: Sequence[bytes], start: int, end: int) -> bytes:
    return root_from_leaf_hashes(hashes[start:end])


def inclusion_path(hashes: Sequence[bytes], index: int) -> list[bytes]:
    """PATH(m, D[n]) of RFC 6962 §2.1.1 for leaf `index` of the tree over `hashes` (leaf hashes)."""
    if not 0 <= index < len(hashes):
        raise ValueError(f"leaf index {index} is outside a tree of size {len(hashes)}")
    path: list[bytes] = []
    start, end, m = 0, len(hashes), index
    while end - start > 1:
        k = _split(end - start)
        if m < k:
            path.append(_subtree(hashes, start + k, end))
            end = start + k
        else:
            path.append(_subtree(hashes, start, start + k))
            start, m = start + k, m - k
    path.reverse()
    return path


def consistency_proof(hashes: Sequence[bytes], old_size: int) -> list[bytes]:
    """PROOF(m, D[n]) of RFC 6962 §2.1.2 between the first `old_size` leaves and all of `hashes`."""
    n = len(hashes)
    if not 0 <= old_size <= n:
        raise ValueError(f"old size {old_size} is outside 0..{n}")
    if old_size in (0, n):
        return []
    return _subproof(hashes, 0, n, old_size, True)


def _subproof(hashes: Sequence[bytes], start: int, end: int, m: int, complete: bool) -> list[bytes]:
    n = end - start
    if m == n:
        return [] if complete else [_subtree(hashes, start, end)]
    k = _split(n)
    if m <= k:
        return _subproof(hashes, start, start + k, m, complete) + [_subtree(hashes, start + k, end)]
    return _subproof(hashes, start + k, end, m - k, False) + [_subtree(hashes, start, start + k)]


def root_from_inclusion(leaf: bytes, index: int, size: int, path: Sequence[bytes]) -> bytes | None:
    """The root a leaf hash and its audit path imply (RFC 9162 §2.1.3.2), or None when the path has the wrong
    length for (index, size)."""
    if not 0 <= index < size:
        return None
    fn, sn, node = index, size - 1, leaf
    for sibling in path:
        if sn == 0:
            return None
        if fn & 1 or fn == sn:
            node = node_hash(sibling, node)
            while fn and not fn & 1:
                fn, sn = fn >> 1, sn >> 1
        else:
            node = node_hash(node, sibling)
        fn, sn = fn >> 1, sn >> 1
    return node if sn == 0 else None


def verify_inclusion(leaf: bytes, index: int, size: int, path: Sequence[bytes], root: bytes) -> bool:
    """True when `leaf` (a leaf hash) is leaf `index` of the tree of `size` leaves with hash `root`."""
    return root_from_inclusion(leaf, index, size, path) == root


def verify_consistency(old_size: int, new_size: int, old_root: bytes, new_root: bytes,
                       proof: Sequence[bytes]) -> bool:
    """True when the tree (new_size, new_root) extends the tree (old_size, old_root) (RFC 9162 §2.1.4.2)."""
    if not 0 <= old_size <= new_size:
        return False
    if old_size == new_size:
        return not proof and old_root == new_root
    if old_size == 0:
        return not proof and old_root == EMPTY_ROOT
    items = list(proof)
    if old_size & (old_size - 1) == 0:  # a power of two: the old root is the first node of the proof
        items.insert(0, old_root)
    if not items:
        return False
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    fr = sr = items[0]
    for c in items[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr, sr = node_hash(c, fr), node_hash(c, sr)
            while fn and not fn & 1:
                fn, sn = fn >> 1, sn >> 1
        else:
            sr = node_hash(sr, c)
        fn, sn = fn >> 1, sn >> 1
    return sn == 0 and fr == old_root and sr == new_root
