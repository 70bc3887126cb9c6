"""Shared-memory gradient averaging: the same numbers as gloo, on every rank, with nothing left over."""

import os

import torch
from conftest import run_ranks

import QuantumGravPy as qg
from QuantumGravPy.parallel import shm_comm


def average_many(rank, world_size):
    """Calls of varying sizes, more than the two buffers, with rank-specific values."""
    comm = shm_comm.SharedMemoryAllReduce(1000, timeout_s=30)
    results = []
    for call in range(7):
        n = 1000 if call % 3 == 0 else 10 + call
        values = torch.arange(n, dtype=torch.float32) * (rank + 1) + call
        results.append(comm.allreduce_mean(values))
    comm.close()
    return results, comm.name


def test_averages_match_the_definition_and_agree_bitwise_across_ranks():
    world_size = 3
    results, names = zip(*run_ranks(world_size, average_many), strict=True)
    assert len(set(names)) == 1  # one segment, shared by every rank
    for call, mean in enumerate(results[0]):
        n = mean.numel()
        expected = sum(torch.arange(n) * (r + 1) + call for r in range(world_size)) / world_size
        assert torch.allclose(mean, expected.float())
        for other in results[1:]:
            assert torch.equal(other[call], mean)
    # unlinked as soon as every rank had it open: nothing is left in /dev/shm
    assert not os.path.exists(os.path.join("/dev/shm", names[0]))


def train_and_return_weights(rank, world_size, config):
    trainer = qg.TrainerDDP(rank, config)
    loaders = trainer.prepare_dataloaders()
    history = trainer.run_training(loaders[0], loaders[1])
    trainer.close()
    weights = torch.cat([p.detach().flatten() for p in trainer.model.parameters()])
    rows = [{k: v for k, v in row.items() if k != "epoch_seconds"} for row in history]
    return trainer.gradient_sync, weights, rows


def test_training_through_shared_memory_equals_training_through_gloo(make_config, tmp_path):
    results = {}
    for shared in (True, False):
        config = make_config(
            f"parallel.shared_memory={str(shared).lower()}",
            f"training.path={tmp_path / str(shared)}",
        )
        results[shared] = run_ranks(2, train_and_return_weights, config)
    assert [r[0] for r in results[True]] == ["shared memory"] * 2
    assert [r[0] for r in results[False]] == ["gloo"] * 2
    for rank in (0, 1):
        assert torch.equal(results[True][rank][1], results[False][rank][1])
        assert results[True][rank][2] == results[False][rank][2]
