"""Progress in a log: a job whose output is a file (a SLURM log) sees its long phases advance,
a line every 30 s with what is done, the rate and the time left; a terminal keeps its bars."""

import re

import pytest
import yaml
from conftest import run_main

from QuantumGravPy import logs
from QuantumGravPy.config import config_from_dict
from QuantumGravPy.data.sources.writing import write_embedded

pytestmark = pytest.mark.timeout(180)


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_line_every_30_seconds_with_what_is_done_the_rate_and_the_time_left(caplog):
    clock = Clock()
    bar = logs.LogProgress(total=1000, desc="preparing causal sets", unit="causal set", clock=clock)
    with caplog.at_level("INFO", logger=logs.LOGGER_NAME):
        for k in range(1, 1001):  # 0.1 s a causal set: 100 s in all
            clock.now = k / 10
            bar.update()
        bar.close()
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "preparing causal sets: 300/1,000 causal sets (30%), 10 causal sets/s, 1m10s left",
        "preparing causal sets: 600/1,000 causal sets (60%), 10 causal sets/s, 40s left",
        "preparing causal sets: 900/1,000 causal sets (90%), 10 causal sets/s, 10s left",
        "preparing causal sets: 1,000 causal sets in 1m40s",
    ]


def test_a_phase_shorter_than_the_interval_adds_no_line(caplog):
    clock = Clock()
    with caplog.at_level("INFO", logger=logs.LOGGER_NAME):
        with logs.LogProgress(
            range(20), total=None, desc="epoch 1", unit="batch", clock=clock
        ) as b:
            for _ in b:
                clock.now += 1.0  # 20 s
    assert caplog.records == []


def test_fast_phases_give_whole_rates(caplog):
    clock = Clock()
    bar = logs.LogProgress(
        total=50_000, desc="preparing causal sets", unit="causal set", clock=clock
    )
    with caplog.at_level("INFO", logger=logs.LOGGER_NAME):
        clock.now = 30.0
        bar.update(37_500)
    assert caplog.records[0].getMessage() == (
        "preparing causal sets: 37,500/50,000 causal sets (75%), 1,250 causal sets/s, 10s left"
    )


def test_slow_steps_say_how_long_each_takes(caplog):
    clock = Clock()
    bar = logs.LogProgress(total=10, desc="epoch 3", unit="batch", clock=clock)
    with caplog.at_level("INFO", logger=logs.LOGGER_NAME):
        clock.now = 45.0
        bar.update()
    assert caplog.records[0].getMessage() == (
        "epoch 3: 1/10 batches (10%), 45s per batch, 6m45s left"
    )


def test_a_non_interactive_training_log_shows_each_long_phase_advance(
    tmp_path, capsys, monkeypatch
):
    """The command line as a SLURM job runs it (its output is not a terminal): preparing the
    user's file, training and validating epochs and testing each report as they go."""
    monkeypatch.setattr(logs, "PROGRESS_EVERY_S", 0.0)  # a line at every step, not every 30 s
    source = config_from_dict(
        {"data": {"root": str(tmp_path / "gen"), "num_graphs": 60, "num_points": [16, 24]}}
    )
    store = write_embedded(source.data, tmp_path / "sets.zarr")
    config = tmp_path / "config.yaml"
    raw = {
        "name": "progress",
        "log_level": "INFO",
        "data": {"root": str(tmp_path / "cache"), "files": [str(store)], "targets": {"y": "y"}},
        "model": {"hidden_channels": 8, "num_layers": 1, "head_channels": [8]},
        "training": {"path": str(tmp_path / "run"), "num_epochs": 1, "batch_size": 8},
        "early_stopping": {"enabled": False},
    }
    raw["training"]["plots"] = False
    config.write_text(yaml.safe_dump(raw))
    result = run_main(capsys, "train", config)
    assert result.returncode == 0, result.stderr
    err = result.stderr
    assert "\r" not in err  # no bar drawn into a file
    rate = r"[\d.,]+ \w+(?: \w+)?/s"
    for pattern in (
        rf"preparing causal sets: 60/60 causal sets \(100%\), {rate}, 0s left",
        rf"epoch 1: 6/6 batches \(100%\), {rate}, 0s left",
        rf"validating: 1/1 batches \(100%\), {rate}, 0s left",
        rf"testing: 1/1 batches \(100%\), {rate}, 0s left",
        r"preparing causal sets: 60 causal sets in \d+s",
    ):
        assert re.search(pattern, err), (pattern, err)
    assert re.search(rf"epoch 1: 1/6 batches \(17%\), {rate}, \d+s left", err), err
    assert "epoch 1: 6/6 batches" in (tmp_path / "run" / "train.log").read_text()
    # predicting on new files: their preparation and the predictions report as they go too
    other = config_from_dict(
        {"data": {"root": str(tmp_path / "gen2"), "num_graphs": 30, "num_points": [16, 24],
                  "seed": 5}}
    )  # fmt: skip
    new = write_embedded(other.data, tmp_path / "new.zarr")
    predicted = run_main(
        capsys, "predict", tmp_path / "run", "--files", new, "--output", tmp_path / "p.csv"
    )
    assert predicted.returncode == 0, predicted.stderr
    for pattern in (
        rf"preparing causal sets: 1/30 causal sets \(3%\), {rate}, \d+s left",
        rf"preparing causal sets: 30/30 causal sets \(100%\), {rate}, 0s left",
        rf"predicting: \d+/\d+ batches \(100%\), {rate}, 0s left",
    ):
        assert re.search(pattern, predicted.stderr), (pattern, predicted.stderr)
