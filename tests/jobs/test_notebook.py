"""The tutorial notebook runs top to bottom in a fresh Jupyter kernel and draws its plots."""

import os

import nbformat
import pytest
from conftest import ROOT
from nbclient import NotebookClient

NOTEBOOK = ROOT / "examples" / "train_ddp_tutorial.ipynb"


@pytest.mark.timeout(600)
def test_the_tutorial_runs_in_a_fresh_kernel(tmp_path, monkeypatch):
    monkeypatch.setenv("QG_TUTORIAL_DIR", str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(
        notebook,
        timeout=300,  # per cell
        startup_timeout=120,  # a busy machine starts kernels slowly
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOK.parent)}},
    ).execute()
    outputs = [out for cell in notebook.cells if cell.cell_type == "code" for out in cell.outputs]
    assert not [out for out in outputs if out.output_type == "error"]
    text = "".join(out.get("text", "") for out in outputs if out.output_type == "stream")
    assert "rank 3:" in text and "exact accuracy from summed counts: 0.7000" in text
    assert "2 processes, test accuracy" in text
    assert "best: trial" in text and "number,state," in text  # the tiny study and trials.csv
    images = [out for out in outputs if "image/png" in out.get("data", {})]
    assert "exchange waited for" in text  # each rank's time, from ranks.csv
    assert len(images) >= 4  # the curves, the confusion matrix, ranks.png, the study's history
    assert (tmp_path / "two-processes" / "curves.png").is_file()
