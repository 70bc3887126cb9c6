"""training.batch_nodes: batches of a budget of nodes, the same number of steps on every rank,
each global batch split evenly, and the step a single process would take on its graphs."""

import numpy as np
import pytest
import torch
from conftest import run_ranks

import QuantumGravPy as qg
from QuantumGravPy.data import epoch_sampler
from QuantumGravPy.data.batches.node_batches import pack
from QuantumGravPy.errors import ConfigError

pytestmark = pytest.mark.timeout(180)


def log_uniform_sizes(count: int, seed: int = 0) -> np.ndarray:
    """Causal-set sizes as a study of finite-size effects draws them: log-uniform in 64-2,048."""
    rng = np.random.default_rng(seed)
    return np.exp(rng.uniform(np.log(64), np.log(2048), count)).astype(np.int64)


@pytest.mark.parametrize("parts", [1, 2, 3])
def test_global_batches_hold_every_draw_once_within_the_budget_in_even_parts(parts):
    sizes = log_uniform_sizes(3000)
    order = np.random.default_rng(1).permutation(3000)
    budget = 8192
    batches = pack(order, sizes, budget, parts)
    loads = np.array([[sizes[part].sum() for part in batch] for batch in batches])
    assert all(len(batch) == parts and all(batch) for batch in batches)
    assert loads.max() <= budget
    drawn = [p for batch in batches for part in batch for p in part]
    assert sorted(drawn) == sorted(order.tolist())  # nothing lost, nothing twice
    for batch in batches:  # consecutive draws; within a part, in the order drawn
        positions = sorted(order.tolist().index(p) for part in batch for p in part)
        assert positions == list(range(positions[0], positions[0] + len(positions)))
        for part in batch:
            assert [order.tolist().index(p) for p in part] == sorted(
                order.tolist().index(p) for p in part
            )
    if parts > 1:  # the parts differ by far less than a graph of the largest size
        full = loads[:-1]
        spread = (full.max(1) - full.min(1)) / budget
        assert np.median(spread) < 0.02 and spread.max() < 0.25, spread


def test_the_last_graphs_make_a_smaller_batch_unless_drop_last():
    sizes = np.full(10, 100)
    assert [len(b[0]) for b in pack(np.arange(10), sizes, 400, 1)] == [4, 4, 2]
    assert [len(b[0]) for b in pack(np.arange(10), sizes, 400, 1, drop_last=True)] == [4, 4]
    # fewer left than processes: each process needs a graph, so they are left out
    assert len(pack(np.arange(9), sizes, 400, 2)) == 1


def test_a_budget_below_the_largest_graph_and_impossible_combinations_are_refused(make_config):
    config = make_config("training.batch_nodes=20", "data.num_points=[16, 32]")
    with pytest.raises(ConfigError, match=r"training.batch_nodes: 20 nodes cannot hold the "):
        qg.Trainer(config).prepare_dataloaders()
    with pytest.raises(ConfigError, match="training.batch_nodes: not with training.global_batch"):
        make_config("training.batch_nodes=200", "training.global_batch_size=32")
    config = make_config("training.batch_nodes=200", "parallel.strategy=invariant")
    with pytest.raises(ConfigError, match="strategy invariant: not with training.batch_nodes"):
        qg.Trainer(config)


# --- real processes ---------------------------------------------------------------------------


def one_epoch(rank, world_size, config, overwrite=False):
    if world_size > 1:
        trainer = qg.TrainerDDP(rank, config, overwrite=overwrite)
    else:
        trainer = qg.Trainer(config, overwrite=overwrite)
    train, val, _ = trainer.prepare_dataloaders()
    history = trainer.run_training(train, val)
    batches = []
    for epoch in range(config.training.num_epochs):
        epoch_sampler(train).set_epoch(epoch)
        batches.append([(b.num_graphs, b.num_nodes) for b in train])
    weights = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.close()
    return {"history": history, "batches": batches, "weights": weights}


@pytest.fixture
def varied(make_config):
    """Causal sets of 16 to 64 elements; plain SGD, so a step is the mean gradient."""

    def make(*overrides):
        return make_config(
            "data.num_graphs=30",
            "data.num_points=[16, 64]",
            "training.optimizer={type: torch.optim.SGD, kwargs: {lr: 0.1}}",
            "training.lr_scheduler=null",
            "early_stopping.enabled=false",
            *overrides,
        )

    return make


def test_two_processes_take_the_step_one_takes_on_the_same_graphs(varied):
    """One global batch of all 23 training graphs: two processes of 1,000 nodes each hold
    different numbers of graphs, and their step is one process's on all 23 (a mean over each
    rank's graphs, averaged over the ranks, would weigh the graphs of the smaller part more)."""
    # 23 training graphs: the two parts cannot hold as many graphs each
    config = ("training.num_epochs=1", "data.num_graphs=33")
    one = run_ranks(1, one_epoch, varied("training.batch_nodes=2000", *config))
    two = run_ranks(2, one_epoch, varied("training.batch_nodes=1000", *config), True)
    (counts,) = one[0]["batches"]
    assert len(counts) == 1  # one batch: every training graph
    parts = [r["batches"][0] for r in two]
    assert [len(p) for p in parts] == [1, 1]
    assert parts[0][0][0] + parts[1][0][0] == counts[0][0]
    assert parts[0][0][0] != parts[1][0][0]
    assert max(p[0][1] for p in parts) <= 1000
    for a, b in zip(one[0]["weights"], two[0]["weights"], strict=True):
        # the same sums in another order and grouping: float32 rounding, far below the
        # difference a wrong weighting makes (1e-3 here)
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert one[0]["history"][0]["train_loss"] == pytest.approx(
        two[0]["history"][0]["train_loss"], rel=1e-5
    )


def test_every_rank_takes_the_same_steps_within_its_budget(varied):
    config = varied("training.batch_nodes=150", "training.num_epochs=2", "data.num_graphs=90")
    results = run_ranks(3, one_epoch, config)
    steps = [[len(epoch) for epoch in r["batches"]] for r in results]
    assert steps[0] == steps[1] == steps[2] and min(steps[0]) > 1
    assert all(nodes <= 150 for r in results for epoch in r["batches"] for _, nodes in epoch)
    assert results[0]["history"] == results[1]["history"] == results[2]["history"]
    assert results[0]["batches"][0] != results[0]["batches"][1]  # each epoch its own plan
    again = run_ranks(3, one_epoch, config, True)  # deterministic for a seed and process count
    assert [r["batches"] for r in again] == [r["batches"] for r in results]


@pytest.mark.parametrize("storage", ["memory", "disk"])
def test_the_sizes_are_read_from_what_memory_and_disk_keep(make_config, storage):
    from QuantumGravPy.data.sources.datasets import graph_sizes

    config = make_config(f"data.storage={storage}", "training.batch_nodes=100")
    trainer = qg.Trainer(config)
    train, _, _ = trainer.prepare_dataloaders()
    graphs = train.dataset
    nodes, edges = graph_sizes(graphs)
    assert nodes.tolist() == [graphs[i].num_nodes for i in range(len(graphs))]
    assert edges.tolist() == [graphs[i].num_edges for i in range(len(graphs))]
    epoch_sampler(train).set_epoch(0)
    nodes = [b.num_nodes for b in train]
    assert max(nodes) <= 100 and sum(b.num_graphs for b in train) == len(graphs)
    trainer.close()


def test_the_log_says_what_a_batch_holds(make_config, capsys):
    from QuantumGravPy.runs.reproducibility import invariance_breaks
    from QuantumGravPy.training.loop.notices import describe_run

    config = make_config("training.batch_nodes=300")
    assert "batches of at most 300 nodes" in describe_run(
        config.name, config.training, torch.device("cpu"), 84
    )
    # no word of DDP's padding, which a plan of node budgets never does
    assert [b.split(" (")[0] for b in invariance_breaks(config)] == ["training.batch_nodes is set"]
