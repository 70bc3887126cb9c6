"""How samples of a generative model compare with the causal sets it was trained on: the
statistics ``qg sample`` reports, as a table (printed and ``<stem>_report.csv``) and a picture
(``<stem>_report.png``).

Per causal set: whether it is a valid order (acyclic and transitive), its ordering fraction
(related pairs over all pairs), the Myrheim-Meyer dimension that fraction gives, its links per
element, and its interval abundances (pairs with k elements between them) per element. The
data's are those of the run's training split, its causal sets read from their graphs' links
(in the natural labelling every causal set of the library has).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..config import DataConfig
from ..figures import new_figure, save
from ..physics import (
    CausalSet,
    interval_abundances,
    myrheim_meyer_dimension,
    order_violation,
    ordering_fraction,
    transitive_closure,
)

MAX_INTERVAL = 4  # interval abundances reported: k = 0 (links) .. MAX_INTERVAL
LABELS = {
    "valid": "valid orders",
    "elements": "elements",
    "ordering_fraction": "ordering fraction",
    "myrheim_meyer_dimension": "Myrheim-Meyer dimension",
    "links_per_element": "links per element",
    **{f"intervals_{k}_per_element": f"intervals of {k} per element" for k in range(1, 5)},
}


@dataclass
class Report:
    """The statistics of the ``samples`` and of the training ``data``, one array per
    statistic (one value per causal set; ``valid`` is 0 or 1), and the samples' file."""

    samples: dict[str, np.ndarray]
    data: dict[str, np.ndarray]
    output: Path

    def rows(self) -> list[dict[str, Any]]:
        """A row per statistic: the means and standard deviations of both, and the samples'
        mean relative to the data's (``difference``, a fraction)."""
        rows = []
        for name in LABELS:
            mine, theirs = self.samples[name], self.data[name]
            row = {"statistic": name, **_spread("samples", mine), **_spread("data", theirs)}
            data_mean = row["data_mean"]
            # relative to the data's mean: none where that is 0
            row["difference"] = (
                (row["samples_mean"] - data_mean) / data_mean if data_mean else math.nan
            )
            rows.append(row)
        return rows

    def table(self) -> str:
        """The rows as the command prints them."""
        lines = [f"{'':26}{'samples':>20}{'training data':>20}{'difference':>12}"]
        for row in self.rows():
            name = row["statistic"]
            if name == "valid":
                mine, theirs = (f"{100 * row[f'{w}_mean']:.1f} %" for w in ("samples", "data"))
            else:
                mine, theirs = (
                    f"{row[f'{w}_mean']:.4g} ± {row[f'{w}_std']:.2g}" for w in ("samples", "data")
                )
            difference = row["difference"]
            shown = "n/a" if math.isnan(difference) else f"{100 * difference:+.1f}%"
            lines.append(f"{LABELS[name]:26}{mine:>20}{theirs:>20}{shown:>12}")
        return "\n".join(lines)


def _spread(prefix: str, values: np.ndarray) -> dict[str, float]:
    finite = values[np.isfinite(values)]
    mean = float(finite.mean()) if len(finite) else math.nan
    std = float(finite.std()) if len(finite) else math.nan
    return {f"{prefix}_mean": mean, f"{prefix}_std": std}


def statistics(relations: Sequence[torch.Tensor]) -> dict[str, np.ndarray]:
    """Each statistic of the causal sets ``relations`` (``[n, n]`` bool each)."""
    out: dict[str, list[float]] = {name: [] for name in LABELS}
    for r in relations:
        r = r.bool()
        n = r.shape[-1]
        out["valid"].append(float(order_violation(r) is None))
        out["elements"].append(float(n))
        fraction = float(ordering_fraction(r))
        out["ordering_fraction"].append(fraction)
        dimension = myrheim_meyer_dimension(fraction) if 0 < fraction < 1 else math.nan
        out["myrheim_meyer_dimension"].append(dimension)
        counts = interval_abundances(r, MAX_INTERVAL).double() / max(n, 1)
        out["links_per_element"].append(float(counts[0]))
        for k in range(1, MAX_INTERVAL + 1):
            out[f"intervals_{k}_per_element"].append(float(counts[k]))
    return {name: np.asarray(values, dtype=np.float64) for name, values in out.items()}


def relations_of(graph: Any) -> torch.Tensor:
    """The causal set of a graph of the library's (its links as edges in both directions, in
    a natural labelling): its relations."""
    n = int(graph.num_nodes)
    links = torch.zeros(n, n, dtype=torch.bool)
    first, second = graph.edge_index
    forwards = first < second
    links[first[forwards], second[forwards]] = True
    return transitive_closure(links)


def report_paths(output: Path) -> list[Path]:
    """The report's table and picture beside the samples' file."""
    stem = output.with_suffix("").name
    return [output.with_name(f"{stem}_report.csv"), output.with_name(f"{stem}_report.png")]


def compare(samples: Sequence[CausalSet], data: DataConfig, output: Path, *, limit: int) -> Report:
    """The report of ``samples`` against up to ``limit`` causal sets of the training split of
    the data the ``data:`` section ``data`` describes (nothing written yet:
    :func:`write_report`)."""
    from ..data import dataset_from_config
    from .inputs import select_split

    train = select_split(dataset_from_config(data, progress=False), data, "train")
    data = statistics([relations_of(train[i]) for i in range(min(limit, len(train)))])
    return Report(statistics([s.relations for s in samples]), data, output)


def write_report(report: Report, folder: Path) -> list[tuple[Path, Path]]:
    """The report's table and picture, written into ``folder`` under their final names (``qg
    sample`` writes them in a hidden folder and moves them in with the samples); returns
    (written, final path) for each."""
    table_path, picture_path = report_paths(report.output)
    rows = report.rows()
    table = folder / table_path.name
    with open(table, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    picture = draw(report, folder / picture_path.name)
    return [(table, table_path), (picture, picture_path)]


def draw(report: Report, path: Path) -> Path:
    """Histograms of the samples' and the data's ordering fractions, dimensions and links per
    element, and their mean interval abundances."""
    fig = new_figure(10, 7.5)
    axes = fig.subplots(2, 2).ravel()
    for ax, name in zip(
        axes, ("ordering_fraction", "myrheim_meyer_dimension", "links_per_element"), strict=False
    ):
        mine, theirs = report.samples[name], np.asarray(report.data[name])
        both = np.concatenate([mine, theirs])
        both = both[np.isfinite(both)]
        bins = np.linspace(both.min(), both.max(), 31) if len(both) and np.ptp(both) else 10
        ax.hist(theirs[np.isfinite(theirs)], bins=bins, alpha=0.5, density=True, label="data")
        ax.hist(mine[np.isfinite(mine)], bins=bins, alpha=0.5, density=True, label="samples")
        ax.set(xlabel=LABELS[name], ylabel="density")
        ax.legend(fontsize="small")
    ax = axes[3]
    k = np.arange(MAX_INTERVAL + 1)
    names = ["links_per_element", *(f"intervals_{i}_per_element" for i in k[1:])]
    width = 0.4
    for shift, (label, stats) in zip(
        (-width / 2, width / 2), (("data", report.data), ("samples", report.samples)), strict=True
    ):
        means = [float(np.mean(stats[n])) for n in names]
        ax.bar(k + shift, means, width=width, label=label, alpha=0.8)
    ax.set(xlabel="elements between the pair, k", ylabel="intervals per element", xticks=k)
    ax.legend(fontsize="small")
    valid = 100 * float(np.mean(report.samples["valid"]))
    fig.suptitle(
        f"{len(report.samples['valid'])} samples against the training data: "
        f"{valid:.1f} % valid orders"
    )
    return save(fig, path)
