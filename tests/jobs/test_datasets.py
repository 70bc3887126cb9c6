"""A user's data function is found by the installed ``qg`` command beside its config or in the
folder it runs in (the dataset, its cache and the seeded split: tests/test_datasets.py)."""

import json
import os

import pytest
from conftest import TESTS


@pytest.mark.timeout(240)
def test_a_data_function_beside_the_config_or_in_the_working_folder_is_found(tmp_path):
    """``qg train`` (the installed command, whose Python path holds neither folder) finds a
    module beside its config and one in the folder it runs in; a module in neither is one
    line naming the folders looked in and what to put on PYTHONPATH."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    qg_command = Path(sys.executable).with_name("qg")
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(TESTS / "user_data.py", project / "mydata.py")
    raw = {
        "name": "mine",
        "log_level": "WARNING",
        "data": {"dataset": "mydata.ring_graphs", "root": "data"},
        "model": {"hidden_channels": 8, "num_layers": 1, "head_channels": [8]},
        "training": {"path": "run", "device": "cpu", "num_epochs": 1, "plots": False},
    }
    (project / "config.yaml").write_text(json.dumps(raw))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}

    def qg(*args, cwd):
        return subprocess.run(
            [str(qg_command), *map(str, args)], cwd=cwd, env=env, capture_output=True, text=True
        )

    here = qg("train", "config.yaml", cwd=project)  # in the folder, beside the config
    assert here.returncode == 0, here.stderr
    above = qg("train", "project/config.yaml", "training.path=run2", cwd=tmp_path)
    assert above.returncode == 0, above.stderr  # beside the config only
    missing = qg("train", "project/config.yaml", "data.dataset=theirdata.graphs", cwd=tmp_path)
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    line = missing.stderr.strip().splitlines()[-1]
    assert "no module named 'theirdata'" in line and str(project) in line, line
    assert "put the folder holding theirdata.py on PYTHONPATH" in line
