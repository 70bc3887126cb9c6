"""The training step on a GPU: nothing in a steady step synchronises with the host (with the
batches made on the GPU, or copied from the host a step ahead), padded batches compiled once
and replayed as CUDA graphs, and TF32 where it changes no promise. Marked gpu: skipped without
CUDA, run with `make test-gpu`."""

from __future__ import annotations

import contextlib

import pytest
import torch

import QuantumGravPy as qg

NEEDS_CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@contextlib.contextmanager
def no_synchronisation():
    """Any call that makes the host wait for the GPU raises (torch's sync debug mode)."""
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(0)


def steady_steps_without_synchronising(trainer: qg.Trainer, batches: list) -> None:
    """Train on ``batches`` once to warm up (constants copied, compiled, captured), then again
    with every synchronisation an error, except in the reads at the end of the training pass,
    which are there by design."""
    trainer.train_epoch(batches)
    monitor = trainer.monitor
    read = monitor.read

    def read_at_the_end(*, step, epoch):
        if step is None:  # the epoch's one read: the mode off for it
            torch.cuda.set_sync_debug_mode(0)
        return read(step=step, epoch=epoch)

    monitor.read = read_at_the_end
    try:
        with no_synchronisation():
            trainer.train_epoch(batches)
    finally:
        monitor.read = read


@pytest.mark.gpu
@NEEDS_CUDA
@pytest.mark.parametrize("place", ["cuda", "cpu"], ids=["batches on the GPU", "from the host"])
@pytest.mark.parametrize("config", ["train.yaml", "multitask.yaml"])
def test_a_steady_step_never_synchronises_with_the_host(make_config, place, config, tmp_path):
    from conftest import ROOT

    config = qg.load_config(
        ROOT / "configs" / config,
        [f"data.root={tmp_path / 'data'}", "data.num_graphs=80", "data.num_points=[16,32]",
         f"training.path={tmp_path / 'run'}", "training.device=cuda", f"data.device={place}",
         "training.batch_size=8", "log_level=WARNING", "training.plots=false"],
    )  # fmt: skip
    trainer = qg.Trainer(config)
    loader = trainer.prepare_dataloaders()[0]
    steady_steps_without_synchronising(trainer, loader)
    trainer.close()


@pytest.mark.gpu
@NEEDS_CUDA
def test_padded_batches_compile_once_replay_as_cuda_graphs_and_never_synchronise(make_config):
    from torch._dynamo.utils import counters

    common = ("training.device=cuda", "training.batch_nodes=300", "training.num_epochs=3")
    config = make_config(*common, "training.pad_batches=true", "training.compile=true")
    trainer = qg.Trainer(config)
    train, val, _ = trainer.prepare_dataloaders()
    before = counters["frames"]["total"]
    skips = counters["inductor"]["cudagraph_skips"]
    history = trainer.run_training(train, val)
    assert counters["frames"]["total"] - before <= 3  # training's, validation's, one more
    # the training step ran as CUDA graphs: inductor skipped none (it counts each refusal:
    # mutated inputs, CPU tensors, dynamic shapes)
    assert counters["inductor"]["cudagraph_skips"] == skips
    steady_steps_without_synchronising(trainer, train)
    trainer.close()
    # the same run eager and unpadded: the same losses up to rounding (TF32 in both)
    eager = qg.Trainer(make_config(*common, "training.path=" + str(config.run_dir) + "-eager"))
    expected = eager.run_training(*eager.prepare_dataloaders()[:2])
    eager.close()
    for ours, theirs in zip(history, expected, strict=True):
        assert ours["train_loss"] == pytest.approx(theirs["train_loss"], rel=1e-2)


@pytest.mark.gpu
@NEEDS_CUDA
def test_tf32_is_on_for_float32_except_under_the_invariant_strategy(make_config, tmp_path):
    before = torch.get_float32_matmul_precision()
    trainer = qg.Trainer(make_config("training.device=cuda"))
    assert torch.get_float32_matmul_precision() == "high"
    trainer.close()
    assert torch.get_float32_matmul_precision() == before
    invariant = make_config(
        "training.device=cuda", "parallel.strategy=invariant", "parallel.invariant.micro_batches=2",
        "training.global_batch_size=16", f"training.path={tmp_path / 'invariant'}",
    )  # fmt: skip
    trainer = qg.Trainer(invariant)
    assert torch.get_float32_matmul_precision() == "highest"
    trainer.close()


def test_on_a_cpu_the_process_float32_setting_is_left_alone(make_config):
    torch.set_float32_matmul_precision("medium")  # what a user may have set
    try:
        trainer = qg.Trainer(make_config())
        assert torch.get_float32_matmul_precision() == "medium"
        trainer.close()
        assert torch.get_float32_matmul_precision() == "medium"
    finally:
        torch.set_float32_matmul_precision("highest")
