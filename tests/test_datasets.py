"""The causal-set dataset, its cache, user datasets and the seeded split."""

import pytest
import torch
import yaml
from conftest import assert_refused, run_main

import QuantumGravPy as qg
from QuantumGravPy.data import (
    dataset_from_config,
    generate_causal_set_graphs,
    split_dataset,
)
from QuantumGravPy.data.sources import causal_sets as generation
from QuantumGravPy.physics import NUM_FEATURES


def graphs_equal(a, b) -> bool:
    return (
        torch.equal(a.x, b.x) and torch.equal(a.edge_index, b.edge_index) and torch.equal(a.y, b.y)
    )


def test_graphs_have_features_link_edges_and_dimension_labels(tmp_path):
    ds = qg.CausalSetDataset(
        str(tmp_path), num_graphs=30, num_points=(10, 20), dimensions=(2, 4), seed=1
    )
    assert len(ds) == 30
    labels = set()
    for g in ds:
        assert 10 <= g.num_nodes <= 20
        assert g.x.shape == (g.num_nodes, NUM_FEATURES)
        assert g.y.shape == (1,) and int(g.y) in (0, 1)
        labels.add(int(g.y))
        # every link appears in both directions
        edges = set(map(tuple, g.edge_index.t().tolist()))
        assert edges == {(j, i) for i, j in edges}
    assert labels == {0, 1}


def test_graph_labels_follow_the_dimension_of_the_sprinkling(tmp_path):
    """Ordering fractions separate 2D from 4D, so the labels must agree with them."""
    ds = qg.CausalSetDataset(str(tmp_path), num_graphs=40, num_points=(60, 60), dimensions=(2, 4))
    for g in ds:
        # mean past size / N = relations / N**2 = ordering fraction * (N - 1) / (2N)
        fraction = float(g.x[:, 0].mean()) * 2 * 60 / 59
        estimate = qg.myrheim_meyer_dimension(fraction)
        assert (estimate < 3) == (int(g.y) == 0)


def test_graph_i_depends_only_on_seed_and_i(tmp_path):
    small = qg.CausalSetDataset(str(tmp_path / "a"), num_graphs=5, seed=3, progress=False)
    large = qg.CausalSetDataset(str(tmp_path / "b"), num_graphs=12, seed=3, progress=False)
    for i in range(5):
        assert graphs_equal(small[i], large[i])
    middle = generate_causal_set_graphs(
        7, 10, num_points=(32, 64), dimensions=(2, 3, 4), seed=3, progress=False
    )
    for k, i in enumerate(range(7, 10)):
        assert graphs_equal(middle[k], large[i])
    other_seed = qg.CausalSetDataset(str(tmp_path / "c"), num_graphs=5, seed=4, progress=False)
    assert not graphs_equal(small[0], other_seed[0])


def test_cache_is_reused_and_regenerated_when_a_parameter_changes(tmp_path, monkeypatch):
    first = qg.CausalSetDataset(str(tmp_path), num_graphs=8, seed=0, progress=False)
    calls = []
    real = generation.generate_causal_set_graphs

    def counting(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(generation, "generate_causal_set_graphs", counting)
    again = qg.CausalSetDataset(str(tmp_path), num_graphs=8, seed=0, progress=False)
    assert calls == [] and graphs_equal(first[3], again[3])
    for change in (
        {"seed": 1},
        {"num_points": (32, 40)},
        {"dimensions": (2, 3)},
        {"num_graphs": 9},
    ):
        params = {"num_graphs": 8, "seed": 0, **change}
        qg.CausalSetDataset(str(tmp_path), progress=False, **params)
    assert len(calls) == 4
    assert len(list((tmp_path / "processed").glob("causal_sets_*.pt"))) == 5


def test_users_bring_their_own_dataset_by_dotted_path(make_config):
    cfg = make_config("data.dataset=user_data.ring_graphs", "data.dataset_kwargs={num_graphs: 30}")
    ds = dataset_from_config(cfg.data)
    assert len(ds) == 30 and ds[0].x.shape[1] == 3 and {int(g.y) for g in ds} == {0, 1}


@pytest.mark.parametrize(
    "path, message",
    [
        ("user_data.not_a_dataset", "expected a torch_geometric Dataset"),
        ("user_data.no_such_function", "has no attribute 'no_such_function'"),
    ],
)
def test_a_bad_user_dataset_is_a_clear_error(make_config, path, message):
    with pytest.raises(qg.QGError, match=message) as info:
        cfg = make_config(f"data.dataset={path}")
        dataset_from_config(cfg.data)
    assert "data.dataset" in str(info.value)


def test_split_is_seeded_disjoint_and_complete(tmp_path):
    ds = list(range(100))
    a = split_dataset(ds, (0.7, 0.15, 0.15), seed=5)
    b = split_dataset(ds, (0.7, 0.15, 0.15), seed=5)
    c = split_dataset(ds, (0.7, 0.15, 0.15), seed=6)
    assert [s.indices for s in a] == [s.indices for s in b]
    assert [s.indices for s in a] != [s.indices for s in c]
    assert [len(s) for s in a] == [70, 15, 15]
    assert sorted(i for s in a for i in s.indices) == ds


def test_split_that_leaves_a_set_empty_is_refused():
    with pytest.raises(qg.DataError, match="data.split"):
        split_dataset(list(range(5)), (0.9, 0.1, 0.0), seed=0)


@pytest.mark.timeout(240)
def test_a_dataset_function_that_differs_between_ranks_is_refused(config_file, capsys, tmp_path):
    """data.dataset runs in every rank: an unseeded shuffle in it gives each rank its own
    order, and since the splits are taken by position, each rank would train and test on
    other graphs than the others (one rank's test graphs trained on by another). Refused in
    one line naming the function, the rank and the first graph that differs; seeded, it trains.
    """
    cfg = config_file()
    ranks = ("parallel.world_size=2", "data.dataset_kwargs={num_graphs: 80}")
    shuffled = run_main(capsys, "train", cfg, "data.dataset=user_data.shuffled_rings", *ranks)
    line = assert_refused(
        shuffled, "data.dataset (user_data.shuffled_rings)", "rank 1", "seed any shuffle"
    )
    assert "graph " in line and " differs" in line, line
    assert not (tmp_path / "run" / "checkpoints").exists()
    seeded = run_main(capsys, "train", cfg, "data.dataset=user_data.seeded_shuffled_rings", *ranks)
    assert seeded.returncode == 0, seeded.stderr
    # the function failing in one process only: every process ends, naming it (none waits)
    elsewhere = f"training.path={tmp_path / 'failing'}"
    failing = run_main(
        capsys, "train", cfg, "data.dataset=user_data.fails_on_rank_1", *ranks, elsewhere
    )
    assert failing.returncode != 0
    assert "rank 1 cannot read its graphs" in failing.stderr.strip().splitlines()[-1]


def test_the_digest_of_the_same_graphs_is_the_same_whatever_objects_they_carry():
    """Objects among a graph's attributes count by their type: their repr may hold an address
    (another in every process) and a set's order follows the process's hash seed."""
    from torch_geometric.data import Data

    from QuantumGravPy.data.sources.digest import digest

    def graphs(tag):
        return [Data(x=torch.ones(2, 1), edge_index=torch.tensor([[0], [1]]), tag=tag, note="a")]

    assert digest(graphs(object())) == digest(graphs(object()))
    assert digest(graphs({"p", "q"})) == digest(graphs({"q", "p"}))
    changed = graphs(None)
    changed[0].x[0, 0] = 2.0
    assert digest(changed) != digest(graphs(None))


def test_a_cache_that_cannot_be_read_is_built_again_naming_it(tmp_path, capsys):
    """A processed cache cut short (a killed copy, a full shared disk) is derived data: the
    run builds it again, saying which file and why, instead of ending in torch's traceback."""
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "data": {"root": str(tmp_path / "data"), "num_graphs": 40, "num_points": [8, 12]},
                "model": {"hidden_channels": 8, "num_layers": 1, "head_channels": [8]},
                "training": {"path": str(tmp_path / "run"), "num_epochs": 1, "plots": False},
            }
        )
    )
    assert run_main(capsys, "generate", config).returncode == 0
    (cache,) = (tmp_path / "data" / "processed").glob("causal_sets_*.pt")
    whole = cache.read_bytes()
    cache.write_bytes(whole[: len(whole) // 2])
    trained = run_main(capsys, "train", config)
    assert trained.returncode == 0, trained.stderr
    assert f"{cache}: the processed cache cannot be read" in trained.stderr
    assert "building it again" in trained.stderr and "Traceback" not in trained.stderr
    assert cache.stat().st_size == len(whole)
