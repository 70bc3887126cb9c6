"""``qg predict --seed`` and ``qg.predict(..., seed=)``: a model that draws random numbers in
evaluation (a VAE sampling its latent) gives the same rows for the same seed, on 1 and 2
processes; without a seed the log says that the model drew them, and names --seed."""

import numpy as np
import pytest
from conftest import assert_refused, run_main, small_raw_config

import QuantumGravPy as qg
from QuantumGravPy.config import apply_overrides, config_from_dict
from QuantumGravPy.predict import read

pytestmark = pytest.mark.timeout(240)


def _train(tmp_path, model):
    raw = apply_overrides(
        small_raw_config(tmp_path, tmp_path / "data"),
        [
            "data.dataset=user_data.ring_graphs",
            f"model={{type: {model}}}",
            "training.num_epochs=1",
            "testing.batch_size=8",  # 40 graphs: 5 batches, shared 3 and 2 by two processes
        ],
    )
    config = config_from_dict(raw)
    qg.training.fit(config)
    return config.run_dir


@pytest.fixture(scope="module")
def noisy_run(tmp_path_factory):
    return _train(tmp_path_factory.mktemp("noisy"), "user_noise.SamplesInEval")


def _rows(path):
    graphs = read(path).graphs
    return np.stack([graphs[f"y_prob_{k}"] for k in range(2)], axis=1)


def test_the_same_seed_gives_the_same_rows_on_one_and_two_processes(noisy_run, capsys, tmp_path):
    rows = {}
    for name, extra in [("a", []), ("b", []), ("w2", ["--world-size", 2]), ("other", [])]:
        seed = 4 if name == "other" else 3
        result = run_main(
            capsys, "predict", noisy_run, "--seed", seed, "--output", tmp_path / f"{name}.npz",
            *extra,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert "drew random numbers" not in result.stderr  # a seed was given
        rows[name] = _rows(tmp_path / f"{name}.npz")
    assert np.array_equal(rows["a"], rows["b"])
    assert np.array_equal(rows["a"], rows["w2"])  # batches split 3 + 2 over the processes
    assert not np.array_equal(rows["a"], rows["other"])  # the seed is used
    from_python = qg.predict(noisy_run, seed=3)
    assert np.array_equal(
        np.stack([from_python.graphs[f"y_prob_{k}"] for k in range(2)], axis=1), rows["a"]
    )


def test_without_a_seed_the_log_says_the_model_drew_random_numbers(noisy_run, capsys, tmp_path):
    outputs = []
    for name in ("a", "b"):
        result = run_main(capsys, "predict", noisy_run, "--output", tmp_path / f"{name}.npz")
        assert result.returncode == 0, result.stderr
        (line,) = [x for x in result.stderr.splitlines() if "drew random numbers" in x]
        assert "--seed N" in line
        outputs.append(_rows(tmp_path / f"{name}.npz"))
    assert not np.array_equal(*outputs)  # why the line is there
    assert_refused(
        run_main(capsys, "predict", noisy_run, "--seed", -1),
        "--seed: expected a whole number >= 0, found -1",
    )


def test_a_model_that_draws_nothing_is_not_said_to(tmp_path, capsys):
    run_dir = _train(tmp_path, "user_models.MeanFeatures")
    result = run_main(capsys, "predict", run_dir, "--output", tmp_path / "p.npz")
    assert result.returncode == 0, result.stderr
    assert "drew random numbers" not in result.stderr
