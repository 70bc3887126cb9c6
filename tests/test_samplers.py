"""Sampler contracts over world sizes 1-5 and dataset sizes below, at and not divisible by them."""

from collections import Counter

import numpy as np
import pytest
import torch
from torch.utils.data import DistributedSampler, RandomSampler, Sampler, WeightedRandomSampler

import QuantumGravPy as qg
from QuantumGravPy.data.batches.samplers import counter_uniforms

WORLD_SIZES = [1, 2, 3, 4, 5]
SIZES = [1, 3, 4, 7, 10, 12, 23]


def shards(make, world_size):
    return [list(make(rank)) for rank in range(world_size)]


def interleave(parts):
    return [parts[k % len(parts)][k // len(parts)] for k in range(sum(map(len, parts)))]


class Countdown(Sampler[int]):
    """A custom sampler with neither a generator nor set_epoch, drawing from the global RNG."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __iter__(self):
        return iter(torch.randperm(self.n).tolist())


# --- DistributedSamplerWrapper --------------------------------------------------------------


@pytest.mark.parametrize("world_size", WORLD_SIZES)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("drop_last", [False, True])
def test_wrapper_shards_partition_the_wrapped_sequence(world_size, n, drop_last):
    inner = WeightedRandomSampler(torch.rand(n) + 0.1, num_samples=n)

    def make(rank, ws=world_size):
        return qg.DistributedSamplerWrapper(
            inner, num_replicas=ws, rank=rank, seed=7, drop_last=drop_last
        )

    parts = shards(make, world_size)
    sequence = list(make(0, 1))  # the wrapped sequence of this epoch, on one rank
    lengths = {len(p) for p in parts}
    assert len(lengths) == 1 and lengths == {len(make(0))}  # equal lengths, as __len__ says
    merged = interleave(parts)
    if drop_last:
        assert merged == sequence[: (n // world_size) * world_size]
    else:
        padded = sequence + [sequence[k % n] for k in range(-n % world_size)]
        assert merged == padded  # padding wraps around to the start, like DistributedSampler


def test_wrapper_pads_exactly_like_distributed_sampler():
    for n, world_size in [(7, 3), (2, 5), (10, 4)]:
        inner = list(range(n))
        for rank in range(world_size):
            ours = qg.DistributedSamplerWrapper(inner, num_replicas=world_size, rank=rank, seed=0)
            theirs = DistributedSampler(inner, num_replicas=world_size, rank=rank, shuffle=False)
            assert list(ours) == list(theirs)


def test_wrapper_is_deterministic_reshuffles_by_epoch_and_leaves_the_global_rng_alone():
    for inner in (RandomSampler(range(50)), Countdown(50)):
        a = qg.DistributedSamplerWrapper(inner, num_replicas=2, rank=1, seed=3)
        b = qg.DistributedSamplerWrapper(inner, num_replicas=2, rank=1, seed=3)
        torch.manual_seed(123)
        before = torch.get_rng_state()
        first = list(a)
        assert torch.equal(torch.get_rng_state(), before)  # the global RNG is untouched
        assert first == list(b) == list(a)  # same (seed, epoch): same shard, every time
        a.set_epoch(1)
        assert list(a) != first and len(list(a)) == 25


def test_wrapper_forwards_set_epoch():
    inner = qg.ClassBalancedSampler([0, 1] * 10, seed=1)
    wrapper = qg.DistributedSamplerWrapper(inner, num_replicas=2, rank=0, seed=0)
    wrapper.set_epoch(4)
    assert inner.epoch == 4


# --- native samplers -------------------------------------------------------------------------


@pytest.mark.parametrize("world_size", WORLD_SIZES)
@pytest.mark.parametrize("num_samples", [1, 4, 7, 23, 60])
def test_native_draws_interleave_into_the_single_process_draws(world_size, num_samples):
    weights = np.linspace(0.1, 2.0, 17)

    def make(rank, ws=world_size):
        return qg.DistributedWeightedRandomSampler(
            weights, num_samples=num_samples, num_replicas=ws, rank=rank, seed=11
        )

    parts = shards(make, world_size)
    assert len({len(p) for p in parts}) == 1  # every rank takes the same number of steps
    total = sum(map(len, parts))
    assert num_samples <= total < num_samples + world_size  # the epoch does not grow with W
    single = list(
        qg.DistributedWeightedRandomSampler(
            weights, num_samples=total, num_replicas=1, rank=0, seed=11
        )
    )
    assert interleave(parts) == single
    for part in parts[1:]:
        assert part != parts[0] or len(part) <= 1  # ranks draw different indices


def test_native_sampler_reshuffles_by_epoch_and_is_deterministic():
    a = qg.DistributedClassBalancedSampler([0] * 30 + [1] * 3, num_replicas=2, rank=0, seed=5)
    b = qg.DistributedClassBalancedSampler([0] * 30 + [1] * 3, num_replicas=2, rank=0, seed=5)
    assert list(a) == list(b)
    first = list(a)
    a.set_epoch(1)
    assert list(a) != first


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_each_rank_is_class_balanced_by_itself(world_size):
    labels = [0] * 900 + [1] * 90 + [2] * 10  # imbalanced 90 : 9 : 1
    for rank in range(world_size):
        draws = list(
            qg.DistributedClassBalancedSampler(
                labels, num_replicas=world_size, rank=rank, num_samples=30000, seed=2
            )
        )
        counts = Counter(labels[i] for i in draws)
        for c in (0, 1, 2):
            assert abs(counts[c] / len(draws) - 1 / 3) < 0.03, (rank, counts)


def test_zero_weights_are_never_drawn_and_bad_weights_are_refused():
    draws = list(
        qg.DistributedWeightedRandomSampler(
            [0, 1, 0, 2, 0], num_samples=500, num_replicas=1, rank=0, seed=0
        )
    )
    assert set(draws) == {1, 3}
    for bad in ([], [0, 0], [1, -1], [1, float("nan")]):
        with pytest.raises(ValueError):
            qg.DistributedWeightedRandomSampler(bad, num_replicas=1, rank=0, seed=0)
    with pytest.raises(ValueError, match="rank must be in"):
        qg.DistributedClassBalancedSampler([0, 1], num_replicas=2, rank=2, seed=0)


def test_progressive_sampler_moves_from_natural_to_balanced():
    labels = [0] * 900 + [1] * 100
    sampler = qg.ProgressiveClassBalancedSampler(
        labels, num_samples=20000, seed=0, epochs_to_balance=4
    )
    fractions = []
    for epoch in range(6):
        sampler.set_epoch(epoch)
        fractions.append(sum(labels[i] for i in sampler) / 20000)  # share of class 1
    expected = [0.1, 0.2, 0.3, 0.4, 0.5, 0.5]
    assert fractions == pytest.approx(expected, abs=0.015)


def test_counter_uniforms_are_uniform_and_depend_on_every_input():
    u = counter_uniforms(1, 0, np.arange(100000))
    assert 0 <= u.min() and u.max() < 1 and abs(u.mean() - 0.5) < 0.005
    assert np.histogram(u, bins=10, range=(0, 1))[0].min() > 9500
    assert not np.array_equal(u[:10], counter_uniforms(2, 0, np.arange(10)))
    assert not np.array_equal(u[:10], counter_uniforms(1, 1, np.arange(10)))
