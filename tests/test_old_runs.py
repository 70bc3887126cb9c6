"""Run directories an earlier version wrote (tests/fixtures/run_before_layout): ``qg predict``
reads them, and gives what the trainer's own test pass gives from the same checkpoint.
(tests/test_resume.py resumes the same run to the bit of an uninterrupted one.)"""

import shutil

import numpy as np
import yaml
from conftest import TESTS, run_main

import QuantumGravPy as qg
from QuantumGravPy.config import apply_overrides, config_from_dict
from QuantumGravPy.predict import read

BEFORE_LAYOUT = TESTS / "fixtures" / "run_before_layout"
# The trainer's test pass and qg predict evaluate the same graphs in the same batches, but on
# different threads; a float32 model's outputs may round differently in the last place, seen at
# most 6e-8 here. 1e-5 is far below what another weight or graph changes (1e-2 and more).
CLOSE = {"rtol": 1e-5, "atol": 1e-5}


def test_qg_predict_reads_a_run_an_earlier_version_wrote(tmp_path, capsys, data_root):
    run = tmp_path / "old"
    shutil.copytree(BEFORE_LAYOUT, run)
    last = run / "checkpoints" / "last.pt"
    moved = [f"data.root={data_root}", f"training.path={run}", "log_level=WARNING"]
    # the trainer as it is now, resuming the old run (its two epochs done), tests last.pt
    raw = apply_overrides(yaml.safe_load((run / "config.yaml").read_text()), moved)
    trainer = qg.Trainer(config_from_dict(raw), resume=True)
    train_loader, val_loader, test_loader = trainer.prepare_dataloaders()
    assert trainer.run_training(train_loader, val_loader)[-1]["epoch"] == 2
    metrics = trainer.run_test(test_loader, checkpoint=last)
    trainer.close()

    result = run_main(capsys, "predict", run, "--checkpoint", last, "--split", "test", *moved)
    assert result.returncode == 0, result.stderr
    written = read(run / "predictions.npz")
    tested = np.load(run / "test_predictions.npz")
    probs = np.stack([written.graphs[f"y_prob_{k}"] for k in range(3)], axis=1)
    assert probs.shape == tested["y.predicted"].shape == (len(test_loader.dataset), 3)
    assert np.allclose(probs, tested["y.predicted"], **CLOSE)
    assert np.array_equal(written.graphs["y_true"], tested["y.true"])
    assert np.array_equal(written.graphs["index"], tested["y.index"])
    assert f"test_loss {metrics['test_loss']:.4f}" in result.stdout
