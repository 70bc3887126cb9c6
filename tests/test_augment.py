"""Deterministic, rank-aware augmentation and the transforms it drives."""

import pytest
import torch
from conftest import light_cone_order, undirected_edges

import QuantumGravPy as qg
from QuantumGravPy.physics import node_features


@pytest.fixture(scope="module")
def causal_set(tmp_path_factory):
    ds = qg.CausalSetDataset(
        str(tmp_path_factory.mktemp("aug")), num_graphs=4, num_points=(40, 40), progress=False
    )
    return ds[1]


def test_presets_and_an_unknown_name():
    assert qg.get_preset("mild").augmentation_depth < qg.get_preset("aggressive").augmentation_depth
    with pytest.raises(ValueError, match="choose one of mild, moderate, aggressive"):
        qg.get_preset("extreme")
    with pytest.raises(ValueError, match="remove_fraction"):
        qg.AugmentationConfig(remove_fraction=(0.5, 0.2))


def test_rank_aware_seeds_are_hex_deterministic_and_apart_by_rank():
    gen = qg.RankAwareSeedGenerator(base_seed=4, world_size=3)
    seeds = [gen.generate_seed(7, r) for r in range(3)]
    assert all(int(s, 16) >= 0 for s in seeds) and len(set(seeds)) == 3
    assert seeds[0] == qg.RankAwareSeedGenerator(4, 3).generate_seed(7, 0)
    assert seeds[0] != qg.RankAwareSeedGenerator(4, 2).generate_seed(7, 0)  # world size counts
    with pytest.raises(ValueError):
        gen.generate_seed(7, 3)


def test_distributed_params_are_reproducible_and_differ_across_ranks():
    a = qg.gen_distributed_augmentation_params(5, 0, base_seed=1, world_size=2)
    assert a == qg.gen_distributed_augmentation_params(5, 0, base_seed=1, world_size=2)
    assert a != qg.gen_distributed_augmentation_params(5, 1, base_seed=1, world_size=2)
    with pytest.raises(ValueError):
        qg.gen_distributed_augmentation_params(5, 2, world_size=2)
    with pytest.raises(ValueError):
        qg.gen_distributed_augmentation_params(5, -1, world_size=2)


def test_per_sample_params_depend_on_sample_and_epoch_only():
    p = qg.gen_augmentation_params(3, 2, base_seed=5)
    assert p == qg.gen_augmentation_params(3, 2, base_seed=5)
    assert p != qg.gen_augmentation_params(3, 3, base_seed=5)
    assert p != qg.gen_augmentation_params(4, 2, base_seed=5)
    depth = qg.get_preset("aggressive").augmentation_depth
    assert len(qg.gen_augmentation_params(3, 2, qg.get_preset("aggressive"))["operations"]) == depth


def only(op, **values):
    base = qg.gen_augmentation_params(0, 0)
    return {**base, "operations": [op], **values}


def test_removing_elements_leaves_an_exact_sub_sprinkling(causal_set):
    original = causal_set.clone()
    out = qg.apply_augmentation(causal_set, only("remove_elements", remove_fraction=0.25))
    assert out.num_nodes == 30 and torch.equal(causal_set.x, original.x)  # input untouched
    # the kept points are some of the original ones, in their order
    kept = [int((original.pos == p).all(1).nonzero()) for p in out.pos]
    assert kept == sorted(kept) and len(set(kept)) == 30
    # the links of the kept points, from their coordinates alone: some of them were not links
    # of the whole set (an element in between was removed), so they cannot be copied over
    relations, links = light_cone_order(original.pos[kept])
    expected = {(int(i), int(j)) for i, j in zip(*links.nonzero(), strict=True)}
    assert undirected_edges(out.edge_index) == expected | {(j, i) for i, j in expected}
    _, all_links = light_cone_order(original.pos)
    assert any(not all_links[kept[i], kept[j]] for i, j in expected)  # new links appeared
    assert torch.allclose(
        out.x, node_features(torch.from_numpy(relations)[None], torch.from_numpy(links)[None])[0]
    )


def test_removing_nodes_of_a_plain_graph_keeps_the_induced_subgraph():
    from user_data import ring_graphs

    ring = ring_graphs(2)[0]  # a 5-cycle
    ring.x = torch.arange(5.0)[:, None] * torch.ones(1, 3)  # each node's row names it
    out = qg.apply_augmentation(ring, only("remove_elements", remove_fraction=0.4))
    assert out.num_nodes == 3 and out.x.shape == (3, 3)
    kept = out.x[:, 0].long().tolist()  # the original node of each new one
    assert kept == sorted(kept) and len(set(kept)) == 3
    # the induced subgraph: every edge of the ring between two kept nodes, and no other
    new = {old: i for i, old in enumerate(kept)}
    cycle = {(i, (i + 1) % 5) for i in range(5)}
    cycle |= {(j, i) for i, j in cycle}
    assert undirected_edges(out.edge_index) == {
        (new[i], new[j]) for i, j in cycle if i in new and j in new
    }


def test_link_dropout_removes_both_directions_together(causal_set):
    out = qg.apply_augmentation(causal_set, only("link_dropout", link_dropout=0.5))
    edges, before = undirected_edges(out.edge_index), undirected_edges(causal_set.edge_index)
    assert edges == {(j, i) for i, j in edges}
    assert edges < before and 0.3 < len(edges) / len(before) < 0.7  # about half, none new
    assert out.num_nodes == causal_set.num_nodes and torch.equal(out.x, causal_set.x)


def test_feature_noise_and_scale(causal_set):
    scaled = qg.apply_augmentation(causal_set, only("feature_scale", feature_scale=2.0))
    assert torch.allclose(scaled.x, causal_set.x * 2)
    noisy = qg.apply_augmentation(causal_set, only("feature_noise", feature_noise=0.1))
    assert 0.05 < float((noisy.x - causal_set.x).std()) < 0.15
    again = qg.apply_augmentation(causal_set, only("feature_noise", feature_noise=0.1))
    assert torch.equal(noisy.x, again.x)  # the same params, the same result


def test_augmented_dataset_per_sample_ignores_ranks_per_rank_does_not(causal_set):
    data = [causal_set] * 4
    config = qg.get_preset("aggressive")
    a = qg.AugmentedDataset(data, config, rank=0, world_size=1)
    b = qg.AugmentedDataset(data, config, rank=1, world_size=2)
    assert torch.equal(a[2].x, b[2].x)
    a.set_epoch(1)
    assert not torch.equal(a[2].x, b[2].x)  # a new epoch, new draws
    r0 = qg.AugmentedDataset(data, config, seeding="per_rank", rank=0, world_size=2)
    r1 = qg.AugmentedDataset(data, config, seeding="per_rank", rank=1, world_size=2)
    assert r0.params(2) != r1.params(2)


def test_training_with_augmentation(make_config):
    cfg = make_config("augmentation.preset=moderate", "training.num_epochs=2")
    trainer = qg.Trainer(cfg)
    train_loader, val_loader, _ = trainer.prepare_dataloaders()
    assert isinstance(train_loader.dataset, qg.AugmentedDataset)
    assert not isinstance(val_loader.dataset, qg.AugmentedDataset)  # training data only
    history = trainer.run_training(train_loader, val_loader)
    trainer.close()
    assert len(history) == 2 and train_loader.dataset.epoch == 1


def test_removing_elements_keeps_per_element_targets_with_their_elements():
    from QuantumGravPy.data import apply_augmentation, generate_causal_set_graphs

    (graph,) = generate_causal_set_graphs(0, 1, num_points=(30, 30), dimensions=(2,), seed=0)
    params = {"seed": "ab12", "operations": ["remove_elements"], "remove_fraction": 0.3}
    smaller = apply_augmentation(graph, params)
    assert smaller.time.shape[0] == smaller.num_nodes < graph.num_nodes
    assert torch.equal(smaller.time, smaller.pos[:, 0].float())  # each kept element its own time


@pytest.mark.parametrize("kind", ["dimension", "curvature", "manifold_like", "ricci"])
def test_a_batch_augmented_at_once_is_each_graph_augmented_alone(tmp_path, kind):
    """The loader's path (the sub-sprinklings of a batch recomputed together, padded to the
    largest) against one graph at a time; every recomputed set's links against its points."""
    from QuantumGravPy.data import CausalSetDataset

    dimensions = [2] if kind == "ricci" else [2, 3, 4]
    dataset = CausalSetDataset(
        str(tmp_path), num_graphs=24, num_points=[6, 28], dimensions=dimensions, seed=2,
        kind=kind, progress=False,
    )  # fmt: skip
    augmented = qg.AugmentedDataset(dataset, qg.get_preset("moderate"), base_seed=4)
    augmented.set_epoch(3)
    indices = [5, 0, 23, 5, *range(24)]
    batch = augmented.__getitems__(indices)
    smaller = checked = 0
    for i, ours in zip(indices, batch, strict=True):
        alone = augmented[i]
        assert list(ours.to_dict()) == list(alone.to_dict())
        for key, value in alone.to_dict().items():
            assert value.dtype == ours[key].dtype and torch.equal(value, ours[key]), (i, key)
        if "pos" in ours and ours.num_nodes < dataset[i].num_nodes:
            smaller += 1
            if "link_dropout" not in augmented.params(i)["operations"]:
                checked += 1
                _, links = light_cone_order(ours.pos)
                expected = {(int(a), int(b)) for a, b in zip(*links.nonzero(), strict=True)}
                assert undirected_edges(ours.edge_index) == expected | {(b, a) for a, b in expected}
    if kind != "manifold_like":  # (percolations: no points; their nodes are simply dropped)
        assert smaller >= 3 and checked >= 1  # several sizes padded to the largest


@pytest.mark.parametrize("workers", [0, 1])
def test_the_training_loader_augments_a_batch_at_once_with_the_same_draws(make_config, workers):
    """Each epoch's draws, also in a worker process that outlives the epoch (it reads the
    epoch the trainer sets from shared memory)."""
    from torch.utils.data import BatchSampler
    from torch_geometric.data import Batch

    config = make_config(
        "augmentation.preset=moderate", "data.num_graphs=40", f"training.num_workers={workers}"
    )
    trainer = qg.Trainer(config)
    loader, _, _ = trainer.prepare_dataloaders()
    augmented = loader.dataset
    assert isinstance(augmented, qg.AugmentedDataset)
    assert loader.persistent_workers == (workers > 0)
    for epoch in (0, 1, 2):
        loader.sampler.set_epoch(epoch)
        augmented.set_epoch(epoch)
        order = BatchSampler(loader.sampler, loader.batch_size, loader.drop_last)
        for batch, indices in zip(loader, order, strict=True):
            expected = Batch.from_data_list([augmented[i] for i in indices])
            assert torch.equal(batch.x, expected.x) and torch.equal(batch.y, expected.y)
            assert torch.equal(batch.edge_index, expected.edge_index)
    trainer.close()
