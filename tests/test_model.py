"""GNNModel: shapes for several conv layers, and outputs that ignore batch composition."""

import math

import pytest
import torch
from conftest import train
from torch_geometric.data import Batch

import QuantumGravPy as qg
from QuantumGravPy.physics import NUM_FEATURES


@pytest.fixture(scope="module")
def graphs(tmp_path_factory):
    root = tmp_path_factory.mktemp("model-data")
    return list(qg.CausalSetDataset(str(root), num_graphs=6, num_points=(8, 20), progress=False))


@pytest.mark.parametrize(
    "conv",
    [
        "torch_geometric.nn.GraphConv",
        "torch_geometric.nn.GCNConv",
        "torch_geometric.nn.GINConv",
        "torch_geometric.nn.SAGEConv",
    ],
)
def test_logits_have_one_row_per_graph(graphs, conv):
    model = qg.GNNModel(NUM_FEATURES, 3, conv=conv, hidden_channels=8, num_layers=2)
    out = model(Batch.from_data_list(graphs))
    assert out.shape == (len(graphs), 3) and torch.isfinite(out).all()


@pytest.mark.parametrize("norm", ["graph", "layer", "none"])
def test_output_for_a_graph_does_not_depend_on_its_batch(graphs, norm):
    torch.manual_seed(0)
    model = qg.GNNModel(NUM_FEATURES, 3, hidden_channels=16, norm=norm)
    for mode in (model.train, model.eval):
        mode()
        together = model(Batch.from_data_list(graphs))
        alone = torch.cat([model(Batch.from_data_list([g])) for g in graphs])
        assert torch.allclose(together, alone, atol=1e-5)


def test_batchnorm_is_available_and_uses_batch_statistics_in_training(graphs):
    torch.manual_seed(0)
    model = qg.GNNModel(NUM_FEATURES, 3, hidden_channels=16, norm="batch")
    model.train()
    together = model(Batch.from_data_list(graphs))
    alone = torch.cat([model(Batch.from_data_list([g])) for g in graphs])
    assert not torch.allclose(together, alone, atol=1e-5)


def test_same_seed_same_initial_weights_and_dropout_is_active(graphs):
    batch = Batch.from_data_list(graphs)
    torch.manual_seed(3)
    a = qg.GNNModel(NUM_FEATURES, 3, dropout=0.5)
    torch.manual_seed(3)
    b = qg.GNNModel(NUM_FEATURES, 3, dropout=0.5)
    for pa, pb in zip(a.state_dict().values(), b.state_dict().values(), strict=True):
        assert torch.equal(pa, pb)
    a.train()
    assert not torch.equal(a(batch), a(batch))
    a.eval()
    assert torch.equal(a(batch), a(batch))


def test_from_config_builds_what_the_config_says(make_config):
    cfg = make_config("model.num_layers=4", "model.pooling=[max]", "model.head_channels=[12, 6]")
    model = qg.GNNModel.from_config(cfg.model, NUM_FEATURES, 5)
    assert len(model.convs) == 4
    assert model.head[0].in_features == cfg.model.hidden_channels
    assert model.head[-1].out_features == 5


def test_the_scaled_add_read_out_is_the_sum_over_the_square_root_of_the_size(graphs):
    from QuantumGravPy.models.gnn import POOLING

    batch = Batch.from_data_list(graphs)
    scaled = POOLING["scaled_add"](batch.x, batch.batch, batch.num_graphs)
    plain = POOLING["add"](batch.x, batch.batch, batch.num_graphs)  # older checkpoints' read-out
    for g, row, total in zip(graphs, scaled, plain, strict=True):
        assert torch.allclose(row, g.x.sum(0) / math.sqrt(g.num_nodes))
        assert torch.allclose(total, g.x.sum(0))


def test_an_untrained_default_model_starts_near_chance(make_config):
    """The first loss of the shipped model (mean and std read-outs) on three classes: it was
    several times chance (7.9 on the shipped config) with the plain sum."""
    shipped = ("model.hidden_channels=64", "model.num_layers=3", "model.head_channels=[64]")
    losses = []
    for seed in range(3):
        config = make_config(*shipped, "data.num_points=[32, 64]", f"training.seed={seed}")
        assert config.model.pooling == ("mean", "std")
        trainer = qg.Trainer(config)
        _, val, _ = trainer.prepare_dataloaders()
        losses.append(trainer.validator.evaluate(trainer.model, val)["val_loss"])
    assert max(losses) < 1.3 * math.log(3), losses


def test_the_default_read_outs_do_not_grow_with_the_size_of_the_causal_sets():
    """The same untrained model on sprinklings of 32 and of 2,048 elements: its outputs spread
    alike (a sum, or a maximum over more nodes, grows with n: 6.6 and 1.5 times chance at 2,048
    elements with the read-outs before), and its first loss on balanced classes stays within
    1.3x chance."""
    from torch_geometric.data import Batch, Data

    from QuantumGravPy.physics import order_structure, sprinkle, structure_features

    def batch(n: int, count: int) -> Batch:
        graphs = []
        for seed in range(count):
            s = order_structure(sprinkle(n, 2, seed=seed).relations)
            edges = torch.cat([s.links, s.links.flip(0)], dim=1)
            graphs.append(Data(x=structure_features([s])[0], edge_index=edges))
        return Batch.from_data_list(graphs)

    small, large = batch(32, 8), batch(2048, 2)
    for seed in range(3):
        torch.manual_seed(seed)
        model = qg.GNNModel(NUM_FEATURES, 3).eval()
        with torch.no_grad():
            spread = [float(model(b).std()) for b in (small, large)]
            # the loss against each class in turn, as on a balanced validation split
            outputs = model(large)
            loss = (
                sum(
                    torch.nn.functional.cross_entropy(outputs, torch.full((2,), k))
                    for k in range(3)
                )
                / 3
            )
        # (mean, max, scaled_add: 0.6 and 4.6; mean and max: 0.6 and 1.0)
        assert spread[1] < 1.5 * spread[0] and spread[1] < 0.5, spread
        assert float(loss) < 1.3 * math.log(3), float(loss)


def test_the_std_read_out_is_each_graphs_spread(graphs):
    from QuantumGravPy.models.gnn import POOLING

    batch = Batch.from_data_list(graphs)
    spread = POOLING["std"](batch.x, batch.batch, batch.num_graphs)
    for g, row in zip(graphs, spread, strict=True):
        assert torch.allclose(row, (g.x.var(0, unbiased=False) + 1e-6).sqrt(), atol=1e-6)


def test_node_context_lets_a_node_see_its_whole_graph_and_nothing_else(make_config):
    """Two paths in one graph, and one message-passing block: without node_context a node's
    output is a function of its one-hop neighbourhood, so changing the other path's features
    changes nothing; with it, the graph's read-out joins each node's embedding, so it does.
    Either way, the other graphs of the batch change nothing."""
    from torch_geometric.data import Data

    def two_paths(shift: float) -> Data:
        x = torch.rand(8, 3, generator=torch.Generator().manual_seed(0))
        x[4:] += shift  # the second path
        edges = torch.tensor([[0, 1, 2, 4, 5, 6], [1, 2, 3, 5, 6, 7]])
        return Data(x=x, edge_index=torch.cat([edges, edges.flip(0)], dim=1))

    other = Data(x=torch.rand(5, 3), edge_index=torch.tensor([[0, 1], [1, 0]]))
    for context in (False, True):
        torch.manual_seed(1)
        model = qg.GNNModel(3, outputs={"r": (1, "node")}, hidden_channels=8, num_layers=1,
                            norm="none", node_context=context).eval()  # fmt: skip
        before, after = model(two_paths(0.0))["r"], model(two_paths(1.0))["r"]
        assert torch.equal(before[:2], after[:2]) is not context  # nodes 0, 1: two hops away
        batched = model(Batch.from_data_list([two_paths(0.0), other]))["r"][:8]
        assert torch.allclose(batched, before, atol=1e-6)
    with pytest.raises(qg.ConfigError, match="model.node_context: only for the built-in"):
        make_config("model={type: torch.nn.Linear}", "model.node_context=true")


def test_edge_features_reach_an_edge_aware_conv_and_a_conv_that_ignores_them_is_named(
    make_config, capsys, tmp_path
):
    """Rings whose class is only in their edges' features (edge_attr): GINEConv, given
    edge_dim by the model, learns it; GraphConv, which takes no edge features, cannot, and the
    run says so before training. Prediction rebuilds the edge-aware model from its checkpoint."""
    import user_data

    def run(conv, path):
        config = make_config(
            "data.dataset=user_data.rings_with_edge_signs", f"model.conv={conv}",
            "training.num_epochs=8", "early_stopping.enabled=false", f"training.path={tmp_path / path}",
        )  # fmt: skip
        _, history, metrics = train(config)
        return config, history, metrics

    config, history, metrics = run("torch_geometric.nn.GINEConv", "gine")
    assert history[-1]["val_accuracy"] == 1.0 and metrics["test_accuracy"] == 1.0
    assert "does not read" not in capsys.readouterr().err
    model = qg.load_model(config.run_dir)
    assert model.model.edge_channels == 2
    graphs = user_data.rings_with_edge_signs(8)
    predicted = qg.predict(config.run_dir, graphs).graphs["y_class"]
    assert predicted.tolist() == [int(g.y) for g in graphs]
    capsys.readouterr()
    _, history, _ = run("torch_geometric.nn.GraphConv", "graph")
    assert history[-1]["val_accuracy"] < 0.8  # the nodes alike: nothing tells the classes apart
    assert "edges carry 2 feature(s) (edge_attr), which model.conv" in capsys.readouterr().err


def test_an_edge_aware_model_takes_a_graph_without_edges_and_names_missing_edge_features():
    from torch_geometric.data import Data

    from QuantumGravPy.models.gnn import GNNModel

    model = GNNModel(2, 2, conv="torch_geometric.nn.GINEConv", edge_channels=3).eval()
    lonely = Data(x=torch.ones(1, 2), edge_index=torch.zeros(2, 0, dtype=torch.long),
                  edge_attr=torch.zeros(0, 3))  # fmt: skip
    assert model(Batch.from_data_list([lonely])).shape == (1, 2)
    bare = Data(x=torch.ones(2, 2), edge_index=torch.tensor([[0], [1]]))
    with pytest.raises(qg.DataError, match="reads 3 edge feature"):
        model(Batch.from_data_list([bare]))
