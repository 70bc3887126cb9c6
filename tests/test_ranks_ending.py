"""A job ends, and says why, when a rank freezes, a callback never returns or the
launcher is killed; ranks hand their results over as data, never as pickles."""

from __future__ import annotations

import os

import pytest
from conftest import run_forked, run_main, start_forked

HANG = "training.callbacks=[{type: user_hangs.Hang, kwargs: {rank: %d}}]"


@pytest.mark.jobs
@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    ("sharing", "waits_in"),
    [
        # rank 0 waits for rank 1's gradients in the shared buffer, times out and closes the
        # buffer on its way out: the closing must not replace the timeout
        ("parallel.shared_memory=true", "no gradients from rank(s) 1 within 5 s"),
        # one batch an epoch: rank 0 waits in a gloo collective
        ("training.batch_size=64", "no answer from rank(s) 1 within 5 s"),
    ],
)
def test_a_frozen_rank_is_named_on_every_path(config_file, sharing, waits_in):
    # rank 1 stops in a callback at the end of its first epoch
    cfg = config_file(training={"batch_size": 4, "num_epochs": 3})
    result = run_forked(
        "train", cfg, "parallel.world_size=2", "parallel.timeout_s=5", sharing, HANG % 1,
        timeout=200,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr  # not the user's mistake
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: rank 0: {waits_in}"), last
    assert "BufferError" not in result.stderr
    # c10d's C++ stack dumps (the other rank's store connections breaking) are not shown
    assert "frame #" not in result.stderr and "TCPStore.cpp" not in result.stderr
    assert "Terminating process" not in result.stderr


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


def _ranks_of(pid: int) -> list:
    """The ranks a launcher started: forked by its fork server (a child of its own), or
    spawned interpreters."""
    import psutil

    found = []
    for child in psutil.Process(pid).children(recursive=True):
        try:
            if child.ppid() != pid or "spawn_main" in " ".join(child.cmdline()):
                found.append(child)
        except psutil.NoSuchProcess:
            continue
    return found


def _running(process) -> bool:
    """Not ended (a zombie has ended: only its exit status waits for a parent to read it)."""
    import psutil

    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.jobs
@pytest.mark.timeout(240)
def test_ranks_end_when_their_launcher_is_killed(config_file, tmp_path):
    import signal
    import time

    import psutil

    cfg = config_file(training={"batch_size": 4, "num_epochs": 10_000})
    job = start_forked("train", cfg, "parallel.world_size=2", "parallel.timeout_s=5")
    history = tmp_path / "run" / "history.csv"
    ranks = []
    try:
        # both ranks training, until an epoch is written (or the job failed)
        while job.poll() is None and not (history.exists() and len(ranks) >= 2):
            time.sleep(0.2)
            ranks = _ranks_of(job.pid)
        assert job.poll() is None, job.stderr_so_far()
        os.kill(job.pid, signal.SIGKILL)  # the launcher only, as `kill -9 PID` does
        # the promise: gone within parallel.timeout_s + 15 s of the launcher's death
        deadline = time.monotonic() + 5 + 15
        while (alive := [p.pid for p in ranks if _running(p)]) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert alive == []
        assert "the process that started this job" in job.stderr_so_far()
    finally:
        for process in ranks:
            try:
                process.kill()
            except psutil.NoSuchProcess:
                pass


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
