"""tasks[i].type model_loss: a model that returns its own loss terms, one value per graph each
(a generative model's likelihood and KL terms), trains on their weighted sum with every term a
metric, on one process and two, resumed, predicted, and every way it can be wrong is one line."""

import csv
import math

import pytest
import torch
from conftest import assert_refused, run_main, run_ranks, train, train_on_rank

import QuantumGravPy as qg
from QuantumGravPy.config import dump_config
from QuantumGravPy.parallel.strategies import STRATEGIES

VAE = (
    "model={type: user_models.TinyVAE}",
    "tasks=[{name: vae, type: model_loss, terms: {nll: 1.0, kl: 0.1}}]",
    "early_stopping.metric=val_nll_loss",
)


def write(cfg, path):
    path.write_text(dump_config(cfg))  # the terms in their order
    return path


def test_a_graph_vae_trains_on_its_own_loss_terms_from_the_command_line(
    make_config, tmp_path, capsys
):
    """No target: the loss is nll + 0.1 kl, each term a column of history.csv that early
    stopping follows; qg predict writes the terms per graph, whose means are its metrics."""
    cfg = make_config(*VAE, "training.num_epochs=4", "log_level=INFO")
    path = write(cfg, tmp_path / "vae.yaml")
    result = run_main(capsys, "train", path)
    assert result.returncode == 0, result.stderr
    history = qg.runs.layout.read_history(cfg.run_dir)
    for row in history:
        # the loss is the weighted sum of the terms' means over the graphs
        assert row["val_loss"] == pytest.approx(row["val_nll_loss"] + 0.1 * row["val_kl_loss"])
        assert math.isfinite(row["val_kl_loss"]) and row["val_kl_loss"] >= 0
    assert history[-1]["train_loss"] < history[0]["train_loss"]
    assert "val_nll_loss" in (cfg.run_dir / "train.log").read_text()

    predicted = run_main(capsys, "predict", cfg.run_dir, "--output", tmp_path / "terms.csv")
    assert predicted.returncode == 0, predicted.stderr
    with open(tmp_path / "terms.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == cfg.data.num_graphs and {"vae_nll", "vae_kl"} <= set(rows[0])
    assert all(float(r["vae_nll"]) > 0 for r in rows)


@pytest.mark.timeout(300)
def test_its_validation_terms_are_the_same_on_one_and_two_processes(make_config):
    """Each term's mean over the validation graphs: sums over graphs, exact for any number of
    processes; two processes validating halves each give the one-process numbers."""
    cfg = make_config(*VAE, "training.num_epochs=2", "validation.mode=sharded")
    (history, weights), (other, _) = run_ranks(2, train_on_rank, cfg)
    assert history == other  # every rank has the whole set's numbers
    alone = qg.Trainer(cfg)
    alone.model.load_state_dict(weights)
    expected = alone.validator.evaluate(alone.model, alone.prepare_dataloaders()[1])
    # float32 terms of graphs batched with others of other sizes (other padding in the dense
    # link matrices): the same to rounding, far inside 1e-6 of values near 0.7
    assert expected == pytest.approx({k: history[-1][k] for k in expected}, rel=1e-6)
    assert set(expected) == {"val_loss", "val_nll_loss", "val_kl_loss", "val_vae_nll_loss",
                             "val_vae_kl_loss"}  # fmt: skip


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ["model={type: user_models.LossWithoutKL}"],
            "model.type: user_models.LossWithoutKL returned no loss term 'kl' for task 'vae' "
            "(it returned 'nll')",
        ),
        (
            ["model={type: user_models.LossOfOneNumber}"],
            "model.type: user_models.LossOfOneNumber returned shape [] for loss term 'nll' of "
            "task 'vae', expected [2] (one value per graph)",
        ),
        (
            ["model={}"],
            "tasks[0].type: a model_loss task needs your own model.type, whose forward(batch) "
            "returns its loss terms",
        ),
        (
            ["tasks=[{name: vae, type: model_loss}]"],
            "tasks[0].terms: a model_loss task needs the names of the loss terms",
        ),
        (
            ["tasks=[{name: vae, type: model_loss, terms: {nll: 1.0}, target: y}]"],
            "tasks[0].target: not for a model_loss task",
        ),
        (
            ["tasks=[{name: vae, type: model_loss, terms: {nll: -1.0}}]"],
            "tasks[0].terms.nll: expected a weight of 0 or more, found -1.0",
        ),
        (
            ["tasks=[{name: vae, type: model_loss, terms: {nll: 1.0}, metrics: [kl_loss]}]"],
            "tasks[0].metrics: 'kl_loss' is not a metric, not of a model_loss task like 'vae' "
            "(choose from nll_loss)",
        ),
        (
            ["tasks=[{name: dim, type: regression, target: dimension, terms: {nll: 1.0}}]"],
            "tasks[0].terms: only for a task whose model returns its own loss terms",
        ),
    ],
)
def test_what_a_model_loss_task_cannot_use_is_one_line(
    make_config, tmp_path, capsys, overrides, message
):
    path = write(make_config(*VAE, "training.num_epochs=1"), tmp_path / "c.yaml")
    assert_refused(run_main(capsys, "train", path, *overrides), message)


def test_a_killed_and_resumed_vae_ends_as_the_uninterrupted_one(make_config, tmp_path):
    """Resuming restores the random state of the latents' draws: the same history, to the bit."""
    whole = make_config(*VAE, "training.num_epochs=3", f"training.path={tmp_path / 'whole'}")
    cut = make_config(*VAE, "training.num_epochs=2", f"training.path={tmp_path / 'cut'}")
    train(whole)
    train(cut)
    again = make_config(*VAE, "training.num_epochs=3", f"training.path={tmp_path / 'cut'}")
    train(again, resume=True)
    a = torch.load(tmp_path / "cut" / "checkpoints" / "last.pt", weights_only=True)["history"]
    b = torch.load(tmp_path / "whole" / "checkpoints" / "last.pt", weights_only=True)["history"]
    drop = ("epoch_seconds",)
    assert [{k: v for k, v in r.items() if k not in drop} for r in a] == [
        {k: v for k, v in r.items() if k not in drop} for r in b
    ]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("strategy", STRATEGIES.names())
def test_every_strategy_trains_a_model_loss_task(make_config, tmp_path, capsys, strategy):
    """Two processes of every registered strategy: finite terms that the loss adds up."""
    extra = ["training.global_batch_size=24"] if STRATEGIES.get(strategy).cuts_batches else []
    cfg = make_config(*VAE, "training.num_epochs=2", *extra)
    path = write(cfg, tmp_path / "vae.yaml")
    result = run_main(
        capsys, "train", path, "parallel.world_size=2", f"parallel.strategy={strategy}"
    )
    assert result.returncode == 0, result.stderr
    last = qg.runs.layout.read_history(cfg.run_dir)[-1]
    assert last["val_loss"] == pytest.approx(last["val_nll_loss"] + 0.1 * last["val_kl_loss"])
