"""Range splitting contracts, lazy parameter streams, and generation split over processes."""

import itertools

import pytest
import torch

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


def test_parameter_stream_is_chunked_lazy_and_matches_direct_calls():
    chunks = list(
        qg.stream_distributed_augmentation_chain(
            25, rank=1, world_size=3, chunk_size=4, base_seed=9
        )
    )
    assert [len(c) for c in chunks] == [4, 4] and [p["sample_id"] for p in chunks[0]] == [
        9,
        10,
        11,
        12,
    ]
    direct = qg.gen_distributed_augmentation_params(10, 1, base_seed=9, world_size=3)
    assert chunks[0][1] == direct
    # a billion samples: only the first chunk is ever made
    huge = qg.stream_distributed_augmentation_chain(10**9, rank=0, world_size=2, chunk_size=3)
    assert len(next(itertools.islice(huge, 1))) == 3


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
