"""training.compile with padded batches: the whole step replayed as one CUDA graph on a GPU,
the same code uncaptured on a CPU; what stops a capture is named in the log."""

from __future__ import annotations

import logging

import pytest
import torch
from conftest import train

from QuantumGravPy.training.loop import captured as captured_module
from QuantumGravPy.training.loop import compiling
from QuantumGravPy.training.loop import step as step_module
from QuantumGravPy.training.loop.captured import CapturedStep

NEEDS_CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
PADDED = ("training.batch_nodes=300", "training.pad_batches=true", "training.compile=true")
DROP = ("epoch_seconds", "samples_per_second")


def _rows(history):
    return [{k: v for k, v in row.items() if k not in DROP} for row in history]


@pytest.fixture
def not_compiled(monkeypatch):
    """The model as it is: what is tested here is the step around it (and inductor's compile
    would take a minute of this machine's two cores)."""
    monkeypatch.setattr(compiling.Compiling, "_of", lambda self, module, use, options: module)


@pytest.mark.timeout(240)
def test_on_a_cpu_the_captured_step_runs_uncaptured_and_trains_as_the_usual_step(
    make_config, tmp_path, monkeypatch, not_compiled
):
    config = make_config(*PADDED, "training.num_epochs=2", f"training.path={tmp_path / 'one'}")
    trainer, history, metrics = train(config)
    used = trainer.training_pass._captured
    assert isinstance(used, CapturedStep) and not used.capture and used.steps > 0
    monkeypatch.setattr(step_module, "refusal", lambda *a, **k: "the usual step, to compare")
    usual = make_config(*PADDED, "training.num_epochs=2", f"training.path={tmp_path / 'usual'}")
    other, expected, expected_metrics = train(usual)
    assert other.training_pass._captured is False
    # cross-entropy ignores the padding rows itself: the same kernels, the same bits
    assert _rows(history) == _rows(expected)
    assert metrics == expected_metrics


REGRESSION = "tasks=[{name: h, type: regression, level: graph, target: h}]"
# a binary task on a 0/1 target: the padding rows' target made valid for the loss, and never
# counted right
BINARY = "tasks=[{name: flat, type: binary, level: graph, target: manifold_like}]"


@pytest.mark.timeout(240)
@pytest.mark.parametrize("task", [REGRESSION, BINARY], ids=["regression", "binary"])
def test_a_loss_without_its_own_ignoring_is_masked_and_trains_as_the_usual_step(
    make_config, tmp_path, monkeypatch, not_compiled, task
):
    config = make_config(*PADDED, task, "training.num_epochs=2")
    trainer, history, _ = train(config)
    assert isinstance(trainer.training_pass._captured, CapturedStep)
    monkeypatch.setattr(step_module, "refusal", lambda *a, **k: "the usual step, to compare")
    usual = make_config(*PADDED, task, "training.num_epochs=2", f"training.path={tmp_path}")
    _, expected, _ = train(usual)
    # The masked loss sums every padded row, the padding's times zero, and divides by the real
    # rows; torch's mean sums the real rows alone. The two differ by float32 rounding (a few
    # 1e-8 of the loss measured here, with either kernels), carried on by the optimizer: 1e-5
    # leaves a margin of hundreds, and a wrong mask or count would miss it by far more.
    for ours, theirs in zip(_rows(history), _rows(expected), strict=True):
        assert ours["train_loss"] == pytest.approx(theirs["train_loss"], rel=1e-5)
        assert ours["val_loss"] == pytest.approx(theirs["val_loss"], rel=1e-5)
        if "train_accuracy" in theirs:  # the padding rows are never right
            assert ours["train_accuracy"] == theirs["train_accuracy"]


@pytest.mark.parametrize(
    "extra, why",
    [
        (["training.accumulate_grad_batches=2"], "several backward passes a step"),
        (["monitor.nonfinite=skip"], "monitor.nonfinite: skip"),
        (["training.ema_decay=0.9"], "training.ema_decay"),
    ],
    ids=["accumulated", "skip", "ema"],
)
def test_what_stops_a_capture_is_named_in_the_log(make_config, caplog, not_compiled, extra, why):
    config = make_config(*PADDED, "training.num_epochs=1", *extra)
    with caplog.at_level(logging.INFO, logger=step_module.__name__):
        trainer, history, _ = train(config)
    assert trainer.training_pass._captured is False and len(history) == 1
    lines = [r.getMessage() for r in caplog.records if "not captured" in r.getMessage()]
    assert len(lines) == 1 and why in lines[0], lines


@pytest.mark.gpu
@NEEDS_CUDA
@pytest.mark.timeout(600)
def test_on_a_gpu_the_step_is_one_replayed_graph_and_trains_as_the_same_step_uncaptured(
    make_config, tmp_path, monkeypatch
):
    """Replayed, the step runs the kernels it ran when captured: the run is the same step's,
    uncaptured, to the bit; a steady epoch synchronises with the host only in its end's read."""
    from test_gpu_step import steady_steps_without_synchronising

    common = ("training.device=cuda", *PADDED, "training.num_epochs=3")
    trainer, history, metrics = train(make_config(*common, f"training.path={tmp_path / 'g'}"))
    used = trainer.training_pass._captured
    assert isinstance(used, CapturedStep) and used.capture and used.graph is not None
    again = type(trainer)(make_config(*common, f"training.path={tmp_path / 'steady'}"))
    steady_steps_without_synchronising(again, again.prepare_dataloaders()[0])
    again.close()
    monkeypatch.setattr(captured_module, "CAPTURE", False)
    _, uncaptured, uncaptured_metrics = train(
        make_config(*common, f"training.path={tmp_path / 'u'}")
    )
    assert _rows(history) == _rows(uncaptured)
    assert metrics == uncaptured_metrics
