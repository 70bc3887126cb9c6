"""Range splitting contracts, lazy parameter streams, and generation split over processes."""

import pytest
import torch
from conftest import run_ranks

import QuantumGravPy as qg
from QuantumGravPy.cli import main


@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("total", [0, 1, 2, 3, 4, 5, 7, 10, 12, 23])
def test_ranges_are_contiguous_complete_balanced_larger_first(total, world_size):
    splitter = qg.DistributedRangeSplitter(total, world_size)
    ranges = splitter.get_all_ranges()
    assert len(ranges) == world_size and splitter.validate_ranges()
    covered = [i for start, end in ranges for i in range(start, end)]
    assert covered == list(range(total))  # every index once, in order
    sizes = [end - start for start, end in ranges]
    assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)
    if total < world_size:
        assert sizes.count(0) == world_size - total


@pytest.mark.parametrize("args", [(-1, 2), (5, 0), (5.0, 2), (True, 2), (5, "2")])
def test_impossible_splits_are_refused(args):
    with pytest.raises(ValueError):
        qg.DistributedRangeSplitter(*args)


def test_a_rank_outside_the_world_is_refused():
    with pytest.raises(ValueError, match="rank must be an integer in"):
        qg.DistributedRangeSplitter(10, 3).get_rank_range(3)


def test_parameter_stream_yields_one_dict_per_sample_matching_direct_calls():
    stream = qg.stream_distributed_augmentation_chain(
        25, rank=1, world_size=3, chunk_size=4, base_seed=9
    )
    params = list(stream)
    assert all(isinstance(p, dict) for p in params)
    assert [p["sample_id"] for p in params] == list(range(9, 17))  # rank 1's range of 25 over 3
    assert params[1] == qg.gen_distributed_augmentation_params(10, 1, base_seed=9, world_size=3)


@pytest.mark.parametrize("chunk_size", [1, 3, 1000])
@pytest.mark.parametrize("num_samples, world_size", [(0, 2), (2, 5), (23, 4), (1000, 4), (7, 1)])
def test_parameter_streams_of_all_ranks_cover_every_sample_once(
    num_samples, world_size, chunk_size
):
    seen = [
        p["sample_id"]
        for rank in range(world_size)
        for p in qg.stream_distributed_augmentation_chain(
            num_samples, rank, world_size, chunk_size=chunk_size
        )
    ]
    assert seen == list(range(num_samples))


def test_parameter_stream_computes_one_chunk_at_a_time(monkeypatch):
    from QuantumGravPy.data.batches import augment

    calls = []
    real = augment.gen_distributed_augmentation_params
    monkeypatch.setattr(
        augment,
        "gen_distributed_augmentation_params",
        lambda *a, **k: calls.append(a[0]) or real(*a, **k),
    )
    huge = qg.stream_distributed_augmentation_chain(10**9, rank=0, world_size=2, chunk_size=3)
    assert calls == []  # nothing is computed before the stream is read
    first = next(huge)
    assert first["sample_id"] == 0 and calls == [0, 1, 2]
    assert [next(huge)["sample_id"] for _ in range(3)] == [1, 2, 3] and len(calls) == 6


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"chunk_size": 0}, "chunk_size must be an integer >= 1"),
        ({"rank": 4}, "rank must be an integer in"),
        ({"world_size": 0}, "world_size must be an integer >= 1"),
        ({"num_samples": -1}, "total_samples must be an integer >= 0"),
    ],
)
def test_impossible_stream_arguments_are_refused_when_the_stream_is_made(kwargs, message):
    args = {"num_samples": 10, "rank": 0, "world_size": 4, **kwargs}
    with pytest.raises(ValueError, match=message):
        qg.stream_distributed_augmentation_chain(**args)


def _count_stream(rank, world_size, num_samples):
    ids = [
        p["sample_id"]
        for p in qg.stream_distributed_augmentation_chain(
            num_samples, rank, world_size, config=qg.get_preset("moderate")
        )
    ]
    return {"rank": rank, "processed": len(ids), "ids": ids}


@pytest.mark.timeout(120)
def test_four_real_ranks_each_stream_their_share_and_together_every_sample():
    results = run_ranks(4, _count_stream, 1000)
    assert [r["processed"] for r in results] == [250, 250, 250, 250]
    assert sum(r["processed"] for r in results) == 1000
    assert sorted(i for r in results for i in r["ids"]) == list(range(1000))


def test_generate_with_several_processes_equals_one(tmp_path, capsys):
    caches = {}
    for world_size in (1, 3):
        config = tmp_path / f"w{world_size}.yaml"
        config.write_text(f"data: {{root: {tmp_path / str(world_size)}, num_graphs: 31}}\n")
        assert main(["generate", str(config), "--world-size", str(world_size)]) == 0
        (cache,) = (tmp_path / str(world_size) / "processed").glob("causal_sets_*.pt")
        caches[world_size] = cache
    assert caches[1].name == caches[3].name  # the same parameters, the same cache name
    one = qg.CausalSetDataset(str(tmp_path / "1"), num_graphs=31, progress=False)
    three = qg.CausalSetDataset(str(tmp_path / "3"), num_graphs=31, progress=False)
    for a, b in zip(one, three, strict=True):
        assert torch.equal(a.x, b.x) and torch.equal(a.edge_index, b.edge_index)
        assert torch.equal(a.y, b.y) and torch.equal(a.pos, b.pos)
