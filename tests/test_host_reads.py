"""A steady training step reads nothing on the host: on a GPU every read waits for the queued
work, so the host could never run ahead. Counted on the CPU (the same calls), for the shipped
configs of each kind of task, on one and two processes; and a step with non-finite gradients
is still left out exactly, and still named, without those reads."""

from __future__ import annotations

import sys

import pytest
import torch
from conftest import ROOT, run_ranks

import QuantumGravPy as qg

sys.path.insert(0, str(ROOT / "bench"))
from host_reads import HostReads

# classification, binary, standardised regression, three tasks at once
CONFIGS = ["train.yaml", "manifold_like.yaml", "ricci.yaml", "multitask.yaml"]


def shipped(name: str, tmp_path, data_root, *overrides: str) -> qg.Config:
    return qg.load_config(
        ROOT / "configs" / name,
        [
            f"data.root={data_root}", "data.num_graphs=60", "data.num_points=[16,24]",
            f"training.path={tmp_path / name}", "training.device=cpu", "training.batch_size=4",
            "model.hidden_channels=8", "log_level=WARNING", "training.plots=false", *overrides,
        ],
    )  # fmt: skip


def reads_per_step(rank: int, world_size: int, configs: list[qg.Config]) -> list[float]:
    """For each config: host reads per training step, from two epochs of 2 and 5 steps (what
    an epoch reads once, at its end, cancels), and where the reads were."""
    out = []
    for config in configs:
        trainer = qg.TrainerDDP(rank, config) if world_size > 1 else qg.Trainer(config)
        batches = list(trainer.prepare_dataloaders()[0])
        trainer.train_epoch(batches[:2])  # DDP's buckets and the optimizer's state exist
        counts = []
        for n in (2, 5):
            with HostReads(trainer.optimizer) as reads:
                trainer.train_epoch(batches[:n])
            counts.append(reads)
        trainer.close()
        out.append(((counts[1].count - counts[0].count) / 3, dict(counts[1].where)))
    return out


@pytest.mark.parametrize("name", CONFIGS)
def test_a_steady_training_step_reads_nothing_on_the_host(tmp_path, data_root, name):
    # the counter sees what a step reads today (before: the gradient norm, 1.00 a step)
    ((per_step, where),) = reads_per_step(0, 1, [shipped(name, tmp_path, data_root)])
    assert per_step == 0, where


def test_skipping_non_finite_steps_reads_nothing_with_a_fused_optimizer(tmp_path, data_root):
    config = shipped("train.yaml", tmp_path, data_root, "monitor.nonfinite=skip")
    ((per_step, where),) = reads_per_step(0, 1, [config])
    assert per_step == 0, where
    # an optimizer without a fused kernel must read the flag before it steps: one a step
    config = shipped(
        "train.yaml", tmp_path, data_root, "monitor.nonfinite=skip",
        "training.path=" + str(tmp_path / "unfused"), "training.optimizer.kwargs={lr: 0.005}",
    )  # fmt: skip
    ((per_step, _),) = reads_per_step(0, 1, [config])
    assert per_step == 1


@pytest.mark.timeout(240)
def test_on_two_processes_a_step_reads_nothing_with_replicas_checked_every_step(
    tmp_path, data_root
):
    every_step = ("parallel.world_size=2", "monitor.check_replicas_every=1")
    configs = [shipped(name, tmp_path, data_root, *every_step) for name in CONFIGS]
    results = run_ranks(2, reads_per_step, configs, timeout_s=200)
    for rank, result in enumerate(results):
        for name, (per_step, where) in zip(CONFIGS, result, strict=True):
            assert per_step == 0, (rank, name, where)


def steps_and_weights(rank: int, world_size: int, config: qg.Config):
    """Whether each optimizer step changed the weights, and the history."""
    trainer = qg.TrainerDDP(rank, config)
    moved: list[bool] = []
    step = trainer.optimizer.step

    def recording(*args, **kwargs):
        before = [p.detach().clone() for p in trainer.model.parameters()]
        result = step(*args, **kwargs)
        after = list(trainer.model.parameters())
        moved.append(not all(torch.equal(a, b) for a, b in zip(after, before, strict=True)))
        return result

    trainer.optimizer.step = recording
    history = trainer.run_training(*trainer.prepare_dataloaders()[:2])
    weights = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
    trainer.close()
    return moved, history, weights


# two processes, rank 1's third step with a NaN gradient, a fused optimizer
NAN_ON_RANK_1 = (
    "model={type: user_models.NaNGradientOnRank1}", "parallel.world_size=2",
    "training.optimizer.kwargs={lr: 0.003, fused: true}",
)  # fmt: skip


@pytest.mark.timeout(180)
def test_a_fused_optimizer_leaves_a_nan_step_out_exactly_on_every_rank(make_config):
    config = make_config(*NAN_ON_RANK_1, "monitor.nonfinite=skip", "training.num_epochs=2")
    (moved0, history0, weights0), (moved1, history1, weights1) = run_ranks(
        2, steps_and_weights, config
    )
    # 3 steps an epoch; the third had rank 1's NaN: the fused kernel was called and moved
    # nothing (the flag stayed on the device), and every other step moved the weights
    assert moved0 == moved1 == [True, True, False, True, True, True]
    assert [row["skipped_steps"] for row in history0] == [1, 0]
    assert history0 == history1
    for name in weights0:
        assert torch.equal(weights0[name], weights1[name]), name


def train(rank: int, world_size: int, config: qg.Config) -> None:
    trainer = qg.TrainerDDP(rank, config)
    trainer.run_training(*trainer.prepare_dataloaders()[:2])


@pytest.mark.timeout(180)
def test_a_nan_read_late_is_still_named_with_its_rank_parameter_and_step(make_config):
    # read only at the end of the epoch: the NaN of step 3 is named there, on every rank
    config = make_config(*NAN_ON_RANK_1, "monitor.read_every=0", "training.batch_size=8")
    with pytest.raises(qg.WorkerError) as raised:
        run_ranks(2, train, config)
    assert (
        "non-finite gradients at step 3 (epoch 1): rank 1 produced them (its loss is finite), "
        "first in parameter scale"
    ) in str(raised.value)


def test_which_optimizers_leave_a_step_out_on_the_device():
    from QuantumGravPy.training.monitoring.gradients import masks_on_device

    params = [torch.nn.Parameter(torch.zeros(3))]
    assert masks_on_device(torch.optim.AdamW(params, fused=True))
    assert masks_on_device(torch.optim.SGD(params, lr=0.1, fused=True))
    assert not masks_on_device(torch.optim.AdamW(params))  # no fused kernel to hand a flag
    # Fused SGD with momentum makes its buffers with empty_like on its first step and leaves
    # them to the kernel: a first step left out would leave them uninitialised (NaN or 1e28
    # moves later), so it reads the flag instead.
    assert not masks_on_device(torch.optim.SGD(params, lr=0.1, momentum=0.9, fused=True))


def test_under_nonfinite_error_a_step_has_no_masked_update_and_the_same_bits(make_config):
    """monitor.nonfinite: error stops the run at the next read, before weights are saved, so
    its steps are not masked: each is plain (no flag made, copied and undone in the step
    counters), and trains to the same bits as a masked step that was not left out."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.count = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.count += not func.is_view
            return func(*args, **(kwargs or {}))

    fused = "training.optimizer.kwargs={lr: 0.003, fused: true}"
    runs = {}
    for mode in ("error", "skip"):
        trainer = qg.Trainer(make_config(fused, f"monitor.nonfinite={mode}"))
        loader = trainer.prepare_dataloaders()[0]
        with Ops() as ops:
            history = [trainer.train_epoch(loader) for _ in range(2)]
        runs[mode] = (ops.count / (2 * len(loader)), history, trainer.model.state_dict())
    (plain, history, weights), (masked, masked_history, masked_weights) = runs.values()
    assert plain <= masked - 3, (plain, masked)  # a flag, its copy, the counters' undo, where
    assert history == masked_history
    for name, value in weights.items():
        assert torch.equal(value, masked_weights[name]), name
