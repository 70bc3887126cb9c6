"""EarlyStopping as pure logic: patience, delta, grace period, modes and its state dict."""

import math

import pytest

import QuantumGravPy as qg


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
