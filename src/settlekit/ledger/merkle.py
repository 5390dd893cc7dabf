"""RFC 6962 Merkle tree hashing (§2.1): tree hashes, inclusion (audit) paths and consistency proofs, and their
offline verification. Pure: leaves are bytes, hashes are 32-byte digests.

leaf hash = SHA-256(0x00 || data); node hash = SHA-256(0x01 || left || right); the tree over n > 1 leaves splits
at k, the largest power of two below n (left: the first k leaves, right: the rest). The empty tree's hash is
SHA-256 of nothing.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

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


def inclusion_ranges(index: int, size: int) -> list[tuple[int, int]]:
    """The leaf ranges [start, end) whose subtree hashes make PATH(index, D[size]) of RFC 6962 §2.1.1, in path
    order (nearest the leaf first)."""
    if not 0 <= index < size:
        raise ValueError(f"leaf index {index} is outside a tree of size {size}")
    ranges: list[tuple[int, int]] = []
    start, end, m = 0, size, index
    while end - start > 1:
        k = _split(end - start)
        if m < k:
            ranges.append((start + k, end))
            end = start + k
        else:
            ranges.append((start, start + k))
            start, m = start + k, m - k
    ranges.reverse()
    return ranges


def consistency_ranges(size: int, old_size: int) -> list[tuple[int, int]]:
    """The leaf ranges whose subtree hashes make PROOF(old_size, D[size]) of RFC 6962 §2.1.2, in proof order."""
    if not 0 <= old_size <= size:
        raise ValueError(f"old size {old_size} is outside 0..{size}")
    if old_size in (0, size):
        return []
    return _subproof_ranges(0, size, old_size, True)


def _subproof_ranges(start: int, end: int, m: int, complete: bool) -> list[tuple[int, int]]:
    n = end - start
    if m == n:
        return [] if complete else [(start, end)]
    k = _split(n)
    if m <= k:
        return _subproof_ranges(start, start + k, m, complete) + [(start + k, end)]
    return _subproof_ranges(start + k, end, m - k, False) + [(start, start + k)]


def inclusion_path(hashes: Sequence[bytes], index: int) -> list[bytes]:
    """PATH(m, D[n]) of RFC 6962 §2.1.1 for leaf `index` of the tree over `hashes` (leaf hashes)."""
    return [_subtree(hashes, start, end) for start, end in inclusion_ranges(index, len(hashes))]


def consistency_proof(hashes: Sequence[bytes], old_size: int) -> list[bytes]:
    """PROOF(m, D[n]) of RFC 6962 §2.1.2 between the first `old_size` leaves and all of `hashes`."""
    return [_subtree(hashes, start, end) for start, end in consistency_ranges(len(hashes), old_size)]


# --- stored subtrees ---------------------------------------------------------------------------------------------
# A node (level, index) is the perfect subtree over leaves [index * 2**level, (index + 1) * 2**level): once its
# last leaf is in the log its hash never changes, so it can be stored. Every subtree a proof names is the fold of
# at most log2(n) such nodes, so a proof reads O(log n) stored hashes instead of every leaf.

Node = tuple[int, int]  # (level, index); level 0 is a leaf


def range_nodes(start: int, end: int) -> list[Node]:
    """The perfect subtrees, largest first, whose fold is MTH(D[start:end]) for a subtree of an RFC 6962 tree
    (its start is a multiple of the power of two at or above its size)."""
    nodes: list[Node] = []
    while start < end:
        level = (end - start).bit_length() - 1
        nodes.append((level, start >> level))
        start += 1 << level
    return nodes


def range_hash(nodes: Mapping[Node, bytes], start: int, end: int) -> bytes:
    """MTH(D[start:end]) from stored perfect subtrees: the tree over 2**a + rest leaves splits at 2**a, so its
    hash is node(P_a, MTH(rest)), folded from the right."""
    parts = [nodes[n] for n in range_nodes(start, end)]
    folded = parts[-1]
    for part in reversed(parts[:-1]):
        folded = node_hash(part, folded)
    return folded


def nodes_completed(hashes: Sequence[bytes], old_size: int) -> list[tuple[int, int, bytes]]:
    """(level, index, hash) of every node above the leaves that the leaves past `old_size` complete."""
    out: list[tuple[int, int, bytes]] = []
    level, below = 0, list(hashes)
    while len(below) > 1:
        level += 1
        above = [node_hash(below[i], below[i + 1]) for i in range(0, len(below) - 1, 2)]
        out.extend((level, i, h) for i, h in enumerate(above) if (i + 1) << level > old_size)
        below = above
    return out


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
