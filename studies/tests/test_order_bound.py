"""studies/order_bound.py's chain over the embeddings of an order, against exact results: it
keeps the order, it draws the embeddings of an order as uniformly as rejection does, and the
likelihood ratios it gives an order are the ratios of the classes' probabilities of it."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import curvature_bound
import numpy as np
import order_bound
import torch
from motions import conformal_motion, motion_density

from QuantumGravPy.physics import uniform_diamond
from QuantumGravPy.physics.curved import log_conformal_factor

MOTIONS = {"de_sitter": (0.69, 0.0), "anti_de_sitter": (0.0, -0.69)}  # the study's, near enough


def test_the_segment_is_where_no_relation_of_the_element_changes():
    torch.manual_seed(0)
    points = torch.tensor(np.stack([uniform_diamond(40, 4, np.random.default_rng(s))
                                    for s in range(6)]))  # fmt: skip
    order = order_bound.relations(points)
    for i in (0, 17, 39):
        direction = torch.randn(6, 4, dtype=torch.float64)
        direction /= direction.norm(dim=-1, keepdim=True)
        low, high = order_bound.segment(points, i, direction)
        assert (low < 0).all() and (high > 0).all()
        for s, keeps in ((low * 0.999, True), (high * 0.999, True),
                         (low * 1.001, False), (high * 1.001, False)):  # fmt: skip
            moved = points.clone()
            moved[:, i] += s[:, None] * direction
            same = (order_bound.relations(moved) == order).flatten(1).all(1)
            same &= order_bound.inside(moved).all(1)
            assert bool((same == keeps).all()), (i, keeps)


def _uniform_embeddings(count: int):
    """Uniform triples of points kept when the first is before the second and the third apart
    from both: the uniform distribution on that order's embeddings, by rejection."""
    triples = uniform_diamond(3 * count, 4, np.random.default_rng(1)).reshape(-1, 3, 4)
    triples = torch.tensor(triples)
    wanted = torch.tensor([[0, 1, 0], [-1, 0, 0], [0, 0, 0]], dtype=torch.int8)
    return triples[(order_bound.relations(triples) == wanted).flatten(1).all(1)], wanted


def _assert_alike(points, reference):
    """Each point's mean time, radius and their squares within 4.5 standard errors (12
    comparisons: a false alarm about once in 10,000 draws)."""
    for name, f in (("t", lambda x: x[..., 0]), ("r", lambda x: x[..., 1:].norm(dim=-1))):
        for power in (1, 2):
            a, b = f(points) ** power, f(reference) ** power
            error = torch.sqrt(a.var(0) / len(a) + b.var(0) / len(b))
            gap = (a.mean(0) - b.mean(0)).abs()
            assert bool((gap < 4.5 * error).all()), (name, power, gap / error)


def test_each_step_of_the_chain_keeps_the_embeddings_of_an_order_uniform():
    """Started from uniform embeddings (rejection), 20 hit-and-run sweeps alone, and 40 rounds
    of motions alone (larger than the study's), leave them as uniform as fresh ones."""
    embeddings, wanted = _uniform_embeddings(600_000)
    start, reference = embeddings[:6000], embeddings[6000:]
    chain = order_bound.Embeddings(start, torch.Generator().manual_seed(2))
    for _ in range(20):
        chain.sweep()
    _assert_alike(chain.points, reference)
    chain = order_bound.Embeddings(start, torch.Generator().manual_seed(3))
    chain.steps = {"shift": 0.4, "boost": 0.4, "rotation": 1.0}
    for _ in range(40):
        chain.move(adapt=False)
    assert not torch.equal(chain.points, start)
    assert (order_bound.relations(chain.points) == wanted).all()
    _assert_alike(chain.points, reference)


def test_the_chain_forgets_the_embedding_it_starts_from():
    """4,000 chains from one embedding: after 100 sweeps and motions they are as uniform as
    rejection's (after 30, with this seed, not yet)."""
    embeddings, wanted = _uniform_embeddings(600_000)
    chain = order_bound.Embeddings(embeddings[:1].expand(4000, 3, 4).clone(),
                                   torch.Generator().manual_seed(2))  # fmt: skip
    for _ in range(100):
        chain.sweep()
        chain.move(adapt=False)
    assert (order_bound.relations(chain.points) == wanted).all()
    _assert_alike(chain.points, embeddings[1:])


def related_fractions(count: int, h: float, rng: np.random.Generator) -> np.ndarray:
    """How often two points of each class (flat, de Sitter, anti-de Sitter; each curved class
    moved back by its motion, as the study does) are related: over ``count`` pairs, in 4D."""
    fraction = []
    for spacetime in (None, *order_bound.CURVED):
        if spacetime is None:
            pairs = uniform_diamond(2 * count, 4, rng)
        else:
            log_omega = log_conformal_factor(spacetime, h)
            pairs = curvature_bound.curved_points(2 * count, 4, log_omega, rng)
            pairs = conformal_motion(pairs, *(-m for m in MOTIONS[spacetime]))
        pairs = torch.from_numpy(pairs.reshape(count, 2, 4))
        fraction.append((order_bound.relations(pairs)[:, 0, 1] != 0).double().mean().item())
    return np.array(fraction)


def test_an_orders_likelihood_ratio_is_how_much_likelier_the_class_makes_it():
    """Two related points: the chain's ratio of each curved class's likelihood to the flat
    one's is the ratio of how often two of the class's points are related, counted directly
    (each class moved back by its motion, as the study does), within 4 standard errors."""
    d, h = 4, 0.6
    log_densities = curvature_bound.class_log_densities(d, h)
    count = 200_000
    fraction = torch.from_numpy(related_fractions(count, h, np.random.default_rng(3)))
    direct = fraction / fraction[0]
    start = torch.tensor([[[-0.3, 0.1, 0.0, 0.0], [0.4, 0.0, 0.2, 0.0]]])
    chain = order_bound.Embeddings(start.expand(3000, 2, 4).clone(),
                                   torch.Generator().manual_seed(4))  # fmt: skip
    samples = []
    for sweep in range(60):
        chain.sweep()
        chain.move(adapt=False)
        if sweep >= 20:
            samples.append(order_bound.log_ratios(chain.points, log_densities, MOTIONS))
    samples = torch.stack(samples)  # [sweeps, chains, 3]
    estimate = order_bound.order_log_ratios(samples.flatten(0, 1)[:, None]).exp()[0].tolist()
    per_chain = samples.exp().mean(0)  # each chain's own estimate, for the standard error
    error = (per_chain.std(0) / math.sqrt(len(per_chain))).tolist()
    direct_error = (
        direct * torch.sqrt((1 - fraction) / (fraction * count)) * math.sqrt(2)
    ).tolist()
    direct = direct.tolist()
    assert abs(direct[1] - 1) > 0.1 and abs(direct[2] - 1) > 0.1  # the classes differ
    for k in (1, 2):
        assert abs(estimate[k] - direct[k]) < 4 * math.hypot(error[k], direct_error[k]), k


def test_an_orders_likelihood_ratio_is_the_mean_ratio_over_its_uniform_embeddings():
    """Three points: the chain's log-likelihood ratios against the same mean over rejection's
    uniform embeddings, closely enough (4 standard errors) that the mean of the points' log
    ratios, a plausible mistake, falls outside."""
    log_densities = curvature_bound.class_log_densities(4, 0.6)
    embeddings, _ = _uniform_embeddings(600_000)
    exact = order_bound.log_ratios(embeddings, log_densities, MOTIONS)  # [draws, 3]
    reference = order_bound.order_log_ratios(exact[:, None])[0]
    reference_error = exact.exp().std(0) / exact.exp().mean(0) / math.sqrt(len(exact))
    chain = order_bound.Embeddings(embeddings[:2000].clone(), torch.Generator().manual_seed(6))
    samples = []
    for _ in range(20):
        chain.sweep()
        chain.move(adapt=False)
        samples.append(order_bound.log_ratios(chain.points, log_densities, MOTIONS))
    samples = torch.stack(samples).flatten(0, 1)[:, None]  # one order: every chain's samples
    estimate = order_bound.order_log_ratios(samples)[0]
    per_chain = samples[:, 0].reshape(20, 2000, 3).exp().mean(0)  # each chain's own mean
    error = per_chain.std(0) / per_chain.mean(0) / math.sqrt(2000)  # of the log
    tolerance = 4 * torch.hypot(error, reference_error)
    assert bool((abs(estimate - reference)[1:] < tolerance[1:]).all())
    mistake = exact.mean(0)  # the log of the mean ratio is not the mean of the log ratios
    assert bool((abs(mistake - reference)[1:] > tolerance[1:]).all())


def test_the_mixing_check_passes_independent_draws_and_fails_a_chain_that_stays():
    rng = torch.Generator().manual_seed(5)
    draws = torch.randn(400, 2000, 3, generator=rng, dtype=torch.float64)
    truth = torch.randn(2000, 3, generator=rng, dtype=torch.float64)
    assert abs(order_bound.mixed_fraction(draws, truth) - 0.5) < 0.03
    stuck = truth[None] + 0.3 + 0.01 * draws[:50]  # near the start, off to one side
    assert order_bound.mixed_fraction(stuck, truth) == 0.0


def test_the_script_runs_from_the_command_line(tmp_path):
    script = Path(__file__).resolve().parent.parent / "order_bound.py"
    args = ["--n", "12", "--sets", "2", "--sweeps", "8", "--burn", "3", "--search", "20000"]
    done = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "| the order |" in done.stdout and "Has the chain mixed?" in done.stdout
    bad = subprocess.run([sys.executable, str(script), "--sweeps", "5", "--burn", "5"],
                         capture_output=True, text=True)  # fmt: skip
    assert bad.returncode == 2 and "--burn" in bad.stderr


def test_the_batched_motion_moves_each_set_as_conformal_motion_does():
    """``motion`` restates ``motions.conformal_motion`` for a batch of sets, each with its
    own shift, rapidity and direction: along x_1 it agrees with it, and its log volume change
    with minus the log of ``motion_density`` at the image; turned, it commutes with turning."""
    rng = np.random.default_rng(7)
    points = torch.tensor(np.stack([uniform_diamond(30, 4, rng) for _ in range(3)]))
    shift = torch.tensor([0.3, -0.5, 0.0], dtype=torch.float64)
    rapidity = torch.tensor([0.4, 0.0, -0.9], dtype=torch.float64)
    along_x1 = torch.tensor([[1.0, 0.0, 0.0]]).expand(3, 3).double()
    moved, log_volume = order_bound.motion(points, shift, along_x1, rapidity)
    for b in range(3):
        expected = conformal_motion(points[b].numpy(), float(shift[b]), float(rapidity[b]))
        np.testing.assert_allclose(moved[b].numpy(), expected, atol=1e-10)
        density = motion_density(expected, float(shift[b]), float(rapidity[b]))
        np.testing.assert_allclose(log_volume[b].numpy(), -np.log(density), atol=1e-10)
    axis = torch.tensor([[0.0, 0.6, 0.8]], dtype=torch.float64).expand(3, 3)
    angle = torch.full((3,), 1.1, dtype=torch.float64)
    turned = order_bound.rotation(points, axis, angle)
    unit_x1 = torch.tensor([[[0.0, 1.0, 0.0, 0.0]]], dtype=torch.float64).expand(3, 1, 4)
    direction = order_bound.rotation(unit_x1, axis, angle)[:, 0, 1:]
    moved_turned, turned_volume = order_bound.motion(turned, shift, direction, rapidity)
    np.testing.assert_allclose(moved_turned, order_bound.rotation(moved, axis, angle), atol=1e-10)
    np.testing.assert_allclose(turned_volume, log_volume, atol=1e-10)
