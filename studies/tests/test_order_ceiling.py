"""studies/order_ceiling.py: the chain it runs keeps uniform embeddings uniform and is its own
adjoint (what the ceiling's likelihoods rest on), and the likelihoods it gives a mixed chain's Y
are the order's, counted directly."""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from QuantumGravPy.physics import uniform_diamond

STUDIES = Path(__file__).resolve().parent.parent
import curvature_bound  # noqa: E402
import order_bound  # noqa: E402
import order_ceiling  # noqa: E402
from test_order_bound import MOTIONS, _assert_alike, related_fractions  # noqa: E402

SCALES = {"shift": 0.3, "boost": 0.3, "rotation": 1.0}


def _chains_of_three(count: int, seed: int = 1) -> np.ndarray:
    """Uniform embeddings of the 3-chain 0 < 1 < 2, by rejection of uniform triples."""
    triples = uniform_diamond(3 * count, 4, np.random.default_rng(seed)).reshape(-1, 3, 4)
    triples = np.take_along_axis(triples, np.argsort(triples[:, :, 0], axis=1)[..., None], 1)
    order = order_bound.relations(torch.from_numpy(triples)).numpy()
    return triples[(order[:, 0, 1] == 1) & (order[:, 1, 2] == 1)]


def _sweep(points: np.ndarray, rng: np.random.Generator, permutation: np.ndarray) -> np.ndarray:
    """One sweep of every set, its elements in the order ``permutation`` [B, N]."""
    out = points.copy()
    order = order_bound.relations(torch.from_numpy(out)).numpy()
    directions = rng.standard_normal(out.shape)
    directions /= np.linalg.norm(directions, axis=-1, keepdims=True)
    active = np.ones(len(out), dtype=bool)
    order_ceiling._sweep(out, order, active, permutation, directions, rng.random(out.shape[:2]))
    return out


def test_a_sweep_in_random_order_is_its_own_adjoint_and_a_fixed_order_is_not():
    """From uniform embeddings X of a 3-chain, one sweep to X': (X, X') and (X', X) must have
    one distribution, or a class's likelihood of where the chain got to is not the mean of its
    density over chains run on from there. The covariance of element 0's time before and
    element 1's after is that of element 1's before and 0's after (and so for elements 1 and
    2), within 4.5 standard errors, when the elements go in random order; in the fixed order
    0, 1, 2 they differ by more than 10 (about 26 with these draws). In 2D, where the uniform
    embeddings of a chain are exact and cheap (sorted light-cone coordinates; the sweep is the
    same in any dimension)."""
    count, rng = 200_000, np.random.default_rng(5)
    u, v = np.sort(rng.random((count, 3)), axis=1), np.sort(rng.random((count, 3)), axis=1)
    x = np.stack([u + v - 1.0, u - v], axis=-1)  # (t, x) of the light-cone coordinates

    def asymmetry(permutation, i, j):
        if permutation is None:  # the chain's own step, sweeps alone (in random order)
            chain = order_ceiling.Chain(x, rng, SCALES, sweeps=1.0)
            chain.step()
            y = chain.points
        else:
            y = _sweep(x, rng, permutation)
        assert (order_bound.relations(torch.from_numpy(y)).numpy()[:, 0, 2] == 1).all()
        forward = (x[:, i, 0] - x[:, i, 0].mean()) * (y[:, j, 0] - y[:, j, 0].mean())
        backward = (x[:, j, 0] - x[:, j, 0].mean()) * (y[:, i, 0] - y[:, i, 0].mean())
        gap = forward - backward
        return gap.mean() / (gap.std() / math.sqrt(count))

    for i, j in ((0, 1), (1, 2)):
        assert abs(asymmetry(None, i, j)) < 4.5
        assert abs(asymmetry(np.tile(np.arange(3), (count, 1)), i, j)) > 10


@pytest.mark.parametrize(
    "sweeps, scales, steps",
    [(order_ceiling.SWEEP, SCALES, 30), (0.0, {"shift": 0.4, "boost": 0.4, "rotation": 1.0}, 60)],
    ids=["sweeps-and-motions", "motions-alone"],
)
def test_the_chain_keeps_uniform_embeddings_uniform(sweeps, scales, steps):
    """From rejection's uniform embeddings of a 3-chain, steps of the chain (and of motions
    alone, larger than the study's): as uniform as fresh ones (``_assert_alike``), every kind
    of motion taken, and no relation changed."""
    embeddings = _chains_of_three(2_500_000, seed=2)  # about 7,000
    start, reference = embeddings[:3500], embeddings[3500:]
    chain = order_ceiling.Chain(start, np.random.default_rng(3), scales, sweeps=sweeps)
    for _ in range(steps):
        chain.step()
    order_ceiling._check(chain)
    assert all(taken > 0 for taken, _ in chain.taken.values())
    assert np.abs(chain.points - start).mean() > 0.05
    _assert_alike(torch.from_numpy(chain.points), torch.from_numpy(reference))


def test_a_mixed_chains_likelihoods_are_each_sets_orders():
    """Pairs of points, related in some sets and not in others, chains long enough to forget
    their start: ``ceiling``'s likelihood ratios of each set's Y are each curved class's ratio
    of how often its pairs relate as that set's do to how often flat ones do (counted
    directly, each class moved back by its motion), so no set has another's chains; and the
    points' own ratios, a plausible mistake, are not."""
    log_densities = curvature_bound.class_log_densities(4, 0.6)
    related = related_fractions(200_000, 0.6, np.random.default_rng(7))
    direct = {True: related / related[0], False: (1 - related) / (1 - related[0])}
    apart = [[-0.3, 0.4, 0.0, 0.0], [0.1, -0.5, 0.1, 0.0]]
    together = [[-0.3, 0.1, 0.0, 0.0], [0.4, 0.0, 0.2, 0.0]]
    start = torch.tensor([together, apart, apart, together, apart])
    is_related = (order_bound.relations(start)[:, 0, 1] != 0).tolist()
    assert is_related == [True, False, False, True, False]
    out = order_ceiling.ceiling(start, (30, 60), 500, log_densities, MOTIONS, SCALES,
                                np.random.default_rng(8), report=lambda line: None)  # fmt: skip
    ratio = np.exp(out["together"] - out["together"][:, :1])  # [5 sets, 3]
    assert abs(direct[True][1] - 1) > 0.1 and abs(direct[True][2] - 1) > 0.1  # classes differ
    for k, related_pair in enumerate(is_related):
        # a tenth of flat pairs are related: the related ratios' relative standard error is
        # about 1%, the unrelated ones' about 0.1%; they differ from each other by over 20%
        tolerance = 0.04 if related_pair else 0.015
        np.testing.assert_allclose(ratio[k], direct[related_pair], rtol=tolerance)
    points = np.exp(out["points"][0] - out["points"][0, 0])
    assert np.abs(points / direct[True] - 1).max() > 0.1


def test_the_script_prints_the_ceiling_as_the_points_accuracy_plus_the_difference():
    """The command line, on a few sets of 12 elements: a row of the table whose ceiling is the
    points' accuracy on the further sets plus Y's paired difference, and whose margin is 3 of
    its standard errors; impossible arguments get one line and exit 2."""
    result = subprocess.run(
        [sys.executable, str(STUDIES / "order_ceiling.py"), "--sizes", "12", "--sets", "4",
         "--steps", "2", "4", "--points", "200", "--search", "20000", "--threads", "1"],
        capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    row = next(line for line in result.stdout.splitlines() if line.startswith("| 12 |"))
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    numbers = [[float(x) for x in re.findall(r"[-+]?\d+\.\d+", cell)] for cell in cells]
    bulk, _ = numbers[1]
    _, difference, difference_error = numbers[4]
    ceiling, error = numbers[6]
    assert cells[2] == "12"  # 4 sets of each class
    assert abs(ceiling - (bulk + difference)) <= 2e-4
    assert error >= difference_error
    assert abs(numbers[7][0] - (ceiling + 3 * error)) <= 5e-4
    bad = subprocess.run(
        [sys.executable, str(STUDIES / "order_ceiling.py"), "--steps", "5", "2"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert bad.returncode == 2 and "K1 <= K2" in bad.stderr and "Traceback" not in bad.stderr
