"""Run the tutorial notebook and keep it, with its outputs, for the site; keep its pictures.

    python docs/scripts/notebook.py          (make docs-notebook)

Executes `examples/train_ddp_tutorial.ipynb` top to bottom in a fresh kernel (the runs go to a
temporary folder), writes the executed notebook to `docs/tutorial.ipynb`, which the site renders
without running it again, and copies the pictures its two-process run drew into `docs/images/`,
where the pages that explain them show them. `tests/test_docs.py` checks that the stored
notebook has the example's cells, unchanged, and its plots. Takes a few minutes.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "examples" / "train_ddp_tutorial.ipynb"
STORED = ROOT / "docs" / "tutorial.ipynb"
IMAGES = ROOT / "docs" / "images"
PICTURES = {  # drawn by the tutorial's run on two processes: the name they get in docs/images
    "two-processes/curves.png": "curves.png",
    "two-processes/confusion_matrix.png": "confusion_matrix.png",
    "two-processes/ranks.png": "ranks.png",
}


def main() -> int:
    with tempfile.TemporaryDirectory() as runs:
        os.environ["QG_TUTORIAL_DIR"] = runs
        os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
        notebook = nbformat.read(NOTEBOOK, as_version=4)
        NotebookClient(
            notebook,
            timeout=600,
            kernel_name="python3",
            resources={"metadata": {"path": str(NOTEBOOK.parent)}},
        ).execute()
        errors = [
            out
            for cell in notebook.cells
            if cell.cell_type == "code"
            for out in cell.outputs
            if out.output_type == "error"
        ]
        if errors:
            print(f"error: the notebook failed: {errors[0].get('evalue')}", file=sys.stderr)
            return 1
        # the temporary folder's name would change the stored outputs at every run
        for cell in notebook.cells:
            for out in cell.get("outputs", []):
                if "text" in out:
                    out["text"] = out["text"].replace(runs, "runs")
        nbformat.write(notebook, STORED)
        IMAGES.mkdir(exist_ok=True)
        for source, name in PICTURES.items():
            shutil.copyfile(Path(runs) / source, IMAGES / name)
    print(f"wrote {STORED.relative_to(ROOT)} and {len(PICTURES)} pictures in docs/images/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
