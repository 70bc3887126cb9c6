"""Early stopping: the logic (patience, delta, grace period, modes, state dicts, several metrics
combined) and training that stops on a combination in one and two processes."""

import math

import pytest
from conftest import run_ranks, train

import QuantumGravPy as qg
from QuantumGravPy.config import improves_towards
from QuantumGravPy.training.state.early_stopping import MetricStopping


def run(es, values):
    return [(es.step(v), es.should_stop) for v in values]


def test_stops_after_patience_epochs_without_improvement():
    es = qg.EarlyStopping(mode="min", patience=2)
    steps = run(es, [1.0, 0.8, 0.9, 0.85])
    assert steps == [(True, False), (True, False), (False, False), (False, True)]
    assert es.best == 0.8 and es.best_epoch == 2


def test_delta_ignores_tiny_improvements_and_max_mode_prefers_larger():
    es = qg.EarlyStopping(mode="min", patience=1, delta=0.1)
    assert run(es, [1.0, 0.95]) == [(True, False), (False, True)]
    es = qg.EarlyStopping(mode="max", patience=3)
    run(es, [0.5, 0.7, 0.6])
    assert es.best == 0.7 and es.best_epoch == 2


def test_grace_period_delays_stopping():
    es = qg.EarlyStopping(mode="min", patience=1, grace_period=3)
    stops = [stop for _, stop in run(es, [1.0, 2.0, 2.0, 2.0])]
    assert stops == [False, False, False, True]


def test_nan_never_counts_as_improvement():
    es = qg.EarlyStopping(mode="min", patience=5)
    es.step(1.0)
    assert not es.step(math.nan) and es.best == 1.0


def test_state_dict_round_trip_continues_identically():
    values = [1.0, 0.9, 0.95, 0.97, 0.5, 0.6, 0.7, 0.8]
    reference = qg.EarlyStopping(patience=3)
    expected = run(reference, values)
    first = qg.EarlyStopping(patience=3)
    head = run(first, values[:3])
    second = qg.EarlyStopping(patience=3)
    second.load_state_dict(first.state_dict())
    assert head + run(second, values[3:]) == expected
    assert second.state_dict() == reference.state_dict()


@pytest.mark.parametrize("kwargs", [{"mode": "lowest"}, {"patience": 0}])
def test_bad_arguments_are_refused(kwargs):
    with pytest.raises(ValueError):
        qg.EarlyStopping(**kwargs)


# --- several metrics -----------------------------------------------------------------------------

LOSS_FALLS_ACCURACY_STALLS = [
    {"val_loss": 1.0, "val_accuracy": 0.5},
    {"val_loss": 0.9, "val_accuracy": 0.5},
    {"val_loss": 0.8, "val_accuracy": 0.5},
    {"val_loss": 0.9, "val_accuracy": 0.6},
    {"val_loss": 1.0, "val_accuracy": 0.6},
    {"val_loss": 1.1, "val_accuracy": 0.6},
]


def stops(combine, rows, patience=2):
    es = MetricStopping(
        ["val_loss", "val_accuracy"], ["min", "max"], combine=combine, patience=patience
    )
    return [(es.step(row, epoch), es.should_stop) for epoch, row in enumerate(rows, 1)], es


def test_any_stops_when_one_metric_stalls_and_all_when_every_one_has():
    any_steps, _ = stops("any", LOSS_FALLS_ACCURACY_STALLS)
    # accuracy stalls after epoch 1 (epochs 2, 3): stop at epoch 3
    assert [stop for _, stop in any_steps] == [False, False, True, False, True, True]
    all_steps, es = stops("all", LOSS_FALLS_ACCURACY_STALLS)
    # the loss stalls after epoch 3 (epochs 4, 5), accuracy after epoch 4 (5, 6): stop at epoch 6
    assert [stop for _, stop in all_steps] == [False, False, False, False, False, True]
    # the first metric alone decides the best epoch
    assert [improved for improved, _ in all_steps] == [True, True, True, False, False, False]
    assert es.best_epoch == 3 and es.best == 0.8
    assert es.describe() == "all of val_loss, val_accuracy"


def test_a_combined_state_continues_identically_and_single_metric_states_load():
    _, reference = stops("all", LOSS_FALLS_ACCURACY_STALLS)
    _, head = stops("all", LOSS_FALLS_ACCURACY_STALLS[:3])
    resumed = MetricStopping(
        ["val_loss", "val_accuracy"], ["min", "max"], combine="all", patience=2
    )
    resumed.load_state_dict(head.state_dict())
    rest = [resumed.step(row, e) for e, row in enumerate(LOSS_FALLS_ACCURACY_STALLS[3:], 4)]
    assert rest == [False, False, False] and resumed.should_stop
    assert resumed.state_dict() == reference.state_dict()

    single = qg.EarlyStopping(patience=2)  # what checkpoints of one metric hold
    for row in LOSS_FALLS_ACCURACY_STALLS[:3]:
        single.step(row["val_loss"])
    continued = MetricStopping(["val_loss", "val_accuracy"], ["min", "max"], patience=2)
    continued.load_state_dict(single.state_dict())
    assert continued.best == 0.8 and continued.trackers["val_accuracy"].epochs_seen == 0


def replayed(history, columns, combine, patience):
    """(the epoch the rule stops at or None, the best epoch), recomputed from history.csv's
    rows alone: the first column's ties broken by the second (or val_loss), a broken tie an
    improvement."""
    tie = columns[1] if len(columns) > 1 else "val_loss"
    tie = None if tie == columns[0] else tie
    best, waited = dict.fromkeys(columns), dict.fromkeys(columns, 0)
    best_epoch, tie_at_best = None, None
    for row in history:
        for c in columns:
            value, low = row[c], improves_towards(c) == "min"
            if best[c] is None or (value < best[c] if low else value > best[c]):
                best[c], waited[c] = value, 0
                if c == columns[0]:
                    best_epoch, tie_at_best = row["epoch"], row.get(tie)
            elif (
                c == columns[0]
                and tie
                and value == best[c]
                and (
                    row[tie] < tie_at_best
                    if improves_towards(tie) == "min"
                    else row[tie] > tie_at_best
                )
            ):
                waited[c], best_epoch, tie_at_best = 0, row["epoch"], row[tie]
            else:
                waited[c] += 1
        stalled = [waited[c] >= patience for c in columns]
        if (any if combine == "any" else all)(stalled):
            return row["epoch"], best_epoch
    return None, best_epoch


def replayed_stop(history, columns, combine, patience):
    """The epoch the rule stops at (see :func:`replayed`; None: never)."""
    return replayed(history, columns, combine, patience)[0]


# Patience 1: the validation loss first fails to improve in epoch 11, the training loss keeps
# improving there, on every kernel path tried (AVX-512, AVX2 on one thread, torch's scalar
# kernels with MKL's compatible path); with patience 2 whether "any" stopped at all depended on
# the last bits of epoch 10.
COMBINED = (
    "early_stopping.metric=[val_loss, train_loss]",
    "early_stopping.patience=1",
    "training.num_epochs=14",
    "training.optimizer.kwargs={lr: 0.02}",
)


def check_stop(history, combine, stopped):
    expected = replayed_stop(history, ["val_loss", "train_loss"], combine, patience=1)
    assert stopped == (expected is not None)
    assert history[-1]["epoch"] == (expected or 14)


def test_training_stops_on_any_or_all_of_two_metrics(make_config, tmp_path):
    runs = {}
    for combine in ("any", "all"):
        config = make_config(
            *COMBINED, f"early_stopping.combine={combine}", f"training.path={tmp_path / combine}"
        )
        trainer, history, _ = train(config)
        check_stop(history, combine, trainer.stopped_early)
        best = min(history, key=lambda row: row["val_loss"])["epoch"]  # the first metric's
        assert trainer.early_stopping.best_epoch == best
        runs[combine] = history
    assert len(runs["any"]) < len(runs["all"])  # this run: the validation loss stalls first


def stop_with_two_ranks(rank, world_size, config):
    trainer = qg.TrainerDDP(rank, config)
    history = trainer.run_training(*trainer.prepare_dataloaders()[:2])
    trainer.close()
    return history, trainer.stopped_early


@pytest.mark.timeout(120)
def test_two_ranks_stop_together_on_a_combination(make_config):
    config = make_config(*COMBINED, "early_stopping.combine=any", "validation.mode=sharded")
    (history, stopped), (history1, stopped1) = run_ranks(2, stop_with_two_ranks, config)
    assert history == history1 and stopped == stopped1
    check_stop(history, "any", stopped)


# The run: F1 on 36 validation graphs reached 1.0 at epoch 4 and could not improve,
# while the validation loss went on falling (0.39 at epoch 4, 0.004 by epoch 12).
SATURATED = [
    {"val_accuracy": f1, "val_loss": loss}
    for f1, loss in [
        (0.8, 0.9),
        (0.9, 0.7),
        (0.95, 0.5),
        (1.0, 0.39),
        (1.0, 0.2),
        (0.97, 0.1),
        (1.0, 0.05),
        (1.0, 0.06),
        (1.0, 0.004),
    ]
]


def test_a_saturated_metric_keeps_the_epoch_its_tie_breaker_prefers(make_config, tmp_path):
    config = make_config("early_stopping.metric=val_accuracy", "early_stopping.mode=max")
    config = config.early_stopping
    es = MetricStopping.from_section(config)
    assert es.tie_breaker == "val_loss" and es.tie_mode == "min"  # by default
    best = [es.step(row, epoch) for epoch, row in enumerate(SATURATED, start=1)]
    # 1.0 at epoch 4; epochs 5, 7 and 9 tie it with a lower loss; 6 is worse, 8's loss higher
    assert best == [True, True, True, True, True, False, True, False, True]
    assert es.best_epoch == 9 and es.best == 1.0 and es.tie_value == 0.004
    assert es.broken_tie == (
        "val_accuracy 1 ties its best; val_loss 0.004 is better than at epoch 7 (0.05): "
        "epoch 9 is the best so far"
    )
    # an improvement by the tie-breaker is an improvement: patience counts from epoch 9
    assert es.first.epochs_without_improvement == 0
    # a resumed run breaks the next tie as the uninterrupted one does
    again = MetricStopping.from_section(config)
    again.load_state_dict(es.state_dict())
    tie = {"val_accuracy": 1.0, "val_loss": 0.003}
    assert again.step(tie, 10) and es.step(tie, 10) and again.best_epoch == es.best_epoch == 10
    # the tie-breaker listed second, explicitly; val_loss alone has nothing to break ties with
    listed = make_config(
        "early_stopping.metric=[val_accuracy, train_loss]", "early_stopping.mode=max"
    )
    assert MetricStopping.from_section(listed.early_stopping).tie_breaker == "train_loss"
    assert MetricStopping.from_section(make_config().early_stopping).tie_breaker is None


def test_training_says_when_a_tie_picks_the_best_epoch(make_config):
    """A run whose validation accuracy (on 18 graphs: steps of 1/18) repeats its best while
    the loss falls: each epoch the loss made the best is said in the log, and the run's best
    epoch is the one the rule picks."""
    config = make_config(
        "early_stopping.metric=val_accuracy", "early_stopping.mode=max", "training.num_epochs=10",
        "log_level=INFO",
    )  # fmt: skip
    trainer = qg.Trainer(config)
    rows = trainer.run_training(*trainer.prepare_dataloaders()[:2])
    trainer.close()
    replayed, said = MetricStopping.from_section(config.early_stopping), []
    for row in rows:
        replayed.step(row, row["epoch"])
        said += [replayed.broken_tie] if replayed.broken_tie else []
    assert said  # (here four epochs tie 14/18 with a lower loss; a few on any machine)
    log = (config.run_dir / "train.log").read_text().splitlines()
    assert [line.split("INFO ")[-1] for line in log if "ties its best" in line] == said
    assert trainer.early_stopping.best_epoch == replayed.best_epoch
