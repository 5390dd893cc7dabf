"""RFC 6962 Merkle tree: the Certificate Transparency reference roots, and properties against a naive
implementation written straight from the RFC's recursive definitions."""

from __future__ import annotations

import hashlib

from hypothesis import given, settings
from hypothesis import strategies as st

from settlekit.ledger import merkle

# The leaves and roots of the Certificate Transparency reference tests (RFC 6962 hashing).
CT_LEAVES = [bytes.fromhex(h) for h in
             ["", "00", "10", "2021", "3031", "40414243", "5051525354555657", "606162636465666768696a6b6c6d6e6f"]]
CT_ROOTS = [
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
]


def naive_mth(leaves: list[bytes]) -> bytes:
    """MTH(D[n]) exactly as RFC 6962 §2.1 writes it (recursive, over the leaf data)."""
    n = len(leaves)
    if n == 0:
        return hashlib.sha256(b"").digest()
    if n == 1:
        return hashlib.sha256(b"\x00" + leaves[0]).digest()
    k = 1
    while k * 2 < n:
        k *= 2
    return hashlib.sha256(b"\x01" + naive_mth(leaves[:k]) + naive_mth(leaves[k:])).digest()


def naive_path(m: int, leaves: list[bytes]) -> list[bytes]:
    n = len(leaves)
    if n == 1:
        return []
    k = 1
    while k * 2 < n:
        k *= 2
    if m < k:
        return naive_path(m, leaves[:k]) + [naive_mth(leaves[k:])]
    return naive_path(m - k, leaves[k:]) + [naive_mth(leaves[:k])]


def naive_subproof(m: int, leaves: list[bytes], b: bool) -> list[bytes]:
    n = len(leaves)
    if m == n:
        return [] if b else [naive_mth(leaves)]
    k = 1
    while k * 2 < n:
        k *= 2
    if m <= k:
        return naive_subproof(m, leaves[:k], b) + [naive_mth(leaves[k:])]
    return naive_subproof(m - k, leaves[k:], False) + [naive_mth(leaves[:k])]


def hashes_of(leaves: list[bytes]) -> list[bytes]:
    return [merkle.leaf_hash(x) for x in leaves]


def test_the_empty_tree_hashes_to_sha256_of_nothing() -> None:
    assert merkle.root_from_leaf_hashes([]).hex() == hashlib.sha256(b"").hexdigest()


def test_certificate_transparency_reference_roots() -> None:
    for n in range(1, len(CT_LEAVES) + 1):
        assert merkle.root_from_leaf_hashes(hashes_of(CT_LEAVES[:n])).hex() == CT_ROOTS[n - 1]
        assert naive_mth(CT_LEAVES[:n]).hex() == CT_ROOTS[n - 1]


leaf_lists = st.lists(st.binary(max_size=8), min_size=1, max_size=40)


@settings(max_examples=150, deadline=None)
@given(leaf_lists)
def test_root_and_every_inclusion_path_match_the_rfc_definitions(leaves: list[bytes]) -> None:
    hashes = hashes_of(leaves)
    root = merkle.root_from_leaf_hashes(hashes)
    assert root == naive_mth(leaves)
    for i, h in enumerate(hashes):
        path = merkle.inclusion_path(hashes, i)
        assert path == naive_path(i, leaves)
        assert merkle.verify_inclusion(h, i, len(hashes), path, root)


@settings(max_examples=100, deadline=None)
@given(leaf_lists)
def test_every_leaf_verifies_in_every_tree_size(leaves: list[bytes]) -> None:
    hashes = hashes_of(leaves)
    for size in range(1, len(hashes) + 1):
        root = merkle.root_from_leaf_hashes(hashes[:size])
        for i in range(size):
            assert merkle.verify_inclusion(hashes[i], i, size, merkle.inclusion_path(hashes[:size], i), root)


@settings(max_examples=100, deadline=None)
@given(leaf_lists)
def test_consistency_proofs_verify_for_every_pair_of_sizes(leaves: list[bytes]) -> None:
    hashes = hashes_of(leaves)
    n = len(hashes)
    roots = [merkle.root_from_leaf_hashes(hashes[:s]) for s in range(n + 1)]
    for new in range(n + 1):
        for old in range(new + 1):
            proof = merkle.consistency_proof(hashes[:new], old)
            if 0 < old < new:
                assert proof == naive_subproof(old, leaves[:new], True)
            assert merkle.verify_consistency(old, new, roots[old], roots[new], proof)


def _flip(b: bytes) -> bytes:
    return bytes([b[0] ^ 1]) + b[1:]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.binary(max_size=8), min_size=2, max_size=24), st.data())
def test_tampered_inclusion_proofs_fail(leaves: list[bytes], data: st.DataObject) -> None:
    hashes = hashes_of(leaves)
    n = len(hashes)
    root = merkle.root_from_leaf_hashes(hashes)
    i = data.draw(st.integers(0, n - 1))
    path = merkle.inclusion_path(hashes, i)
    assert not merkle.verify_inclusion(_flip(hashes[i]), i, n, path, root)
    assert not merkle.verify_inclusion(hashes[i], i, n, path, _flip(root))
    assert not merkle.verify_inclusion(hashes[i], i, n, path[:-1], root)
    assert not merkle.verify_inclusion(hashes[i], i, n, [*path, root], root)
    j = data.draw(st.integers(0, len(path) - 1))
    assert not merkle.verify_inclusion(hashes[i], i, n, [*path[:j], _flip(path[j]), *path[j + 1:]], root)
    # another leaf's value does not verify at this position (the size is bound by the signed tree head)
    others = [h for h in hashes if h != hashes[i]]
    if others:
        assert not merkle.verify_inclusion(others[0], i, n, path, root)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.binary(max_size=8), min_size=3, max_size=24), st.data())
def test_tampered_consistency_proofs_fail(leaves: list[bytes], data: st.DataObject) -> None:
    hashes = hashes_of(leaves)
    n = len(hashes)
    new = data.draw(st.integers(2, n))
    old = data.draw(st.integers(1, new - 1))
    old_root = merkle.root_from_leaf_hashes(hashes[:old])
    new_root = merkle.root_from_leaf_hashes(hashes[:new])
    proof = merkle.consistency_proof(hashes[:new], old)
    assert merkle.verify_consistency(old, new, old_root, new_root, proof)
    assert not merkle.verify_consistency(old, new, _flip(old_root), new_root, proof)
    assert not merkle.verify_consistency(old, new, old_root, _flip(new_root), proof)
    j = data.draw(st.integers(0, len(proof) - 1))
    assert not merkle.verify_consistency(old, new, old_root, new_root, [*proof[:j], _flip(proof[j]), *proof[j + 1:]])
    assert not merkle.verify_consistency(old, new, old_root, new_root, proof[:-1])
    assert not merkle.verify_consistency(new, old, new_root, old_root, proof)
    # a log that rewrote an old leaf is not consistent with its past
    rewritten = [*hashes[:new]]
    rewritten[data.draw(st.integers(0, old - 1))] = merkle.leaf_hash(b"rewritten history")
    forged_root = merkle.root_from_leaf_hashes(rewritten)
    assert not merkle.verify_consistency(old, new, old_root, forged_root, merkle.consistency_proof(rewritten, old))


@settings(max_examples=100, deadline=None)
@given(leaf_lists, st.lists(st.integers(min_value=0, max_value=40), max_size=4))
def test_proofs_from_stored_subtrees_equal_the_proofs_over_every_leaf(leaves: list[bytes], cuts: list[int]) -> None:
    """Closes append leaves in batches, each storing the perfect subtrees it completes; every inclusion path and
    consistency proof folded from them is the RFC's, for every tree size a close signed."""
    hashes = hashes_of(leaves)
    sizes = sorted({min(c, len(hashes)) for c in cuts} | {len(hashes)})
    stored: dict[merkle.Node, bytes] = {(0, i): h for i, h in enumerate(hashes)}
    done = 0
    for size in sizes:
        for level, index, digest in merkle.nodes_completed(hashes[:size], done):
            assert (level, index) not in stored and ((index + 1) << level) > done
            stored[(level, index)] = digest
        done = size
    assert len(stored) == len(hashes) + len(merkle.nodes_completed(hashes, 0))
    for size in sizes:
        for i in range(size):
            path = [merkle.range_hash(stored, s, e) for s, e in merkle.inclusion_ranges(i, size)]
            assert path == naive_path(i, leaves[:size]) == merkle.inclusion_path(hashes[:size], i)
        for old in sizes:
            if old <= size:
                proof = [merkle.range_hash(stored, s, e) for s, e in merkle.consistency_ranges(size, old)]
                assert proof == merkle.consistency_proof(hashes[:size], old)


def test_a_proof_reads_logarithmically_many_subtrees() -> None:
    size = 100_000
    for index in (0, 1, 4_097, 65_535, 65_536, 99_999):
        nodes = {n for s, e in merkle.inclusion_ranges(index, size) for n in merkle.range_nodes(s, e)}
        assert len(nodes) <= 2 * size.bit_length()
