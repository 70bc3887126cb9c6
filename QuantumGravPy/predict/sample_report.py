"""How samples of a generative model compare with the causal sets it was trained on, size by
size: the report ``qg sample`` prints and writes as ``<stem>_report.csv`` and a picture,
``<stem>_report.png``.

The samples are grouped in size bins (:func:`~.sample_statistics.size_bins`). In each, every
statistic of :mod:`.sample_statistics` is set against the training data of the same sizes,
or, for a bin the training data do not reach, against sprinklings at the samples' own sizes
(where the data are flat sprinklings of one dimension). It is also set against the exact
expectation, where one is known, and against the reference by a two-sample Kolmogorov-Smirnov
test. A bin outside the training sizes is marked as extrapolation.
"""

from __future__ import annotations

import csv
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .. import logs
from ..config import DataConfig
from ..figures import new_figure, save
from ..physics import CausalSet, transitive_closure
from .sample_statistics import (
    LABELS,
    MAX_INTERVAL,
    MIN_REFERENCE,
    SizeBin,
    exact_values,
    size_bins,
    sprinklings,
    statistics,
)

__all__ = ["LABELS", "Report", "compare", "relations_of", "statistics", "write_report"]


@dataclass
class Report:
    """The statistics of the ``samples`` and of the training ``data`` (one array per
    statistic, one value per causal set, with ``elements``), the samples' file, and what they
    are compared with: the flat diamonds' ``dimension`` (None: no exact values and no
    sprinklings), the training data's smallest and largest sizes (``trained``), and each
    bin's reference (its label and statistics), made by :func:`build`."""

    samples: dict[str, np.ndarray]
    data: dict[str, np.ndarray]
    output: Path
    dimension: float | None = None
    trained: tuple[int, int] | None = None
    bins: list[SizeBin] = field(default_factory=list)
    references: list[tuple[str, dict[str, np.ndarray]]] = field(default_factory=list)

    def rows(self) -> list[dict[str, Any]]:
        """A row per bin and statistic: both means and spreads, the samples' mean relative to
        the reference's (``difference``) and to the exact value (``exact_difference``), and
        the Kolmogorov-Smirnov statistic and p-value of the two sets of values."""
        rows = []
        for size_bin, (label, reference) in zip(self.bins, self.references, strict=True):
            mine = _within(self.samples, size_bin)
            exact = exact_values(mine["elements"], self.dimension)
            for name in LABELS:
                rows.append(
                    {
                        "sizes": size_bin.name,
                        "extrapolation": size_bin.beyond,
                        "statistic": name,
                        "samples": len(mine[name]),
                        **_spread("samples", mine[name]),
                        "reference": label,
                        "reference_sets": len(reference.get(name, ())),
                        **_spread("reference", reference.get(name, np.empty(0))),
                        "exact": float(np.mean(exact[name])) if len(exact[name]) else math.nan,
                    }
                )
                row = rows[-1]
                row["difference"] = _relative(row["samples_mean"], row["reference_mean"])
                row["exact_difference"] = _relative(row["samples_mean"], row["exact"])
                row["ks_statistic"], row["ks_pvalue"] = _ks(
                    name, mine[name], reference.get(name, np.empty(0))
                )
        return rows

    def table(self) -> str:
        """The rows as the command prints them: a block per size bin."""
        head = f"{'':28}{'samples':>17}{'reference':>17}{'diff':>8}{'exact':>9}{'diff':>8}"
        lines = [f"{len(self.samples.get('valid', ()))} samples; {self._trained_text()}"]
        for row in self.rows():
            if row["statistic"] == "valid":
                beyond = (
                    ": extrapolation, beyond the training sizes" if row["extrapolation"] else ""
                )
                lines += [
                    "",
                    f"N = {row['sizes']}{beyond}: {row['samples']} samples against "
                    f"{row['reference_sets']} {row['reference'] or 'reference sets'}",
                    f"{head}{'KS D':>7}{'p':>9}",
                ]
            lines.append(_line(row))
        return "\n".join(lines)

    def _trained_text(self) -> str:
        if self.trained is None:
            return "no training data read"
        lo, hi = self.trained
        exact = f"; exact values of {self.dimension:g}D sprinklings" if self.dimension else ""
        return f"trained on sizes {lo}-{hi}{exact}"


def _within(stats: dict[str, np.ndarray], size_bin: SizeBin) -> dict[str, np.ndarray]:
    if not stats or not len(stats["elements"]):
        return {name: np.empty(0) for name in ("elements", *LABELS)}
    keep = size_bin.holds(stats["elements"])
    return {name: values[keep] for name, values in stats.items()}


def _spread(prefix: str, values: np.ndarray) -> dict[str, float]:
    finite = values[np.isfinite(values)]
    mean = float(finite.mean()) if len(finite) else math.nan
    std = float(finite.std()) if len(finite) else math.nan
    return {f"{prefix}_mean": mean, f"{prefix}_std": std}


def _relative(value: float, reference: float) -> float:
    """``value`` relative to ``reference``, as a fraction; none where that is 0 or unknown."""
    if not reference or math.isnan(reference):
        return math.nan
    return (value - reference) / reference


def _ks(name: str, mine: np.ndarray, theirs: np.ndarray) -> tuple[float, float]:
    """The two-sample Kolmogorov-Smirnov statistic and p-value (none for ``valid``, or with
    fewer than two values on a side)."""
    from scipy.stats import ks_2samp

    mine, theirs = mine[np.isfinite(mine)], theirs[np.isfinite(theirs)]
    if name == "valid" or len(mine) < 2 or len(theirs) < 2:
        return math.nan, math.nan
    result = ks_2samp(mine, theirs)
    return float(result.statistic), float(result.pvalue)


def _number(value: float, std: float | None = None) -> str:
    if math.isnan(value):
        return "n/a"
    return f"{value:.4g}" if std is None or math.isnan(std) else f"{value:.4g} ± {std:.2g}"


def _share(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{100 * value:.1f} %"


def _percent(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{100 * value:+.1f}%"


def _line(row: dict[str, Any]) -> str:
    name = row["statistic"]
    if name == "valid":
        mine = "n/a" if math.isnan(row["samples_mean"]) else f"{100 * row['samples_mean']:.1f} %"
        theirs = (
            "n/a" if math.isnan(row["reference_mean"]) else f"{100 * row['reference_mean']:.1f} %"
        )
        return f"{LABELS[name]:28}{mine:>17}{theirs:>17}"
    mine = _number(row["samples_mean"], row["samples_std"])
    theirs = _number(row["reference_mean"], row["reference_std"])
    cells = (
        f"{mine:>17}{theirs:>17}{_percent(row['difference']):>8}{_number(row['exact']):>9}"
        f"{_percent(row['exact_difference']):>8}"
    )
    ks = (
        ""
        if math.isnan(row["ks_statistic"])
        else f"{row['ks_statistic']:7.3f}{row['ks_pvalue']:9.2g}"
    )
    return f"{LABELS[name]:28}{cells}{ks}"


def relations_of(graph: Any) -> torch.Tensor:
    """The causal set of a graph of the library's (its links as edges in both directions, in
    a natural labelling): its relations."""
    n = int(graph.num_nodes)
    links = torch.zeros(n, n, dtype=torch.bool)
    first, second = graph.edge_index
    forwards = first < second
    links[first[forwards], second[forwards]] = True
    return transitive_closure(links)


def build(
    samples: dict[str, np.ndarray],
    data: dict[str, np.ndarray],
    output: Path,
    *,
    dimension: float | None,
    trained: tuple[int, int] | None = None,
) -> Report:
    """The report of the ``samples``' statistics against the training ``data``'s, with each
    bin's reference chosen: the data of its sizes, or sprinklings of ``dimension`` at the
    samples' sizes where the data have fewer than :data:`MIN_REFERENCE` sets there.
    ``trained``: the training sizes (default: the data's smallest and largest)."""
    sizes = data.get("elements", np.empty(0))
    if trained is None and len(sizes):
        trained = (int(sizes.min()), int(sizes.max()))
    bins = size_bins(samples["elements"], trained) if len(samples["elements"]) else []
    references = []
    for size_bin in bins:
        theirs = _within(data, size_bin)
        if len(theirs["elements"]) >= MIN_REFERENCE or dimension is None:
            references.append(("training sets", theirs))
            continue
        logs.get_logger().info("sprinkling the reference sets of sizes %s", size_bin.name)
        mine = _within(samples, size_bin)["elements"]
        references.append(("sprinklings", statistics(sprinklings(mine, int(dimension)))))
    return Report(samples, data, output, dimension, trained, bins, references)


def reference_dimension(data: DataConfig, asked: float | None = None) -> float | None:
    """The dimension of the flat diamonds the data are sprinkled into (``asked``, a
    condition's, where the data hold several); None for any other data."""
    from ..embedded import data_kind

    if data.files or data.kind is None or not data_kind(data.kind).flat_diamonds:
        return None
    if asked is not None:
        return float(asked)
    dims = list(data.dimensions or ())
    return float(dims[0]) if len(dims) == 1 else None


def report_paths(output: Path) -> list[Path]:
    """The report's table and picture beside the samples' file."""
    stem = output.with_suffix("").name
    return [output.with_name(f"{stem}_report.csv"), output.with_name(f"{stem}_report.png")]


def compare(
    samples: Sequence[CausalSet],
    data: DataConfig,
    output: Path,
    *,
    limit: int,
    condition: dict[str, Any] | None = None,
) -> Report:
    """The report of ``samples`` against up to ``limit`` causal sets of the training split of
    the data the ``data:`` section ``data`` describes (nothing written yet:
    :func:`write_report`); grown with ``condition`` ``{"dimension": d}``, against the sets of
    that dimension alone."""
    from ..data import dataset_from_config
    from .inputs import select_split

    train = select_split(dataset_from_config(data, progress=False), data, "train")
    asked = (condition or {}).get("dimension")
    dimension = reference_dimension(data, asked)
    wanted = _label_of(data, asked)
    every = (train[i] for i in range(len(train)))
    chosen = itertools.islice((g for g in every if _labelled(g, wanted)), limit)
    theirs = statistics([relations_of(g) for g in chosen])
    mine = statistics([s.relations for s in samples])
    generated = not data.files  # the embedded data: sizes drawn from data.num_points
    trained = tuple(int(n) for n in data.num_points) if generated else None
    return build(mine, theirs, output, dimension=dimension, trained=trained)


def _label_of(data: DataConfig, dimension: Any) -> int | None:
    """The label ``y`` of the generated sets of ``dimension`` (its index in
    ``data.dimensions``); None: every set."""
    if dimension is None or data.files or int(dimension) not in data.dimensions:
        return None
    return list(data.dimensions).index(int(dimension))


def _labelled(graph: Any, label: int | None) -> bool:
    return label is None or int(graph.y.view(-1)[0]) == label


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
    picture = draw(report, rows, folder / picture_path.name)
    return [(table, table_path), (picture, picture_path)]


SHOWN = ("ordering_fraction", "myrheim_meyer_dimension", "links_per_element", "height", "width")


def draw(report: Report, rows: list[dict[str, Any]], path: Path) -> Path:
    """Each of :data:`SHOWN` against the size, bin by bin: the samples' and the reference's
    means with their spreads, and the exact value; bins beyond the training sizes shaded. And
    the interval abundances of the largest bin."""
    fig = new_figure(13, 7.5)
    axes = fig.subplots(2, 3).ravel()
    middles = [(b.low + b.high) / 2 for b in report.bins]
    for ax, name in zip(axes, SHOWN, strict=False):
        mine = [r for r in rows if r["statistic"] == name]
        for who, shift, color in (("samples", -0.6, "C1"), ("reference", 0.6, "C0")):
            ax.errorbar(
                [m + shift for m in middles],
                [r[f"{who}_mean"] for r in mine],
                yerr=[r[f"{who}_std"] for r in mine],
                fmt="o",
                color=color,
                capsize=3,
                label=who if who == "samples" else "training data / sprinklings",
            )
        exact = [r["exact"] for r in mine]
        if any(np.isfinite(exact)):
            ax.plot(middles, exact, "_", color="black", markersize=18, label="exact")
        for b in report.bins:
            if b.beyond:
                ax.axvspan(b.low - 0.5, b.high + 0.5, color="grey", alpha=0.15, lw=0)
        ax.set(xlabel="elements", ylabel=LABELS[name])
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize="small")
    _abundances(axes[5], report, rows)
    valid = 100 * float(np.mean(report.samples["valid"])) if len(report.samples["valid"]) else 0
    fig.suptitle(
        f"{len(report.samples['valid'])} samples by size ({valid:.1f} % valid orders); "
        "grey: beyond the training sizes"
    )
    return save(fig, path)


def _abundances(ax: Any, report: Report, rows: list[dict[str, Any]]) -> None:
    """Links and intervals of k per element in the largest bin."""
    if not report.bins:
        return
    last = report.bins[-1].name
    names = ["links_per_element", *(f"intervals_{k}_per_element" for k in range(1, 5))]
    by_name = {r["statistic"]: r for r in rows if r["sizes"] == last}
    k = np.arange(MAX_INTERVAL + 1)
    width = 0.28
    for shift, (who, label, color) in zip(
        (-width, 0.0, width),
        (
            ("samples_mean", "samples", "C1"),
            ("reference_mean", by_name["valid"]["reference"], "C0"),
            ("exact", "exact", "grey"),
        ),
        strict=True,
    ):
        values = [by_name[n][who] for n in names]
        if any(np.isfinite(values)):
            ax.bar(k + shift, values, width=width, label=label, color=color, alpha=0.8)
    ax.set(
        xlabel="elements between the pair, k",
        ylabel="intervals per element",
        xticks=k,
        title=f"N = {last}",
    )
    ax.legend(fontsize="small")
