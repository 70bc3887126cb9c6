"""A job ends, and says why, when a rank freezes, a callback never returns or the
launcher is killed; ranks hand their results over as data, never as pickles."""

from __future__ import annotations

import os

import pytest
from conftest import run_main

HANG = "training.callbacks=[{type: user_hangs.Hang, kwargs: {rank: %d}}]"


def test_torchs_cpp_log_records_go_to_the_log_and_the_rest_is_shown(tmp_path):
    import io

    from QuantumGravPy.parallel.native_output import Relay, to_log

    dump = [
        "[rank1]:[W1129 12:44:06.261753176 TCPStore.cpp:125] [c10d] recvValue failed on Socket",
        "Exception raised from recvBytes at Utils.hpp:787 (most recent call first):",
        "frame #0: c10::Error::Error(c10::SourceLocation) + 0x9d (0x7f0a73779b8d in libc10.so)",
        "<omitting python frames>",
        "frame #19: <unknown function> + 0x891f5 (0x7f0a75aa71f5 in libc.so.6)",
        "",
    ]
    other = ["a line of the user's C extension", "Fatal Python error: Segmentation fault"]
    (tmp_path / "stderr0").write_text("\n".join([other[0], *dump, other[1]]) + "\n")
    (tmp_path / "stderr1").write_text("no newline at the end")
    kept, shown = [], io.StringIO()
    relay = Relay(
        [tmp_path / "stderr0", tmp_path / "stderr1"],
        lambda r, lines: kept.append((r, lines)),
        shown,
    )
    relay.close()
    assert kept == [(0, dump)]
    assert shown.getvalue().splitlines() == [*other, "no newline at the end"]
    # kept in the run's log, marked with the rank; never a log of its own where none is
    log = tmp_path / "train.log"
    to_log(log)(1, dump[:2])
    assert not log.exists()
    log.write_text("12:00:00 INFO epoch 1\n")
    to_log(log)(1, dump[:2])
    assert log.read_text().splitlines()[1:] == [f"[RANK 1] {line}" for line in dump[:2]]


@pytest.mark.timeout(120)
def test_a_callback_that_never_returns_ends_a_one_process_run(config_file, capsys, tmp_path):
    cfg = config_file(training={"batch_size": 4, "num_epochs": 3})
    result = run_main(capsys, "train", cfg, "parallel.timeout_s=2", HANG % 0)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "error: training.callbacks user_hangs.Hang.on_epoch_end did not return within 2 s "
        "(parallel.timeout_s)"
    ]
    assert "did not return within 2 s" in (tmp_path / "run" / "train.log").read_text()


# --- results handed over as data ------------------------------------------------------------


def _graphs(rank: int, world_size: int) -> list:
    """Graphs with every kind of attribute a user's may have: a 0-dim target, a string, a
    number, node and edge tensors, one whose shape differs from graph to graph."""
    import torch
    from torch_geometric.data import Data

    g = torch.Generator().manual_seed(rank)
    return [
        Data(x=torch.rand(3 + i % 4, 2, generator=g), edge_index=torch.tensor([[0, 1], [1, 2]]),
             y=torch.tensor(i % 2), name=f"g{rank}.{i}", k=i, w=torch.rand(i % 3, generator=g))
        for i in range(50)
    ]  # fmt: skip


def _same(a, b) -> bool:
    import torch

    if set(a.keys()) != set(b.keys()):
        return False
    for key in a.keys():
        x, y = a[key], b[key]
        if type(x) is not type(y):
            return False
        if isinstance(x, torch.Tensor) and not (x.dtype == y.dtype and torch.equal(x, y)):
            return False
        if not isinstance(x, torch.Tensor) and x != y:
            return False
    return True


@pytest.mark.timeout(120)
def test_graphs_come_back_from_the_ranks_as_they_were_made_without_unpickling(monkeypatch):
    import pickle

    from QuantumGravPy.data.storage.ranges import in_parallel

    def refused(*args, **kwargs):
        raise AssertionError("the hand-over unpickled")

    monkeypatch.setattr(pickle, "loads", refused)
    monkeypatch.setattr(pickle, "load", refused)
    parts = in_parallel(_graphs, 2)
    assert len(parts) == 2
    for rank, part in enumerate(parts):
        made = _graphs(rank, 2)
        assert len(part) == len(made)
        assert all(_same(a, b) for a, b in zip(part, made, strict=True))


class _Planted:
    """What an attacker plants: rebuilding it runs code (it leaves a file behind)."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _plant_into_rank0s_result(rank: int, world_size: int, folder: str, marker: str):
    """Rank 1 replaces rank 0's result, once written, with a planted object."""
    import time

    import torch

    if rank == 1:
        result = os.path.join(folder, "result0.pt")
        while not os.path.exists(result):
            time.sleep(0.05)
        torch.save({"graphs": _Planted(marker)}, result + ".planted")
        os.replace(result + ".planted", result)
    return {"rank": rank}


@pytest.mark.timeout(120)
def test_a_planted_result_file_is_refused_and_never_run(monkeypatch, tmp_path):
    import contextlib
    import tempfile

    import QuantumGravPy as qg
    from QuantumGravPy.parallel.handover import NotData

    folder, marker = tmp_path / "spawn", tmp_path / "ran"
    folder.mkdir()
    # the ranks' results go where the test (the attacker) can write
    monkeypatch.setattr(tempfile, "TemporaryDirectory", lambda **kw: contextlib.nullcontext(folder))
    with pytest.raises(NotData, match=r"result0.pt: holds objects other than tensors"):
        qg.spawn(_plant_into_rank0s_result, 2, str(folder), str(marker), backend="gloo",
                 timeout_s=60, start_method="forkserver")  # fmt: skip
    assert not marker.exists()


def _returns_an_object(rank: int, world_size: int):
    return {"rank": rank, "thing": object()}


@pytest.mark.timeout(120)
def test_a_result_that_is_not_data_is_named_by_the_rank_that_returned_it():
    import QuantumGravPy as qg

    with pytest.raises(qg.WorkerError, match=r"rank 0: a result holds a builtins.object") as info:
        qg.spawn(_returns_an_object, 1, backend="gloo", timeout_s=60, start_method="forkserver")
    assert info.value.users is False  # a library bug or the caller's, not a config mistake
