"""Preparing causal sets from their matrices: links, pasts and futures, natural labelling and
longest chains in about one matrix product, checked against the definitions computed the slow
way (integer products, a loop over the elements); and Zarr arrays decoded without zarr's
pipeline, checked against zarr's own reading."""

import numpy as np
import pytest
import torch
import zarr
from numcodecs import Blosc, Zlib

from QuantumGravPy.data.sources import zarr2
from QuantumGravPy.physics import (
    NotAnOrder,
    destroyed_sprinkling,
    kleitman_rothschild_order,
    node_features,
    order_structure,
    sprinkle,
    structure_features,
    transitive_percolation,
)
from QuantumGravPy.physics.chains import chain_heights

pytestmark = pytest.mark.timeout(120)


def slow_structure(relations: np.ndarray):
    """Links, pasts, futures and (height, depth) by the definitions: a link is a relation with
    nothing between (an integer product), the height of an element the longest chain of links
    ending at it, found element by element in an order where every relation points forwards."""
    r = relations.astype(np.int64)
    links = relations & ((r @ r) == 0)
    order = np.argsort(r.sum(0), kind="stable")
    height, depth = np.zeros(len(r), dtype=np.int64), np.zeros(len(r), dtype=np.int64)
    for j in order:
        before = np.flatnonzero(links[:, j])
        height[j] = height[before].max() + 1 if len(before) else 0
    for i in order[::-1]:
        after = np.flatnonzero(links[i])
        depth[i] = depth[after].max() + 1 if len(after) else 0
    return links, r.sum(0), r.sum(1), height, depth


# Sizes on both sides of a panel (512 rows) and of the padding (64).
CAUSAL_SETS = {
    "sprinkling 2D": lambda: sprinkle(700, 2, seed=1),
    "sprinkling 4D": lambda: sprinkle(513, 4, seed=2),
    "destroyed": lambda: destroyed_sprinkling(600, 2, seed=3, fraction=0.01),
    "Kleitman-Rothschild": lambda: kleitman_rothschild_order(90, seed=4),
    "percolation": lambda: transitive_percolation(130, 0.05, seed=5),
    "one element": lambda: sprinkle(1, 2, seed=6),
}


@pytest.mark.parametrize("name", CAUSAL_SETS)
@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("shuffled", [False, "near", True])
def test_the_structure_of_a_causal_matrix_is_its_definition(name, transposed, shuffled):
    relations = CAUSAL_SETS[name]().relations.numpy()
    n = len(relations)
    if shuffled:  # elements not in a natural labelling: a relabelling
        # near: relations pointing backwards only beside the diagonal
        # (the triangular product still holds them); else any order (the full product)
        perm = np.random.default_rng(0).permutation(n) if shuffled is True else np.arange(n)
        if shuffled == "near":  # each run of 8 elements reversed
            perm = np.concatenate([perm[k : k + 8][::-1] for k in range(0, n, 8)])
        relations = relations[perm][:, perm]
    stored = (relations.T if transposed else relations).astype(np.uint8).copy()
    s = order_structure(torch.from_numpy(stored), transposed=transposed)
    labelling = np.arange(n) if s.labelling is None else s.labelling.numpy()
    assert (s.labelling is None) == (not np.tril(relations).any())  # relabelled only if needed
    if shuffled == "near" and name == "sprinkling 2D":
        assert s.labelling is not None  # (some swapped neighbours were related)
    relabelled = relations[labelling][:, labelling]
    assert not np.tril(relabelled).any()  # every relation points to a later element
    links, past, future, height, depth = slow_structure(relabelled)
    assert s.links.tolist() == np.argwhere(links).T.tolist()  # sorted by earlier, then later
    assert s.past.tolist() == past.tolist() and s.future.tolist() == future.tolist()
    features = structure_features([s])[0]
    dense = node_features(torch.from_numpy(relabelled)[None], torch.from_numpy(links)[None])[0]
    assert torch.equal(features, dense)
    assert features[:, 4].mul(n).round().long().tolist() == height.tolist()
    assert features[:, 5].mul(n).round().long().tolist() == depth.tolist()


@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda r: np.fill_diagonal(r, 1), "element 0 precedes itself"),
        (lambda r: r.__setitem__((600, 20), 1), "elements 20 and 600 precede each other"),
        (lambda r: r.__setitem__((3, 650), 0), "3 precedes 650 through others but not directly"),
    ],
)
def test_a_matrix_that_is_not_a_partial_order_is_refused_by_name(transposed, edit, message):
    relations = np.triu(np.ones((700, 700), dtype=np.uint8), 1)  # a chain: 0 < 1 < ... < 699
    edit(relations)
    stored = relations.T.copy() if transposed else relations
    with pytest.raises(NotAnOrder, match=message):
        order_structure(torch.from_numpy(stored), transposed=transposed)


def test_matrices_of_other_values_and_types_mean_the_same_relations():
    relations = sprinkle(300, 2, seed=7).relations
    reference = order_structure(relations)
    for matrix in (relations.to(torch.uint8) * 3, relations.float(), relations.to(torch.int64)):
        s = order_structure(matrix)
        assert torch.equal(s.links, reference.links) and torch.equal(s.past, reference.past)


def test_chain_heights_follow_the_links_of_many_graphs_at_once():
    rng = np.random.default_rng(8)
    n = 400
    pairs = np.argwhere(np.triu(rng.random((n, n)) < 0.02, 1))
    heights = chain_heights(pairs[:, 0], pairs[:, 1], n)
    expected = np.zeros(n, dtype=np.int64)
    for i, j in sorted(map(tuple, pairs), key=lambda p: p[1]):  # by later element: i is final
        expected[j] = max(expected[j], expected[i] + 1)
    assert heights.tolist() == expected.tolist()
    with pytest.raises(ValueError, match="cycle"):
        chain_heights(np.array([0, 1, 2]), np.array([1, 2, 1]), 4)


# --- Zarr arrays decoded by numcodecs -------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {"chunks": (100, 100), "compressors": Blosc(cname="lz4", clevel=9, shuffle=2)},
        {"chunks": (64, 300), "compressors": Zlib(), "order": "F"},
        {"chunks": (250, 250), "compressors": None},
        {
            "chunks": (100, 100),
            "compressors": Blosc(),
            "chunk_key_encoding": {"name": "v2", "separator": "/"},
        },
    ],
)
def test_a_zarr_array_reads_as_zarr_reads_it(tmp_path, kwargs):
    """Including chunks zarr did not write (all fill value) and partial chunks at the edges."""
    relations = np.triu(np.random.default_rng(9).random((250, 250)) < 0.3, 1).astype(np.uint8)
    relations[:, 200:] = 0  # whole chunks of zeros: not written
    root = zarr.open_group(str(tmp_path / "s.zarr"), mode="w", zarr_format=2)
    root.create_array("adj", data=relations, **kwargs)
    root.create_array("h", data=np.array([0.25]), fill_value=7.0)
    array = zarr2.read_array(tmp_path / "s.zarr" / "adj")
    assert array is not None and np.array_equal(array, root["adj"][...])
    assert zarr2.read_array(tmp_path / "s.zarr" / "h").tolist() == [0.25]


def test_arrays_this_reader_does_not_cover_are_left_to_zarr(tmp_path):
    root = zarr.open_group(str(tmp_path / "s.zarr"), mode="w", zarr_format=2)
    from numcodecs import Delta

    root.create_array("filtered", data=np.arange(10), filters=[Delta(dtype="i8")])
    assert zarr2.read_array(tmp_path / "s.zarr" / "filtered") is None
    three = zarr.open_group(str(tmp_path / "v3.zarr"), mode="w", zarr_format=3)
    three.create_array("adj", data=np.eye(3, dtype=np.uint8))
    assert zarr2.read_array(tmp_path / "v3.zarr" / "adj") is None


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("transposed", [False, True])
def test_on_a_gpu_the_structure_is_the_same(transposed):
    """The product, the passes and the labelling on the GPU give what the host gives."""
    for causal_set in (sprinkle(1500, 2, seed=10), destroyed_sprinkling(1100, 2, 11, 0.002)):
        relations = causal_set.relations.numpy()
        perm = np.random.default_rng(0).permutation(len(relations))
        for matrix in (relations, relations[perm][:, perm]):
            stored = torch.from_numpy((matrix.T if transposed else matrix).astype(np.uint8).copy())
            host = order_structure(stored, transposed=transposed)
            gpu = order_structure(stored.cuda(), transposed=transposed)
            for a, b in zip(host, gpu, strict=True):
                assert (a is None and b is None) or torch.equal(a, b.cpu())


@pytest.mark.parametrize("transposed", [False, True])
def test_the_torch_passes_a_gpu_runs_give_what_the_host_gives(transposed, monkeypatch):
    """The passes over the product that a GPU runs (torch's), run here on the host: the same
    links, pasts, futures and labelling as numpy's, and the same refusal."""
    from QuantumGravPy.physics import structure

    causal_set = sprinkle(1100, 2, seed=10)
    relations = causal_set.relations.numpy()
    perm = np.random.default_rng(0).permutation(len(relations))
    cases = []
    for matrix in (relations, relations[perm][:, perm]):
        stored = torch.from_numpy((matrix.T if transposed else matrix).astype(np.uint8).copy())
        cases.append((stored, order_structure(stored, transposed=transposed)))
    monkeypatch.setattr(structure, "_NumpyParts", lambda n: structure._TorchParts(n, "cpu"))
    for stored, host in cases:
        for a, b in zip(host, order_structure(stored, transposed=transposed), strict=True):
            assert (a is None and b is None) or torch.equal(a, b)
    broken = cases[0][0].clone()
    broken[600, 20] = broken[20, 600] = 1
    with pytest.raises(NotAnOrder, match="elements 20 and 600 precede each other"):
        order_structure(broken, transposed=transposed)


@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("shuffled", [False, "near"])
def test_blocks_of_the_triangle_find_every_link_of_a_large_set(transposed, shuffled):
    """1,100 elements: three panels and six blocks, each reached through its own range of
    inner indices; checked against the links by definition (a float32 product, exact here)."""
    relations = destroyed_sprinkling(1100, 2, seed=12, fraction=0.002).relations.numpy()
    if shuffled:  # relations pointing backwards beside the diagonal, inside the blocks
        perm = np.concatenate([np.arange(k, min(k + 8, 1100))[::-1] for k in range(0, 1100, 8)])
        relations = relations[perm][:, perm]
    stored = (relations.T if transposed else relations).astype(np.uint8).copy()
    s = order_structure(torch.from_numpy(stored), transposed=transposed)
    labelling = np.arange(1100) if s.labelling is None else s.labelling.numpy()
    relabelled = torch.from_numpy(relations[labelling][:, labelling]).float()
    links = (relabelled > 0) & (relabelled @ relabelled == 0)
    assert s.links.tolist() == links.nonzero().T.tolist()
    assert s.past.tolist() == relabelled.sum(0).long().tolist()
    assert s.future.tolist() == relabelled.sum(1).long().tolist()
