"""The embedded kinds of data (data.kind): their causal sets, their labels, and the shipped
config of each, trained from the command line."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from conftest import ROOT, run_main

import QuantumGravPy as qg
from QuantumGravPy.data import generate_causal_set_graphs
from QuantumGravPy.data.sources.causal_sets import GeneratedSource

LABELS = ("y", "dimension", "spacetime", "h", "manifold_like", "cset_type")


def make(kind, start=0, end=60, dims=(2, 3, 4), points=(16, 24), h=(0.6, 0.6), seed=0):
    return generate_causal_set_graphs(
        start, end, num_points=points, dimensions=dims, seed=seed, progress=False, kind=kind, h=h
    )


@pytest.mark.parametrize("kind", ["dimension", "curvature", "manifold_like", "cset_type", "ricci"])
def test_every_graph_carries_every_label_and_is_a_function_of_seed_and_index(kind):
    graphs = make(kind)
    for g in graphs:
        for name in LABELS:
            assert g[name].shape == (1,), (kind, name)
        assert g.ricci.shape == (g.num_nodes,)
        assert g.edge_index.shape[0] == 2 and g.x.shape == (g.num_nodes, 6)
        assert ("pos" in g) == (kind in ("dimension", "curvature", "ricci"))
    # graph i depends only on (seed, i): a later range repeats the same graphs
    for a, b in zip(graphs[20:], make(kind, 20, 60), strict=True):
        assert torch.equal(a.edge_index, b.edge_index) and torch.equal(a.y, b.y)


def test_large_sets_are_turned_into_graphs_a_bounded_batch_at_a_time(monkeypatch):
    from QuantumGravPy.data.sources import causal_sets, kinds

    whole = make("cset_type", end=40)
    batches, graphs_of = [], kinds.graphs_of

    def recording(kind, drawn, max_dimension, **options):
        batches.append(sum(cset.num_points**2 for cset, _ in drawn))
        return graphs_of(kind, drawn, max_dimension, **options)

    # 1,500 entries: two or three sets of 16-24 elements at a time
    monkeypatch.setattr(causal_sets, "_CHUNK_ENTRIES", 1500)
    monkeypatch.setattr(kinds, "graphs_of", recording)
    batched = make("cset_type", end=40)
    assert len(batches) > 10 and max(batches) <= 1500
    for a, b in zip(whole, batched, strict=True):  # the same graphs either way
        assert torch.equal(a.edge_index, b.edge_index) and torch.equal(a.x, b.x)
        assert torch.equal(a.y, b.y)


def test_curvature_labels_follow_the_spacetime():
    graphs = make("curvature", dims=(4,))
    assert {int(g.y) for g in graphs} == {0, 1, 2}
    for g in graphs:
        assert int(g.y) == int(g.spacetime)
        assert float(g.h) == pytest.approx(0.0 if int(g.y) == 0 else 0.6)
        radius = (1 - 0.6) / 0.6
        ricci = {0: 0.0, 1: 12 / radius**2, 2: -12 / radius**2}[int(g.y)]
        assert torch.allclose(g.ricci, torch.full_like(g.ricci, ricci))
    ranged = make("curvature", dims=(4,), h=(0.2, 0.8))
    curved = [float(g.h) for g in ranged if int(g.y) > 0]
    assert min(curved) >= 0.2 and max(curved) <= 0.8 and len(set(curved)) == len(curved)


def test_manifold_like_sets_share_the_sprinklings_ordering_fractions():
    graphs = make("manifold_like", end=400, points=(32, 48))
    y = np.array([int(g.y) for g in graphs])
    assert 0.4 < y.mean() < 0.6
    assert all(int(g.manifold_like) == int(g.y) for g in graphs)

    def fraction(g):
        n = g.num_nodes
        return float(g.x[:, 0].sum()) * n / (n * (n - 1) / 2)  # past sizes / N, summed

    f = np.array([fraction(g) for g in graphs])
    # the best threshold on the ordering fraction (either way round) stays near chance
    accuracies = [max(np.mean((f > t) == y), np.mean((f <= t) == y)) for t in np.unique(f)]
    assert max(accuracies) < 0.62
    # while the link counts differ: percolations of one ordering fraction have fewer links
    links = np.array([g.num_edges / 2 / g.num_nodes for g in graphs])
    assert links[y == 0].mean() < links[y == 1].mean()


def test_cset_type_classes_are_their_generators():
    graphs = make("cset_type", end=100, dims=(3,))
    assert {int(g.y) for g in graphs} == set(range(5))
    for g in graphs:
        kind = int(g.cset_type)
        assert int(g.y) == kind and int(g.manifold_like) == (kind == 0)
        height = g.x[:, 4] * g.num_nodes  # longest chain ending at each element, in links
        if kind == 2:  # Kleitman-Rothschild: three layers
            assert height.max() <= 2


def test_the_classes_are_known_without_generating():
    def classes(kind, name="y"):
        return GeneratedSource(num_graphs=10, kind=kind).num_classes_of(name)

    assert [classes(k) for k in ("dimension", "curvature", "manifold_like", "cset_type")] == [
        3,
        3,
        2,
        5,
    ]
    assert classes("ricci") is None and classes("dimension", "spacetime") == 3


def test_bad_kind_settings_are_refused_naming_the_key(make_config):
    with pytest.raises(qg.ConfigError, match=r"data.h: expected a number in \[0, 1\)"):
        make_config("data.h=1.2")
    with pytest.raises(qg.ConfigError, match=r"data.h"):
        make_config("data.h=[0.8,0.2]")
    known = r"data.kind: unknown 'shape' \(known: cset_type, curvature, dimension"
    with pytest.raises(qg.ConfigError, match=known):
        make_config("data.kind=shape")
    with pytest.raises(qg.ConfigError, match=r"tasks: data.kind ricci has no classes"):
        make_config("data.kind=ricci")


# Each shipped config, made small enough for the suite, and what it must beat: chance for a
# classification (1/classes), 0 for R^2 (the best constant). The margins are far from what a model
# that does not learn reaches; measured values (300 graphs, batch 8) in the comments. curvature is
# trained at h = 0.9, where the curvature shows in the order (at 0.6 even a perfect model stays
# near the bound of studies/curvature_bound.py, too close to chance for 45 test graphs).
KIND_RUNS = {
    "curvature": (["data.h=0.9", "training.num_epochs=5"], {"test_accuracy": 0.6}),  # 0.87
    "curvature_h": (  # 0.64, 0.31
        ["data.h=[0.6, 0.9]", "training.num_epochs=8"],
        {"test_spacetime_accuracy": 0.5, "test_h_r2": 0.15},
    ),
    "manifold_like": (["training.num_epochs=5"], {"test_accuracy": 0.8}),  # 0.98
    "cset_type": (["training.num_epochs=8"], {"test_accuracy": 0.45}),  # 0.64
    # per element, the weakest signal of all at this size: 0.044
    "ricci": (["data.num_points=[32, 64]", "training.num_epochs=8"], {"test_r2": 0.02}),
}


@pytest.mark.parametrize("name", list(KIND_RUNS))
def test_the_shipped_config_of_each_kind_learns(name, tmp_path, data_root, capsys):
    overrides, must_beat = KIND_RUNS[name]
    done = run_main(
        capsys,
        "train",
        ROOT / "configs" / f"{name}.yaml",
        f"data.root={data_root}",
        "data.num_graphs=300",
        "training.batch_size=8",
        "training.device=cpu",
        f"training.path={tmp_path / name}",
        "log_level=WARNING",
        *overrides,
    )
    assert done.returncode == 0, done.stderr
    assert "could not write the plots" not in done.stderr
    summary = json.loads((tmp_path / name / "summary.json").read_text())
    for column, threshold in must_beat.items():
        assert summary[column] >= threshold, (column, summary[column])
    if name == "curvature_h":  # two tasks: per-task pictures
        assert (tmp_path / name / "confusion_matrix_spacetime.png").exists()
        assert (tmp_path / name / "regression_h.png").exists()
    elif name != "ricci":
        assert (tmp_path / name / "confusion_matrix.png").exists()
