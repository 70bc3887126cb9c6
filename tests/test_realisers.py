"""The realiser of a 2D causal set, found from its order alone: exact on orders built from two
linear orders and on sprinklings (the light-cone coordinates' orders), refused for an order of
higher dimension; and data.light_cone_ranks, the two node features, from the embedded kinds and
from files, with a clear error for sets that are not 2D."""

import json
import math

import h5py
import pytest
import torch
from conftest import ROOT, assert_refused, run_main

from QuantumGravPy.data import CausalSetDataset, dataset_from_config
from QuantumGravPy.data.sources.writing import write_embedded
from QuantumGravPy.errors import ConfigError, DataError
from QuantumGravPy.physics import (
    NotTwoDimensional,
    conformal_sprinkling,
    light_cone_ranks,
    random_order,
    sprinkle,
)

pytestmark = pytest.mark.timeout(180)


def realises(ranks: torch.Tensor, relations: torch.Tensor) -> bool:
    """Whether the two orders intersect to the order: i precedes j exactly when i comes first
    in both."""
    u, v = ranks[:, 0], ranks[:, 1]
    return torch.equal((u[:, None] < u[None, :]) & (v[:, None] < v[None, :]), relations.bool())


def coordinate_ranks(pos: torch.Tensor) -> torch.Tensor:
    t, x = pos[:, 0].double(), pos[:, 1].double()
    return torch.stack(
        [torch.argsort(torch.argsort(t + x)), torch.argsort(torch.argsort(t - x))], 1
    )


def up_to_the_reflection(found: torch.Tensor, truth: torch.Tensor) -> torch.Tensor:
    """``found - truth``, with found's columns in the order that matches truth better (which
    of the two orders comes first is a choice no order can make)."""
    swapped = found.flip(1)
    if (swapped - truth).abs().sum() < (found - truth).abs().sum():
        found = swapped
    return found - truth


def test_a_chain_and_an_antichain():
    chain = torch.ones(5, 5, dtype=torch.bool).triu(1)
    assert light_cone_ranks(chain).tolist() == [[i, i] for i in range(5)]
    antichain = light_cone_ranks(torch.zeros(5, 5, dtype=torch.bool))
    # incomparable: the two orders are each other's reverse
    assert torch.equal(antichain[:, 0] + antichain[:, 1], torch.full((5,), 4))
    assert realises(antichain, torch.zeros(5, 5, dtype=torch.bool))


def test_orders_of_parts_free_to_face_either_way_are_realised_in_any_labelling():
    """Orders whose incomparable pairs fall into several classes (parts that can each be
    mirrored alone), in labellings that are not time orders: every small random 2-order and
    small sprinkling, and an element alone beside two chains of two."""
    alone = torch.zeros(5, 5, dtype=torch.bool)
    alone[1, 4] = alone[2, 3] = True
    assert realises(light_cone_ranks(alone), alone)
    generator = torch.Generator().manual_seed(0)
    for n in range(1, 10):
        for seed in range(60):
            relations = random_order(n, 2, seed).relations
            shuffle = torch.randperm(n, generator=generator)
            mixed = relations[shuffle][:, shuffle]
            assert realises(light_cone_ranks(mixed), mixed), (n, seed)
    for seed in range(60):
        relations = sprinkle(6, 2, seed).relations
        assert realises(light_cone_ranks(relations), relations), seed
    assert light_cone_ranks(torch.zeros(0, 0, dtype=torch.bool)).shape == (0, 2)
    assert light_cone_ranks(torch.zeros(1, 1, dtype=torch.bool)).tolist() == [[0, 0]]


@pytest.mark.parametrize("seed", range(6))
def test_an_intersection_of_two_random_linear_orders_is_given_back(seed):
    order = random_order(200, 2, seed)
    ranks = light_cone_ranks(order.relations)
    assert realises(ranks, order.relations)
    # its coordinates are the positions in the two orders: found again but where two elements
    # are twins (related alike to every other), which no order can tell apart
    truth = (order.coordinates * 200 - 0.5).round().long()
    difference = up_to_the_reflection(ranks, truth)
    assert difference.abs().max() <= 1 and (difference != 0).float().mean() < 0.02


@pytest.mark.parametrize("n, seed", [(1024, 2), (2048, 3)])
def test_a_sprinkling_at_the_fields_sizes_gives_its_light_cone_coordinates_order(n, seed):
    """Flat (even seed) and with a random conformal factor (odd): each element's ranks in
    u = t + x and v = t - x, from the order alone."""
    cset = conformal_sprinkling(n, seed) if seed % 2 else sprinkle(n, 2, seed)
    ranks = light_cone_ranks(cset.relations, cset.links)
    assert realises(ranks, cset.relations)
    difference = up_to_the_reflection(ranks, coordinate_ranks(cset.coordinates))
    assert difference.abs().max() <= 1 and (difference != 0).float().mean() < 0.01


def test_an_order_of_dimension_three_is_refused():
    # the standard example S_3: a_i precedes b_j exactly when i != j; its dimension is 3
    relations = torch.zeros(6, 6, dtype=torch.bool)
    for i in range(3):
        for j in range(3):
            relations[i, 3 + j] = i != j
    with pytest.raises(NotTwoDimensional, match="not two-dimensional"):
        light_cone_ranks(relations)
    with pytest.raises(NotTwoDimensional):
        light_cone_ranks(sprinkle(200, 4, 0).relations)


def test_the_embedded_ricci_kind_carries_the_ranks_as_two_more_features(tmp_path):
    plain = CausalSetDataset(str(tmp_path), kind="ricci", num_graphs=3, num_points=(60, 80))
    ranked = CausalSetDataset(
        str(tmp_path), kind="ricci", num_graphs=3, num_points=(60, 80), light_cone_ranks=True
    )
    for a, b in zip(plain, ranked, strict=True):
        n = a.num_nodes
        assert b.x.shape == (n, a.x.shape[1] + 2) and torch.equal(b.x[:, :-2], a.x)
        found = (b.x[:, -2:] * n - 0.5).round().long()
        assert up_to_the_reflection(found, coordinate_ranks(b.pos)).abs().max() <= 1


def test_only_2d_causal_sets_are_given_ranks(make_config, capsys, config_file):
    with pytest.raises(ConfigError, match="data.light_cone_ranks: only 2D causal sets"):
        make_config("data.light_cone_ranks=true", "data.dimensions=[2,3]")
    make_config("data.light_cone_ranks=true", "data.dimensions=[2]")  # accepted
    path = config_file(data={"light_cone_ranks": True, "kind": "cset_type"})
    assert_refused(run_main(capsys, "train", path), "data.light_cone_ranks", "cset_type")


def test_files_get_the_ranks_and_a_set_that_is_not_2d_is_named(tmp_path, capsys, make_config):
    generated = {"num_graphs": 6, "num_points": [30, 40], "seed": 1}
    two = make_config(*[f"data.{k}={v}" for k, v in generated.items()], "data.dimensions=[2]")
    written = write_embedded(two.data, tmp_path / "two.h5")
    config = make_config(f"data.files=[{written}]", "data.targets={y: y}",
                         "data.light_cone_ranks=true", f"data.root={tmp_path / 'cache'}")  # fmt: skip
    from_file = dataset_from_config(config.data, progress=False)
    embedded = CausalSetDataset(
        str(tmp_path / "gen"), **generated, dimensions=[2], light_cone_ranks=True
    )
    for a, b in zip(from_file, embedded, strict=True):
        assert torch.allclose(a.x, b.x)  # the same features, the ranks among them
    # a 3D set among 2D ones: its file and sample are named, and nothing is cached
    with h5py.File(written, "a") as f:
        f["cset_4"]["adj"][...] = sprinkle(f["cset_4"]["adj"].shape[0], 4, 9).relations.numpy().T
    config = make_config(f"data.files=[{written}]", "data.targets={y: y}",
                         "data.light_cone_ranks=true", f"data.root={tmp_path / 'again'}")  # fmt: skip
    with pytest.raises(DataError, match="cset_4.*data.light_cone_ranks: the order"):
        dataset_from_config(config.data, progress=False)
    assert not list((tmp_path / "again").rglob("*.pt"))


def test_the_shipped_large_ricci_config_trains_with_the_ranks(tmp_path, capsys):
    """configs/ricci_large.yaml (ranks, node context, a cosine schedule), end to end from the
    command line at a small size: eight features per element, and a test R^2 in the summary."""
    result = run_main(
        capsys, "train", ROOT / "configs" / "ricci_large.yaml", "data.num_points=[48,64]",
        "data.num_graphs=40", "training.num_epochs=2", f"data.root={tmp_path / 'data'}",
        f"training.path={tmp_path / 'run'}", "log_level=WARNING",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert math.isfinite(summary["test_ricci_r2"])
    graph = CausalSetDataset(
        str(tmp_path / "data"), kind="ricci", num_graphs=40, num_points=(48, 64),
        light_cone_ranks=True,
    )[0]  # fmt: skip
    assert graph.x.shape[1] == 8


def test_a_file_in_no_time_order_gets_ranks_of_its_relabelled_elements(tmp_path, make_config):
    """Elements stored in a shuffled labelling are put in a natural one; the ranks follow
    them: they realise the order the graph's links close to."""
    from QuantumGravPy.physics import transitive_closure

    sets = [sprinkle(50, 2, seed).relations for seed in (1, 2)]
    shuffled = [r[p][:, p] for r, p in zip(sets, (torch.randperm(50), torch.randperm(50)))]  # noqa: B905
    with h5py.File(tmp_path / "mixed.h5", "w") as f:
        f["adjacency_matrix"] = torch.stack(shuffled).numpy().astype("uint8")
        f["cset_size"] = [50, 50]
        f["y"] = [0, 0]
    config = make_config(f"data.files=[{tmp_path / 'mixed.h5'}]", "data.transpose=false",
                         "data.targets={y: y}", "data.light_cone_ranks=true",
                         f"data.root={tmp_path / 'cache'}")  # fmt: skip
    for graph in dataset_from_config(config.data, progress=False):
        links = torch.zeros(50, 50, dtype=torch.bool)
        forward = graph.edge_index[:, graph.edge_index[0] < graph.edge_index[1]]
        links[forward[0], forward[1]] = True
        ranks = (graph.x[:, -2:] * 50 - 0.5).round().long()
        assert realises(ranks, transitive_closure(links))
