"""qg sample's report, size by size: its exact columns agree with sprinklings, its bins follow
the training sizes, and a bin beyond them is marked and set against fresh sprinklings."""

import math

import numpy as np
import pytest

from QuantumGravPy.physics import sprinkle
from QuantumGravPy.predict.sample_report import build, write_report
from QuantumGravPy.predict.sample_statistics import SizeBin, size_bins, statistics


def sprinkled(sizes, dimension, first_seed):
    return statistics(
        [sprinkle(n, dimension, first_seed + i).relations for i, n in enumerate(sizes)]
    )


def rows_by(report):
    return {(r["sizes"], r["statistic"]): r for r in report.rows()}


@pytest.mark.parametrize("dimension", [2, 4])
def test_the_reports_exact_columns_agree_with_sprinklings(dimension, tmp_path):
    """Sprinklings reported as if they were samples: in each size bin, every exact value lies
    within 4 standard errors of their mean, and the Kolmogorov-Smirnov test finds them like
    the reference sprinklings."""
    sizes = [40] * 100 + [64] * 100
    report = build(
        sprinkled(sizes, dimension, 0),
        sprinkled(sizes, dimension, 10_000),
        tmp_path / "s.zarr",
        dimension=dimension,
    )
    rows = rows_by(report)
    assert [b.name for b in report.bins] == ["40", "64"]
    checked = 0
    for (_, name), row in rows.items():
        if math.isnan(row["exact"]) or name == "valid":
            continue
        error = row["samples_std"] / math.sqrt(row["samples"])
        # the Myrheim-Meyer dimension of the expected ordering fraction is the dimension; the
        # mean of the estimates differs from it by their curvature times their variance,
        # well below one standard error at these sizes
        assert abs(row["samples_mean"] - row["exact"]) < 4 * error, (name, row)
        assert row["ks_pvalue"] > 1e-3, (name, row)
        checked += 1
    # 2D: ordering fraction, dimension, links and 4 interval abundances in each of two bins
    assert checked == (14 if dimension == 2 else 4)
    assert rows[("64", "ordering_fraction")]["reference"] == "training sets"
    assert not rows[("64", "ordering_fraction")]["extrapolation"]


def test_a_model_that_drifts_with_size_is_seen_in_its_bins(tmp_path):
    """Sets that are sprinklings at 32 elements and chains at 64: pooled they would average
    out to something; by size the 64s are far off, with a tiny p-value."""
    chains = [np.triu(np.ones((64, 64), dtype=bool), 1)] * 20
    import torch

    samples = statistics(
        [sprinkle(32, 2, i).relations for i in range(20)] + [torch.from_numpy(c) for c in chains]
    )
    data = sprinkled([32] * 20 + [64] * 20, 2, 500)
    rows = rows_by(build(samples, data, tmp_path / "s.zarr", dimension=2))
    assert abs(rows[("32", "ordering_fraction")]["exact_difference"]) < 0.1
    assert rows[("64", "ordering_fraction")]["samples_mean"] == 1.0
    assert rows[("64", "height")]["samples_mean"] == 64
    assert rows[("64", "width")]["samples_mean"] == 1
    assert rows[("64", "width")]["ks_pvalue"] < 1e-6


def test_bins_follow_the_training_sizes():
    few = np.array([20, 20, 24, 30])
    assert size_bins(few, (16, 24)) == [
        SizeBin(20, 20, False),
        SizeBin(24, 24, False),
        SizeBin(30, 30, True),
    ]
    many = np.arange(32, 129)
    inside = size_bins(many, (32, 128))
    assert [(b.low, b.high) for b in inside] == [(32, 56), (57, 80), (81, 104), (105, 128)]
    assert not any(b.beyond for b in inside)
    wider = size_bins(np.arange(16, 201), (32, 128))
    assert [b.beyond for b in wider] == [True] * 4 + [False] * 4 + [True] * 4
    assert wider[0].low == 16 and wider[-1].high == 200


def test_a_bin_beyond_the_training_sizes_is_set_against_sprinklings_of_its_sizes(tmp_path):
    data = sprinkled([16, 20, 24] * 10, 2, 0)
    samples = sprinkled([20] * 12 + [48] * 12, 2, 100)
    report = build(samples, data, tmp_path / "s.zarr", dimension=2)
    rows = rows_by(report)
    beyond = rows[("48", "links_per_element")]
    assert beyond["extrapolation"] and beyond["reference"] == "sprinklings"
    assert beyond["reference_sets"] == 12
    assert rows[("20", "links_per_element")]["reference"] == "training sets"
    assert "N = 48: extrapolation, beyond the training sizes" in report.table()
    assert "trained on sizes 16-24" in report.table()
    written = write_report(report, tmp_path)
    assert [p.name for p, _ in written] == ["s_report.csv", "s_report.png"]
    header = (tmp_path / "s_report.csv").read_text().splitlines()[0]
    for column in ("sizes", "extrapolation", "exact", "ks_statistic", "ks_pvalue"):
        assert column in header.split(",")


def test_without_a_known_dimension_no_exact_value_and_no_sprinkling_is_made_up(tmp_path):
    data = sprinkled([16, 20, 24] * 10, 2, 0)
    samples = sprinkled([20] * 12 + [48] * 12, 2, 100)
    rows = rows_by(build(samples, data, tmp_path / "s.zarr", dimension=None))
    assert all(math.isnan(r["exact"]) for k, r in rows.items() if k[1] != "valid")
    beyond = rows[("48", "ordering_fraction")]
    assert beyond["reference_sets"] == 0 and math.isnan(beyond["difference"])
