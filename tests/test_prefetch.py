"""DevicePrefetcher: batches handed to the training loop on its device, the same tensor for
tensor as ``batch.to(device)`` makes them; on a GPU in one pinned, asynchronous copy a batch,
on a stream of its own."""

import pytest
import torch
from torch.utils.data import DataLoader
from torch_geometric.data import Batch, Data

from QuantumGravPy.data.batches.prefetch import DevicePrefetcher
from QuantumGravPy.data.batches.transfer import pack_attributes, unpack_attributes

NEEDS_CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
CPU = torch.device("cpu")


def make_graphs(count: int, seed: int = 0, nodes: tuple[int, int] = (3, 9)) -> list[Data]:
    g = torch.Generator().manual_seed(seed)
    graphs = []
    for i in range(count):
        n = int(torch.randint(*nodes, (1,), generator=g))
        graphs.append(
            Data(
                x=torch.randn(n, 3, generator=g),
                edge_index=torch.randint(0, n, (2, 2 * n), generator=g),
                y=torch.randint(0, 4, (1,), generator=g),
                weight=torch.rand(n, generator=g),  # a float per node
                u=torch.randn(1, 2, generator=g),  # a graph attribute
                name=f"graph {seed}.{i}",
            )
        )
    return graphs


def make_batches(count: int, size: int = 4, **options) -> list[Batch]:
    return [Batch.from_data_list(make_graphs(size, seed=k, **options)) for k in range(count)]


def assert_same(a, b) -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor)
        assert (a.device, a.dtype, a.shape) == (b.device, b.dtype, b.shape)
        assert torch.equal(a, b)
    else:
        assert a == b


def assert_same_batch(ours: Batch, theirs: Batch) -> None:
    assert type(ours).__name__ == type(theirs).__name__
    assert list(ours.to_dict()) == list(theirs.to_dict())  # the same attributes, in order
    for key, value in theirs.to_dict().items():
        assert_same(ours[key], value)
    assert ours.num_graphs == theirs.num_graphs and ours.num_nodes == theirs.num_nodes
    for book in ("_slice_dict", "_inc_dict"):  # what to_data_list reads
        mine, reference = getattr(ours, book), getattr(theirs, book)
        assert mine.keys() == reference.keys()
        for key in reference:
            assert_same(mine[key], reference[key])
    for g, r in zip(ours.to_data_list(), theirs.to_data_list(), strict=True):
        assert list(g.keys()) == list(r.keys())
        for key in r.keys():
            assert_same(g[key], r[key])


def to_device(batch: Batch, device: torch.device, float_dtype: torch.dtype) -> Batch:
    """What the training loop's ``to_device`` does."""
    batch = batch.to(device)
    if float_dtype != torch.float32:
        batch = batch.apply(lambda t: t.to(float_dtype) if t.is_floating_point() else t)
    return batch


def attribute_tensors(batch: Batch) -> list[torch.Tensor]:
    return [v for v in batch.to_dict().values() if isinstance(v, torch.Tensor)]


# -- on a CPU: nothing moves ---------------------------------------------------------------


def test_on_a_cpu_the_batches_are_the_loaders():
    batches = make_batches(3)
    prefetcher = DevicePrefetcher(batches, device=CPU)
    assert len(prefetcher) == 3 and prefetcher.stream is None
    for _ in range(2):  # each iteration goes over the loader again
        yielded = list(prefetcher)
        assert len(yielded) == 3
        for ours, expected in zip(yielded, make_batches(3), strict=True):
            assert_same_batch(ours, expected)
    assert prefetcher.copies == prefetcher.bytes_copied == 0


def test_on_a_cpu_float64_converts_the_floating_point_tensors_only():
    (ours,) = DevicePrefetcher(make_batches(1), device=CPU, float_dtype=torch.float64)
    (expected,) = make_batches(1)
    for key in ("x", "weight", "u"):
        assert ours[key].dtype == torch.float64
        assert torch.equal(ours[key], expected[key].double())
    for key in ("edge_index", "y", "batch", "ptr"):
        assert_same(ours[key], expected[key])
    assert ours.name == expected.name


def test_what_is_not_a_batch_passes_through():
    items = [1, "a", [1, 2], None]
    assert [a is b for a, b in zip(DevicePrefetcher(items, device=CPU), items, strict=True)] == [
        True
    ] * 4
    tensor = torch.arange(3.0)
    (same,) = DevicePrefetcher([tensor], device=CPU, float_dtype=torch.float64)
    assert same is tensor


def test_the_loaders_length_and_attributes_are_the_wrappers():
    loader = DataLoader(make_graphs(10), batch_size=3, collate_fn=Batch.from_data_list)
    prefetcher = DevicePrefetcher(loader, device=CPU)
    assert len(prefetcher) == len(loader) == 4
    assert prefetcher.dataset is loader.dataset and prefetcher.sampler is loader.sampler
    assert prefetcher.batch_sampler is loader.batch_sampler
    with pytest.raises(AttributeError):
        prefetcher.no_such_attribute  # noqa: B018
    assert len(list(prefetcher)) == 4


def test_a_batch_made_again_from_a_copy_of_its_attributes_in_one_buffer():
    """What the GPU path does, with a copy on the host: the attributes views of the copy, the
    bookkeeping the batch's own (``to`` leaves it on the host), the batch the same."""
    (batch,) = make_batches(1)
    packed = pack_attributes(batch)
    ours = unpack_attributes(batch, packed, packed.buffer.clone())
    assert_same_batch(ours, make_batches(1)[0])
    assert_same_batch(batch, make_batches(1)[0])  # the batch itself is left as it was
    tensors = attribute_tensors(ours)
    assert len(tensors) == 7 and len({t.untyped_storage().data_ptr() for t in tensors}) == 1
    assert ours._slice_dict is batch._slice_dict and ours._inc_dict is batch._inc_dict


def test_what_the_buffer_cannot_hold_is_not_packed():
    (batch,) = make_batches(1)
    assert pack_attributes(batch.to_data_list()[0]) is None  # a Data, not a batch
    batch.extra = [torch.ones(2)]  # tensors in a list: `to` moves them
    assert pack_attributes(batch) is None
    del batch.extra
    batch.x = batch.x.to_sparse()
    assert pack_attributes(batch) is None


# -- on a GPU ------------------------------------------------------------------------------


def cuda() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device())


@pytest.mark.gpu
@NEEDS_CUDA
@pytest.mark.parametrize("float_dtype", [torch.float32, torch.float64], ids=str)
def test_on_a_gpu_the_batches_are_those_to_makes(float_dtype):
    prefetcher = DevicePrefetcher(make_batches(3), device="cuda", float_dtype=float_dtype)
    assert prefetcher.device == cuda()
    yielded = list(prefetcher)
    expected = [to_device(b, cuda(), float_dtype) for b in make_batches(3)]
    assert len(yielded) == 3
    for ours, theirs in zip(yielded, expected, strict=True):
        assert_same_batch(ours, theirs)


@pytest.mark.gpu
@NEEDS_CUDA
def test_on_a_gpu_each_batch_crosses_in_one_pinned_copy():
    from torch.profiler import ProfilerActivity, profile

    batches = make_batches(4)
    prefetcher = DevicePrefetcher(batches, device=cuda())
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        yielded = list(prefetcher)
        torch.cuda.synchronize()
    names = [e.name for e in prof.events()]
    copies = [name for name in names if name.startswith("Memcpy HtoD")]
    assert len(copies) == 4, sorted({name for name in names if "opy" in name})
    assert all("Pinned" in name for name in copies), copies
    assert prefetcher.copies == 4
    sizes = [pack_attributes(b).buffer.numel() for b in make_batches(4)]
    assert prefetcher.bytes_copied == sum(sizes)
    for batch in yielded:
        tensors = attribute_tensors(batch)
        assert all(t.device == cuda() for t in tensors)
        assert len({t.untyped_storage().data_ptr() for t in tensors}) == 1  # views of one


@pytest.mark.gpu
@NEEDS_CUDA
def test_on_a_gpu_nothing_in_the_prefetch_path_waits_for_the_gpu():
    batches = make_batches(20)
    total = torch.zeros((), device=cuda())
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for batch in DevicePrefetcher(batches, device=cuda(), float_dtype=torch.float64):
            total += batch.x.sum()
    finally:
        torch.cuda.set_sync_debug_mode(0)
    expected = torch.zeros((), device=cuda())
    for batch in make_batches(20):
        expected += to_device(batch, cuda(), torch.float64).x.sum()
    assert torch.equal(total, expected)


@pytest.mark.gpu
@NEEDS_CUDA
def test_on_a_gpu_the_copy_runs_on_a_stream_of_its_own_and_the_step_waits_for_it():
    batches = make_batches(4, nodes=(20_000, 20_001))  # some MB a batch
    prefetcher = DevicePrefetcher(batches, device=cuda())
    side = prefetcher.stream
    assert isinstance(side, torch.cuda.Stream)
    assert side.cuda_stream not in (
        torch.cuda.default_stream().cuda_stream,
        torch.cuda.current_stream().cuda_stream,
    )

    def result(batch: Batch) -> torch.Tensor:
        return torch.cat([(batch.x * batch.weight[:, None]).sum(0), batch.edge_index.sum(1)])

    torch.cuda.synchronize()
    # The side stream is held up: without the wait, the steps would read the device buffers
    # before anything was copied into them.
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)
    ours = [result(batch) for batch in prefetcher]
    theirs = [result(batch.to(cuda())) for batch in make_batches(4, nodes=(20_000, 20_001))]
    for a, b in zip(ours, theirs, strict=True):
        assert torch.equal(a, b)


@pytest.mark.gpu
@NEEDS_CUDA
def test_on_a_gpu_batches_already_there_and_other_items_pass_through():
    on_gpu = make_batches(1)[0].to(cuda())
    pointers = [t.data_ptr() for t in attribute_tensors(on_gpu)]
    prefetcher = DevicePrefetcher([on_gpu, [1, 2], torch.arange(3)], device=cuda())
    batch, items, tensor = prefetcher
    assert [t.data_ptr() for t in attribute_tensors(batch)] == pointers
    assert items == [1, 2] and tensor.device == cuda()
    assert prefetcher.copies == 1 and prefetcher.bytes_copied == 3 * 8  # the tensor, with `to`


# --- batches staged a pass at a time (the host path to a GPU) --------------------------------


def _faces_batcher():
    from test_batching import Faces

    from QuantumGravPy.data.batches.batching import IndexBatcher

    return IndexBatcher(Faces())


PASS = [[5], [11, 0, 3, 3, 7], list(range(12))[::-1]]


def test_a_pass_gathered_on_the_host_lies_in_one_buffer_that_a_copy_of_it_can_stand_for():
    """Every tensor a pass's batches hold (attributes, ``batch``, ``ptr``) views one buffer;
    the batches rebased on a copy of that buffer hold the same values, viewing the copy (what
    the prefetcher hands over after one copy of a pass to a GPU)."""
    from QuantumGravPy.data.batches.prefetch import rebased

    made = _faces_batcher().many(PASS)
    storages = {t.untyped_storage().data_ptr() for b in made for t in attribute_tensors(b)}
    assert len(storages) == 1
    base = torch.empty(0, dtype=torch.uint8).set_(attribute_tensors(made[0])[0].untyped_storage())
    copy_ = base.clone()
    for batch in made:
        moved = rebased(batch, base, copy_)
        for key, value in batch.to_dict().items():
            assert torch.equal(moved[key], value) and moved[key].dtype == value.dtype, key
            at = moved[key].data_ptr() - copy_.data_ptr()
            assert 0 <= at < copy_.numel()


def test_passes_made_ahead_by_a_thread_come_in_order_and_its_failure_is_raised_here():
    import threading

    from QuantumGravPy.data.batches.prefetch import ahead

    assert list(ahead(iter(range(50)))) == list(range(50))

    def failing():
        yield 1
        raise ValueError("a pass that cannot be made")

    with pytest.raises(ValueError, match="a pass that cannot be made"):
        list(ahead(failing()))
    made = ahead(iter(range(1000)))
    assert next(made) == 0
    made.close()  # a run that stops early: the thread ends with it
    assert not [t for t in threading.enumerate() if t.name == "qg-gather"]


def test_only_batches_made_on_the_host_for_a_gpu_are_staged():
    from test_batching import Faces

    from QuantumGravPy.data.batches import loaders

    graphs = Faces()
    assert loaders.index_batches(graphs, stage=torch.device("cuda", 0)).staged
    assert not loaders.index_batches(graphs, stage=CPU).staged
    assert not loaders.index_batches(graphs).staged


@pytest.mark.gpu
@NEEDS_CUDA
def test_on_a_gpu_a_staged_pass_is_pinned_copied_once_and_trains_as_batches_copied_alone(
    make_config, tmp_path, monkeypatch
):
    """Host batches for a GPU: each pass gathered into pinned memory by a thread, copied in one
    copy; the run's history is the one of batches packed and copied one at a time."""
    from conftest import train

    from QuantumGravPy.data.batches import loaders
    from QuantumGravPy.data.batches.prefetch import DevicePrefetcher as Prefetcher

    copies = []
    issue = Prefetcher._issue
    monkeypatch.setattr(
        Prefetcher, "_issue", lambda self, item: copies.append(self.copies) or issue(self, item)
    )
    common = ("training.device=cuda", "data.device=cpu", "training.num_epochs=2")
    _, staged, _ = train(make_config(*common, f"training.path={tmp_path / 'staged'}"))
    staged_copies = len(set(copies))
    copies.clear()
    monkeypatch.setattr(loaders, "index_batches", _unstaged(loaders.index_batches))
    _, alone, _ = train(make_config(*common, f"training.path={tmp_path / 'alone'}"))
    drop = ("epoch_seconds", "samples_per_second")
    assert [{k: v for k, v in r.items() if k not in drop} for r in staged] == [
        {k: v for k, v in r.items() if k not in drop} for r in alone
    ]
    assert staged_copies < len(set(copies))  # a copy a pass, not a copy a batch


def _unstaged(index_batches):
    def made(*args, **kwargs):
        batches = index_batches(*args, **kwargs)
        if batches is not None:
            batches.staged = False
        return batches

    return made
