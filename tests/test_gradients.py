"""Gradient clipping (training.gradient_clip) and activation checkpointing
(model.activation_checkpointing): what each optimizer step is allowed to do, and gradients that
do not change when activations are recomputed."""

import pytest
import torch
from conftest import assert_refused, run_main, run_ranks
from torch_geometric.data import Batch

import QuantumGravPy as qg
from QuantumGravPy.data.sources.datasets import dataset_from_config
from QuantumGravPy.models import build_model

MAX_NORM = 1e-3
SGD = ["training.optimizer.type=torch.optim.SGD", "training.optimizer.kwargs={lr: 1.0}"]


def whole(tensor: torch.Tensor) -> torch.Tensor:
    """A tensor whole: gathered from every rank if fsdp split it (a DTensor)."""
    return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor


def record_updates(trainer) -> list[tuple[float, float]]:
    """Per optimizer step, the change of all the model's weights: its norm, its largest element."""
    updates: list[tuple[float, float]] = []
    params = trainer.model.parameters
    step = trainer.optimizer.step

    def recording(*args, **kwargs):
        before = [p.detach().clone() for p in params()]
        result = step(*args, **kwargs)
        # whole changes: under fsdp each rank holds a part of every parameter
        change = torch.cat(
            [whole(p.detach() - b).flatten() for p, b in zip(params(), before, strict=True)]
        )
        updates.append((float(change.norm()), float(change.abs().max())))
        return result

    trainer.optimizer.step = recording  # what the gradient scaler calls too
    return updates


def clipped_epoch(rank, world_size, config):
    trainer = qg.TrainerDDP(rank, config) if world_size > 1 else qg.Trainer(config)
    updates = record_updates(trainer)
    train, val, _ = trainer.prepare_dataloaders()
    history = trainer.run_training(train, val)
    trainer.close()
    return updates, history[-1]["grad_norm_max"]


@pytest.mark.parametrize(
    "extra",
    [[], ["training.accumulate_grad_batches=2"], ["training.precision=16"]],
    ids=["plain", "accumulated", "float16"],
)
def test_every_step_moves_the_weights_by_at_most_max_norm(make_config, extra):
    """With SGD at learning rate 1 a step moves the weights by the clipped gradient: its norm
    over the whole model is max_norm at most, although the gradients were far larger."""
    config = make_config(
        *SGD, "training.num_epochs=1", f"training.gradient_clip={{max_norm: {MAX_NORM}}}", *extra
    )
    updates, largest = clipped_epoch(0, 1, config)
    assert len(updates) >= 3
    assert largest > 100 * MAX_NORM  # the monitor records the norm before clipping
    norms = [norm for norm, _ in updates]
    assert MAX_NORM * 0.99 <= max(norms) <= MAX_NORM * (1 + 1e-4)  # clipped to it, not below


def test_value_clips_every_element(make_config):
    config = make_config(*SGD, "training.num_epochs=1", "training.gradient_clip={value: 1.0e-4}")
    updates, _ = clipped_epoch(0, 1, config)
    largest = max(element for _, element in updates)
    assert 0.99e-4 <= largest <= 1e-4 * (1 + 2e-3)  # float32 rounding of the weights


@pytest.mark.timeout(180)
@pytest.mark.parametrize("precision", ["32", "16"])
@pytest.mark.parametrize("strategy", ["ddp", "zero", "fsdp"])
def test_clipping_under_ddp_takes_the_norm_of_the_averaged_gradients(
    make_config, strategy, precision
):
    """The norm over the whole model, wherever its parts are: fsdp's ranks hold half of each
    gradient, and every rank moves its weights by at most max_norm in all."""
    # fsdp's float16 gradients (of float16 weights) overflow at the scaler's first scales: the
    # steps it skips while the scale comes down need an epoch of more steps
    longer = ["training.batch_size=2"] if (strategy, precision) == ("fsdp", "16") else []
    config = make_config(
        *SGD, "training.num_epochs=1", f"training.gradient_clip={{max_norm: {MAX_NORM}}}",
        "training.accumulate_grad_batches=2", "parallel.world_size=2",
        f"parallel.strategy={strategy}", f"training.precision={precision}", *longer,
    )  # fmt: skip
    (updates0, largest), (updates1, _) = run_ranks(2, clipped_epoch, config)
    assert updates0 == updates1  # the same steps on both ranks (taken or skipped alike)
    assert largest > 100 * MAX_NORM
    assert MAX_NORM * 0.99 <= max(norm for norm, _ in updates0) <= MAX_NORM * (1 + 1e-4)


@pytest.mark.parametrize(
    "override, fragment",
    [
        ("training.gradient_clip={max_norm: 1.0, value: 2.0}", "either max_norm"),
        ("training.gradient_clip={norm_type: 2.0}", "either max_norm"),
        ("training.gradient_clip={value: 0}", "training.gradient_clip.value"),
        ("training.gradient_clip={max_norm: -1}", "training.gradient_clip.max_norm"),
        ("model.type=torch.nn.Linear", "model.activation_checkpointing"),
    ],
)
def test_impossible_clipping_and_checkpointing_are_refused(capsys, config_file, override, fragment):
    path = config_file(model={"activation_checkpointing": "model.type" in override})
    assert_refused(run_main(capsys, "train", path, override), fragment)


# --- activation checkpointing ----------------------------------------------------------------


def output(model, batch) -> torch.Tensor:
    out = model(batch)
    return out["y"] if isinstance(out, dict) else out


def gradients(config, batch, seed: int = 0) -> dict[str, torch.Tensor]:
    torch.manual_seed(seed)
    model = build_model(config.model, batch.num_node_features, {"y": (3, "graph")})
    model.train()
    torch.manual_seed(seed + 1)  # the dropout masks
    torch.nn.functional.cross_entropy(output(model, batch), batch.y).backward()
    return {name: p.grad for name, p in model.named_parameters()}


@pytest.mark.parametrize("norm", ["graph", "batch"])
def test_recomputed_activations_give_the_plain_models_gradients(make_config, norm):
    base = ["model.dropout=0.3", f"model.norm={norm}", "model.num_layers=3"]
    plain = make_config(*base)
    recomputed = make_config(*base, "model.activation_checkpointing=true")
    dataset = dataset_from_config(plain.data, progress=False)
    batch = Batch.from_data_list([dataset[i] for i in range(12)])
    ours, theirs = gradients(recomputed, batch), gradients(plain, batch)
    assert ours.keys() == theirs.keys()
    for name in ours:
        torch.testing.assert_close(ours[name], theirs[name], atol=1e-6, rtol=1e-5, msg=name)


def saved_bytes(config, batch) -> int:
    """The bytes of the tensors the autograd graph keeps for the backward pass."""
    model = build_model(config.model, batch.num_node_features, {"y": (3, "graph")}).train()
    total = 0

    def pack(tensor):
        nonlocal total
        total += tensor.numel() * tensor.element_size()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        output(model, batch).sum().backward()
    return total


def test_recomputed_activations_keep_less_and_the_model_trains(make_config):
    base = ["model.num_layers=4", "model.hidden_channels=32"]
    config = make_config(*base, "model.activation_checkpointing=true", "training.num_epochs=4")
    dataset = dataset_from_config(config.data, progress=False)
    batch = Batch.from_data_list([dataset[i] for i in range(32)])
    assert saved_bytes(config, batch) < 0.5 * saved_bytes(make_config(*base), batch)
    trainer = qg.Trainer(config)
    train, val, _ = trainer.prepare_dataloaders()
    history = trainer.run_training(train, val)
    trainer.close()
    assert history[-1]["train_loss"] < history[0]["train_loss"]
