"""training.pad_batches: node-budget batches padded to one shape, so that a compiled step is
compiled once; the padding changes no output, loss or metric."""

from __future__ import annotations

import pytest
import torch
from conftest import assert_refused, run_main, run_ranks
from torch_geometric.data import Batch

import QuantumGravPy as qg
from QuantumGravPy.data.batches.padding import PADDING_DEGREE, Budgets, pad_batch
from QuantumGravPy.training.tasks.task import unpadded

PAD = ("training.batch_nodes=300", "training.pad_batches=true")


def test_every_batch_of_several_epochs_fits_the_budgets(make_config):
    for sampler in ("null", "class_balanced"):  # the second may draw a graph twice
        config = make_config(*PAD, f"training.sampler={sampler}")
        trainer = qg.Trainer(config)
        loader = trainer.prepare_dataloaders()[0]
        held = trainer.training_pass.budgets(loader)
        seen = []
        for epoch in range(4):
            qg.data.epoch_sampler(loader).set_epoch(epoch)
            for batch in loader:
                padded = pad_batch(batch, held)
                assert padded.x.shape[0] == held.nodes
                assert padded.edge_index.shape[1] == held.edges
                assert padded.num_graphs == held.graphs == int(padded.batch.max()) + 1
                seen.append(batch.edge_index.shape[1])
        # the edge budget is a bound, not a guess far above what batches hold
        assert max(seen) <= held.edges < 2 * max(seen)


def test_padding_graphs_are_their_own_and_reach_no_real_node():
    x = torch.randn(5, 3)
    batch = Batch(x=x, edge_index=torch.tensor([[0, 1, 3], [1, 0, 4]]),
                  batch=torch.tensor([0, 0, 0, 1, 1]))  # fmt: skip
    batch._num_graphs = 2
    padded = pad_batch(batch, Budgets(nodes=9, edges=6, graphs=4))
    assert torch.equal(padded.x[:5], x) and not padded.x[5:].any()
    # one padding node for each padding graph, the rest to the last
    assert padded.batch.tolist() == [0, 0, 0, 1, 1, 2, 3, 3, 3]
    assert padded.edge_index[:, :3].tolist() == [[0, 1, 3], [1, 0, 4]]
    # from the first padding node to the others in turn: no cycle among the padding
    assert padded.edge_index[:, 3:].tolist() == [[5, 5, 5], [6, 7, 8]]
    with pytest.raises(qg.RunError, match="does not fit the padding budgets"):
        pad_batch(batch, Budgets(nodes=9, edges=2, graphs=4))


def padded_model(config: qg.Config):
    """(the model, its one task, the training batches, the padding budgets) of ``config``."""
    trainer = qg.Trainer(config)
    loader = trainer.prepare_dataloaders()[0]
    (task,) = trainer.tasks
    return trainer.model, task, list(loader), trainer.training_pass.budgets(loader)


def test_padding_changes_outputs_losses_and_gradients_by_float32_rounding_at_most(make_config):
    config = make_config(*PAD, "model.pooling=[mean, std]", "model.graph_features=[dimension]")
    model, task, batches, held = padded_model(config)
    for batch in batches[:4]:
        results = []
        for padded in (False, True):
            model.zero_grad()
            if padded:
                outputs = unpadded(model(pad_batch(batch, held, ["dimension"])), [task], batch)
            else:
                outputs = model(batch)
            loss = task.loss(outputs, batch)
            loss.backward()
            grads = [p.grad.clone() for p in model.parameters()]
            results.append((outputs.detach(), loss.detach(), task.correct(outputs, batch), grads))
        (out0, loss0, right0, grads0), (out1, loss1, right1, grads1) = results
        # Each real row is computed from real rows alone, but a matrix product chooses its
        # kernel, and so the order in which it sums a row's terms, by the number of rows: the
        # head's last layer over 10 graphs and over 30 can round apart by an ulp (measured
        # 3e-8 on outputs of ~0.1; the message passing itself agreed bit for bit).
        assert torch.allclose(out0, out1, rtol=1e-6, atol=1e-7)
        assert torch.allclose(loss0, loss1, rtol=1e-6) and torch.equal(right0, right1)
        # A weight's gradient is a sum over the batch's rows; the padding rows add zeros, but
        # the products and reductions group the real rows' terms into blocks by the number of
        # rows, each block rounded once in float32 (measured: 1.3e-6 of the largest element).
        for g0, g1 in zip(grads0, grads1, strict=True):
            assert torch.allclose(g0, g1, rtol=1e-5, atol=1e-5 * float(g0.abs().max()))


def test_padding_values_stay_bounded_through_many_layers_without_a_norm(make_config):
    # Padding edges into one node in a cycle made its value grow by the number of edges at
    # every layer (7.6e33 after 12 layers, NaN gradients in float16); spread from one sender
    # into nodes of bounded in-degree, they stay the size of a real node's.
    model, task, batches, held = padded_model(
        make_config(*PAD, "model.norm=none", "model.num_layers=10")
    )
    batch = batches[0]
    padded = pad_batch(batch, held)
    receivers = padded.edge_index[1, batch.edge_index.shape[1] :]
    assert int(receivers.bincount().max()) <= PADDING_DEGREE
    embeddings = {}
    model.convs[-1].register_forward_hook(lambda m, i, out: embeddings.update(last=out))
    grads = []
    for fed in (batch, padded):
        model.zero_grad()
        outputs = model(fed)
        task.loss(outputs[: batch.num_graphs], batch).backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    real = embeddings["last"][: batch.num_nodes].abs().max()
    assert embeddings["last"].abs().max() < 100 * real  # the padding's, no larger
    for g0, g1 in zip(*grads, strict=True):
        assert torch.isfinite(g1).all()
        assert torch.allclose(g0, g1, rtol=1e-5, atol=1e-5 * float(g0.abs().max()))


def padded_history(rank, world_size, config):
    trainer = qg.TrainerDDP(rank, config) if world_size > 1 else qg.Trainer(config)
    history = trainer.run_training(*trainer.prepare_dataloaders()[:2])
    trainer.close()
    return [x for row in history for x in (row["train_loss"], row["val_loss"], row["val_accuracy"])]


@pytest.mark.timeout(180)
def test_a_padded_run_trains_as_the_unpadded_one_on_one_and_two_processes(make_config, tmp_path):
    plain = padded_history(0, 1, make_config("training.batch_nodes=300"))
    padded = padded_history(0, 1, make_config(*PAD, f"training.path={tmp_path / 'padded'}"))
    # the gradients' rounding (above: equal to 1e-5) moves the weights apart by ~1e-7 a step,
    # which Adam's steps amplify: the losses of epoch 3 differed by 1e-4 on an Intel Xeon and
    # by 3.5e-4 on an AMD EPYC. A padding row that leaked into a loss, a pooling or a norm
    # moves them by percents.
    assert padded == pytest.approx(plain, rel=2e-3)
    two = make_config(*PAD, "parallel.world_size=2", f"training.path={tmp_path / 'two'}")
    rank0, rank1 = run_ranks(2, padded_history, two)
    assert rank0 == rank1 and len(rank0) == 3 * 3


@pytest.mark.timeout(300)
def test_compiled_padded_batches_of_64_to_2048_elements_compile_once(make_config):
    """With compile and padding, 50 batches of causal sets of 64 to 2,048 elements (node-budget
    batches of 1 to 9 sets) and their validation cost at most 2 compilations after the first
    (counted by TorchDynamo's own counter of frames it compiled)."""
    from torch._dynamo.utils import counters

    config = make_config(
        "data.num_graphs=40", "data.num_points=[64,2048]", "training.batch_nodes=4096",
        "training.pad_batches=true", "training.compile=true", "training.num_epochs=7",
        "model.hidden_channels=8", "model.head_channels=[8]", "model.num_layers=1",
    )  # fmt: skip
    trainer = qg.Trainer(config)
    train, val, _ = trainer.prepare_dataloaders()
    before = counters["frames"]["total"]
    history = trainer.run_training(train, val)
    trainer.close()
    batches = len(history) * len(train)
    assert batches >= 50, batches
    compiled = counters["frames"]["total"] - before
    assert 1 <= compiled <= 3, compiled  # the first, and at most 2 recompilations


@pytest.mark.parametrize(
    "overrides, fragment",
    [
        (["training.pad_batches=true"], "training.batch_nodes"),
        ([*PAD, "training.precision=16"], 'training.precision: "16"'),
        ([*PAD, "model.norm=batch"], "model.norm: batch"),
        ([*PAD, "model={type: user_models.SmallGCN}"], "model.type"),
        ([*PAD, "augmentation.preset=mild"], "augmentation.preset"),
    ],
)
def test_padding_that_could_change_results_is_refused(capsys, config_file, overrides, fragment):
    result = run_main(capsys, "train", config_file(), *overrides)
    assert_refused(result, "training.pad_batches", fragment)


def test_cuda_graphs_only_where_a_step_has_one_backward_pass(make_config):
    from QuantumGravPy.training.loop.compiling import Compiling

    gpu = torch.device("cuda", 0)  # the options only: nothing runs there

    def mode(*overrides: str, micro_batches: int = 1, device: torch.device = gpu):
        training = make_config(*PAD, "training.compile=true", *overrides).training
        return Compiling(training, device, micro_batches=micro_batches).training_options

    assert mode() == {"dynamic": False, "mode": "reduce-overhead"}
    # a replay would overwrite the gradients an earlier pass of the step left in its memory
    assert mode("training.accumulate_grad_batches=2")["mode"] is None
    assert mode(micro_batches=4)["mode"] is None
    assert mode(device=torch.device("cpu"))["mode"] is None
