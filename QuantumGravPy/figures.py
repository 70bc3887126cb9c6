"""Figures without pyplot: nothing here needs a display or touches global plotting state.

The ground floor of the pictures: the run's plots (``runs/plots.py``), a task kind's picture of
its test set (``tasks/``) and a study's (``tune/plots.py``) are drawn on these figures.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def new_figure(width: float, height: float) -> Any:
    """An empty figure of that size in inches, laid out to fit."""
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def save(fig: Any, output: str | Path, **kwargs: Any) -> Path:
    """``fig`` written to ``output`` (at 100 dpi unless ``kwargs`` say otherwise), its folder
    made if needed."""
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output, **{"dpi": 100, **kwargs})
    return output
