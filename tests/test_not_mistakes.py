"""Failures that are not the user's mistake are reported as what they are: a full disk, a bug in
the library's own model code, the device failing, a tracking server or a study's database that
cannot be reached. Each is one line with exit status 1 (a mistake is exit status 2), its cause
kept; a full disk names the file and what the run can continue from."""

import errno
import socket
from pathlib import Path

import pytest
import torch
from conftest import run_main
from torch_geometric.utils import scatter

import QuantumGravPy as qg
from QuantumGravPy.errors import disk_full, unreachable
from QuantumGravPy.runs import checkpoint


def failed(result) -> str:
    """Exit status 1, one line on stderr starting with ``error:``, no traceback."""
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def _full_from_epoch(monkeypatch, module, name: str, epoch_of, first: int) -> None:
    """``module.name`` (a writer) fails with ENOSPC from epoch ``first`` on, as a write to a
    full device does (the file system's own error, errno 28)."""
    real = getattr(module, name)

    def writer(*args, **kwargs):
        if epoch_of(*args) >= first:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, writer)


def test_a_full_disk_at_a_checkpoint_is_one_line_and_resume_continues_to_the_same_run(
    config_file, tmp_path, capsys, monkeypatch
):
    """The device fills while epoch 4's checkpoint is written: one line naming the file, the
    epoch last.pt holds (3, whole) and --resume; after space is freed, --resume gives the
    uninterrupted run's history to the bit (the same process, kernels and batches)."""
    cfg = config_file(training={"num_epochs": 5})
    whole = run_main(capsys, "train", cfg, f"training.path={tmp_path / 'whole'}")
    assert whole.returncode == 0, whole.stderr

    # torch.save writes into the temporary file; the error reaches save_checkpoint as it would
    def epoch(state, *_):
        return state.get("epoch", -1) if isinstance(state, dict) else -1

    _full_from_epoch(monkeypatch, checkpoint.torch, "save", epoch, 4)
    line = failed(run_main(capsys, "train", cfg))
    run = tmp_path / "run"
    assert line.startswith("error: no space left on the device writing "), line
    assert "(epoch 4)" in line and f"{run / 'checkpoints' / 'last.pt'} holds epoch 3, whole" in line
    assert line.endswith("free space on that device and continue with --resume"), line
    assert qg.load_checkpoint(run / "checkpoints" / "last.pt")["epoch"] == 3
    assert not list((run / "checkpoints").glob(".*tmp*"))  # no half-written file left behind
    monkeypatch.undo()

    resumed = run_main(capsys, "train", cfg, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    a = qg.load_checkpoint(tmp_path / "whole" / "checkpoints" / "last.pt")
    b = qg.load_checkpoint(run / "checkpoints" / "last.pt")
    assert [r["train_loss"] for r in a["history"]] == [r["train_loss"] for r in b["history"]]
    for key, value in a["model"].items():
        assert torch.equal(value, b["model"][key]), key


def test_a_full_disk_at_history_csv_names_it_and_the_checkpoint_to_continue_from(
    config_file, tmp_path, capsys, monkeypatch
):
    """A record written after last.pt (history.csv): the file, and last.pt's epoch."""
    cfg = config_file(training={"num_epochs": 3})
    real = Path.write_text

    def write_text(self, text, *args, **kwargs):  # the device fills at epoch 2's history
        if self.name.startswith(".history.csv.tmp") and text.count("\n") >= 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, text, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", write_text)
    line = failed(run_main(capsys, "train", cfg))
    run = tmp_path / "run"
    assert f"no space left on the device writing {run / 'history.csv'}" in line, line
    assert f"{run / 'checkpoints' / 'last.pt'} holds epoch 2, whole" in line, line


def test_a_failure_in_the_librarys_own_model_code_is_a_bug_not_a_config_key(
    config_file, tmp_path, capsys, monkeypatch
):
    """Before, any failure of the built-in model's first pass blamed a model.* key (exit 2)."""

    # a library function called wrongly from the built-in model's own code (no frame of this
    # file on the traceback): scatter's third argument is a dimension, not a count
    monkeypatch.setitem(qg.models.gnn.POOLING, "mean", scatter)
    line = failed(run_main(capsys, "train", config_file()))
    assert "ValueError: The `dim` argument" in line and "a bug in the library" in line, line
    assert not line.startswith("error: model."), line
    assert not (tmp_path / "run").exists()


def test_the_device_failing_in_a_layer_the_config_chose_is_the_devices_failure(
    config_file, tmp_path, capsys, monkeypatch
):
    from torch_geometric.nn import GraphConv

    def crash(self, *args, **kwargs):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(GraphConv, "forward", crash)
    line = failed(run_main(capsys, "train", config_file()))
    assert line.startswith("error: the device failed in the model's first forward pass"), line
    assert "CUDA error: an illegal memory access" in line and "model.conv" not in line


def _closed_port() -> int:
    """A port on this host that nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_tracking_server_that_cannot_be_reached_is_an_outage_not_a_config_error(
    config_file, tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # fail at once, not in minutes
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    uri = f"http://127.0.0.1:{_closed_port()}"
    line = failed(run_main(capsys, "train", config_file(), f"tracking.mlflow={uri}"))
    assert line.startswith(f"error: tracking.mlflow: the tracking server at {uri} cannot be "), line
    # a URI it cannot use at all is still the config's mistake
    wrong = run_main(capsys, "train", config_file(), "tracking.mlflow=nosuchscheme://x")
    assert wrong.returncode == 2, wrong.stderr


def test_a_study_database_server_that_cannot_be_reached_is_an_outage(tmp_path):
    from QuantumGravPy.tune.storage import open_storage

    url = f"postgresql://qg@127.0.0.1:{_closed_port()}/studies"
    with pytest.raises(qg.OutageError, match=r"database server cannot be reached") as info:
        open_storage(url)
    assert unreachable(info.value.__cause__)


@pytest.mark.parametrize(
    "error, expected",
    [
        (ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"), True),
        (RuntimeError("HTTPConnectionPool: Max retries exceeded with url"), True),
        (ValueError("unsupported URI scheme 'foo'"), False),
        (KeyError("experiment"), False),
    ],
)
def test_what_counts_as_a_server_that_cannot_be_reached(error, expected):
    wrapped = RuntimeError("the client failed")
    wrapped.__cause__ = error
    assert unreachable(error) is expected and unreachable(wrapped) is expected


def test_what_counts_as_a_full_disk():
    assert disk_full(OSError(errno.ENOSPC, "No space left on device"))
    assert disk_full(OSError(errno.EDQUOT, "Disk quota exceeded"))
    assert not disk_full(OSError(errno.EACCES, "Permission denied"))
    wrapped = RuntimeError("PytorchStreamWriter failed writing file")
    wrapped.__context__ = OSError(errno.ENOSPC, "No space left on device")
    assert disk_full(wrapped)
