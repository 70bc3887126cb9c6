"""Graph-level inputs of the built-in model (``model.graph_features``)."""

import pytest
from conftest import train

import QuantumGravPy as qg

CHARGED = (
    "data.dataset=user_data.charged_rings",
    "training.num_epochs=12",
    "training.optimizer.kwargs={lr: 0.01}",
    "early_stopping.enabled=false",
)


def test_graph_features_reach_the_head_and_are_learned_from(make_config, tmp_path):
    blind_config = make_config(*CHARGED, f"training.path={tmp_path / 'blind'}")
    _, _, blind = train(blind_config)
    trainer, _, seeing = train(make_config(*CHARGED, "model.graph_features=[charge, spin]"))
    head_input = trainer.model.head[0].in_features
    assert head_input == 16 * 2 + 1 + 3  # two poolings of 16 channels, charge, spin
    # The rings are identical: without the charge the model can only guess.
    assert blind["test_accuracy"] < 0.75 and seeing["test_accuracy"] >= 0.95


@pytest.mark.parametrize(
    "features, message",
    [
        (
            "[mass]",
            "model.graph_features: 'mass' must be a floating-point tensor attribute of "
            "every graph (one number or one vector per graph); the first graph has nothing",
        ),
        (
            "[count]",
            "'count' must be a floating-point tensor attribute of every graph (one "
            "number or one vector per graph); the first graph has a torch.int64 tensor",
        ),
    ],
)
def test_a_missing_or_integer_graph_feature_is_named(make_config, features, message):
    with pytest.raises(qg.DataError, match=message.replace("(", r"\(").replace(")", r"\)")):
        qg.Trainer(make_config(*CHARGED, f"model.graph_features={features}"))


def test_graph_features_are_for_the_built_in_model(make_config):
    with pytest.raises(qg.ConfigError, match="model.graph_features: only for the built-in model"):
        make_config("model={type: user_models.MeanFeatures}", "model.graph_features=[charge]")
