"""GNNModel: shapes for several conv layers, and outputs that ignore batch composition."""

import pytest
import torch
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
