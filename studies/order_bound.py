"""Curvature: the Bayes accuracy of the causal order itself, by sampling its embeddings.

python studies/order_bound.py [--n N] [--sets M] [--sweeps T] [--burn B]

studies/curvature_bound.py bounds every model of the order by what the points themselves show.
The order shows less: it fixes each point only to the cell in which none of its relations
changes. A class's likelihood of an order is its density integrated over every embedding of
the order in the diamond, so a curved class's likelihood ratio to the flat one is the mean,
over the flat embeddings of the order, of the points' likelihood ratio (each curved class moved
back by its best motion, as in studies/curvature_bound.py). A Markov chain draws the flat
embeddings: for each element in turn a line through it in a random direction, the segment of
that line on which no relation changes (between the nearest roots of the quadratics for the
other elements' light cones, and the tips' for the diamond's sides), and a uniform point of the
segment (hit-and-run, exact for the uniform density); every fifth sweep a random shift, boost
and rotation of all points, which keep the order, accepted with the motion's volume change. On
the same sets, for the points and for the order: the accuracy of deciding by the likelihoods
(the order's is a model of the order, so no more than what one can reach) and the accuracy the
likelihoods expect, the mean of the largest posterior (the Bayes accuracy, once the chain has
mixed; the two halves of the chain's samples are compared to see whether it has).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from curvature_bound import (  # noqa: E402
    best_motion,
    class_log_densities,
    curved_points,
    pulled_back,
)
from motions import conformal_motion  # noqa: E402

import QuantumGravPy as qg  # noqa: E402
from QuantumGravPy.physics import uniform_diamond  # noqa: E402
from QuantumGravPy.physics.curved import log_conformal_factor  # noqa: E402

CURVED = ("de_sitter", "anti_de_sitter")


def relations(points: torch.Tensor) -> torch.Tensor:
    """``[B, N, N]``: +1 where j is in the future of i, -1 in its past, 0 spacelike."""
    dt = points[:, None, :, 0] - points[:, :, None, 0]
    dr = (points[:, None, :, 1:] - points[:, :, None, 1:]).norm(dim=-1)
    return (dt > dr).to(torch.int8) - (-dt > dr).to(torch.int8)


def inside(points: torch.Tensor) -> torch.Tensor:
    return points[..., 0].abs() + points[..., 1:].norm(dim=-1) < 1.0


def segment(points: torch.Tensor, i: int, direction: torch.Tensor):
    """The parameters ``(low, high)`` [B] between which ``points[:, i] + s * direction`` keeps
    every relation of element i and stays in the diamond: the nearest roots, on either side of
    0, of the squared interval to every other element and to both tips (the diamond is the
    future of one tip and the past of the other), a quadratic in s."""
    d = points.shape[-1]
    tips = torch.zeros(2, d, dtype=points.dtype)
    tips[:, 0] = torch.tensor([-1.0, 1.0])
    others = torch.cat([points, tips.expand(len(points), 2, d)], dim=1)
    gap = points[:, i, None, :] - others
    v = direction[:, None, :]
    a = v[..., 0] ** 2 - (v[..., 1:] ** 2).sum(-1)
    b = 2.0 * (gap[..., 0] * v[..., 0] - (gap[..., 1:] * v[..., 1:]).sum(-1))
    c = gap[..., 0] ** 2 - (gap[..., 1:] ** 2).sum(-1)
    root = torch.sqrt(torch.clamp(b * b - 4.0 * a * c, min=0.0))
    q = -0.5 * (b + torch.where(b >= 0, root, -root))  # the roots q / a and c / q, stably
    roots = torch.stack([q / a, c / q], dim=-1)
    real = ((b * b - 4.0 * a * c) >= 0)[..., None] & torch.isfinite(roots)
    real[:, i] = False  # the element itself
    inf = torch.tensor(math.inf, dtype=points.dtype)
    high = torch.where(real & (roots > 0), roots, inf).flatten(1).min(1).values
    low = torch.where(real & (roots < 0), roots, -inf).flatten(1).max(1).values
    return low, high


def motion(points: torch.Tensor, shift: torch.Tensor, direction: torch.Tensor, rapidity):
    """Each set's points [B, N, d] moved by its own shift [B] and hyperbolic boost of
    ``rapidity`` [B] along the unit ``direction`` [B, d-1] (``motions.conformal_motion``,
    which boosts along x_1 only), and the log of the volume change at each point."""
    d = points.shape[-1]
    t, space = points[..., 0], points[..., 1:]
    r = space.norm(dim=-1)
    rho = torch.atanh(t + r) - torch.atanh(t - r)
    log_factor = 0.5 * torch.log((1 - (t - r) ** 2) * (1 - (t + r) ** 2))
    y0, y = torch.cosh(rho), torch.sinh(rho)[..., None] * space / r[..., None]
    n = direction[:, None, :]
    along = (y * n).sum(-1)
    sinh, cosh = torch.sinh(rapidity)[:, None], torch.cosh(rapidity)[:, None]
    y = y + ((sinh * y0 + cosh * along) - along)[..., None] * n
    size = y.norm(dim=-1)
    tau = torch.atanh(t + r) + torch.atanh(t - r) + shift[:, None]
    rho = torch.asinh(size)
    u, v = torch.tanh((tau - rho) / 2), torch.tanh((tau + rho) / 2)
    out = torch.empty_like(points)
    out[..., 0] = (u + v) / 2
    out[..., 1:] = y / size[..., None] * ((v - u) / 2)[..., None]
    return out, d * (0.5 * torch.log((1 - u**2) * (1 - v**2)) - log_factor)


def rotation(points: torch.Tensor, axis: torch.Tensor, angle: torch.Tensor) -> torch.Tensor:
    """Each 4D set's points turned about its own unit spatial ``axis`` [B, 3] by ``angle``."""
    k, space = axis[:, None, :], points[..., 1:]
    cos, sin = torch.cos(angle)[:, None, None], torch.sin(angle)[:, None, None]
    turned = (
        space * cos
        + torch.linalg.cross(k.expand_as(space), space, dim=-1) * sin
        + k * (k * space).sum(-1, keepdim=True) * (1 - cos)
    )
    return torch.cat([points[..., :1], turned], dim=-1)


class Embeddings:
    """A Markov chain over the embeddings of each set's order in the diamond, uniform among
    them (what the flat class puts on the embeddings of an order). No step changes a relation,
    so the chain reaches every embedding only if those of an order are connected: so in 4D, we
    assume (not so in 2D, where two unrelated points never swap sides)."""

    def __init__(self, points: torch.Tensor, generator: torch.Generator):
        self.points, self.order = points.clone(), relations(points)
        self.generator = generator
        self.steps = {"shift": 0.05, "boost": 0.05, "rotation": 0.3}

    def _random(self, *shape):
        return torch.randn(*shape, generator=self.generator, dtype=self.points.dtype)

    def _unit(self, d: int) -> torch.Tensor:
        v = self._random(len(self.points), d)
        return v / v.norm(dim=-1, keepdim=True)

    def sweep(self) -> None:
        """Every element once, in a random order: hit-and-run within its cell (a step that
        rounding would take across a light cone, within about 1e-16 of it, is not taken)."""
        count, n, d = self.points.shape
        for i in torch.randperm(n, generator=self.generator).tolist():
            direction = self._unit(d)
            low, high = segment(self.points, i, direction)
            s = low + (high - low) * torch.rand(count, generator=self.generator, dtype=low.dtype)
            moved = self.points[:, i] + s[:, None] * direction
            dt = self.points[..., 0] - moved[:, None, 0]
            dr = (self.points[..., 1:] - moved[:, None, 1:]).norm(dim=-1)
            row = (dt > dr).to(torch.int8) - (-dt > dr).to(torch.int8)
            row[:, i] = 0
            keep = (row == self.order[:, i]).all(1) & inside(moved)
            self.points[keep, i] = moved[keep]

    def move(self, adapt: bool) -> None:
        """A random shift, boost and rotation of each set's points, each accepted with its
        volume change (a rotation has none); ``adapt`` tunes their scales towards 35% taken."""
        count, _, d = self.points.shape
        for kind, scale in self.steps.items():
            z = self._random(count) * scale
            if kind == "rotation":
                moved, log_volume = rotation(self.points, self._unit(d - 1), z), None
            else:
                none = torch.zeros(count, dtype=z.dtype)
                shift, rapidity = (z, none) if kind == "shift" else (none, z)
                moved, log_volume = motion(self.points, shift, self._unit(d - 1), rapidity)
            take = inside(moved).all(-1)
            if log_volume is not None:
                u = torch.rand(count, generator=self.generator, dtype=z.dtype)
                take &= u.log() < log_volume.sum(-1)
            if take.any():  # a motion keeps the order; in floating point, make sure
                kept = (relations(moved[take]) == self.order[take]).flatten(1).all(-1)
                take[take.clone()] = kept
            self.points[take] = moved[take]
            if adapt:
                self.steps[kind] *= math.exp(0.5 * (take.double().mean().item() - 0.35))


def draw_sets(n: int, sets: int, d: int, h: float, motions: dict, seed: int):
    """``sets`` sets of n points of each class (flat, de Sitter, anti-de Sitter, interleaved),
    each curved set moved back by its class's best motion; and their classes."""
    rng = np.random.default_rng(seed)
    points, classes = [], []
    for _ in range(sets):
        for c, spacetime in enumerate((None, *CURVED)):
            if spacetime is None:
                x = uniform_diamond(n, d, rng)
            else:
                x = curved_points(n, d, log_conformal_factor(spacetime, h), rng)
                x = conformal_motion(x, *(-m for m in motions[spacetime]))
            points.append(x)
            classes.append(c)
    return torch.tensor(np.stack(points)), torch.tensor(classes)


def log_ratios(points: torch.Tensor, log_densities, motions: dict) -> torch.Tensor:
    """[B, 3]: each class's log-likelihood of each set's points over the flat one's (each
    curved class moved back by its best motion: its density pulled back by that motion)."""
    x = points.reshape(-1, points.shape[-1]).numpy()
    out = [np.zeros(len(points))]
    for k, spacetime in enumerate(CURVED, start=1):
        t, r, x1, log_j = pulled_back(x, *(np.array([m]) for m in motions[spacetime]))
        per_point = (log_densities(t, r, x1)[k] + log_j).reshape(len(points), -1)
        out.append(per_point.sum(-1))
    return torch.tensor(np.stack(out, axis=1))


def order_log_ratios(samples: torch.Tensor) -> torch.Tensor:
    """The order's log-likelihood ratios from the points' ones over its flat embeddings
    [T, B, 3]: ``log mean exp``."""
    return torch.logsumexp(samples, dim=0) - math.log(len(samples))


def mixed_fraction(samples: torch.Tensor, truth: torch.Tensor) -> float:
    """The fraction of sets [T, B, 3] whose own points' log-likelihood ratios (``truth`` [B,
    3]) rank in the middle half of the chain's samples (0.5 when the chain has mixed, for sets
    of the chain's own class), over both curved classes."""
    rank = (samples[..., 1:] < truth[None, :, 1:]).double().mean(0)
    return ((rank > 0.25) & (rank < 0.75)).double().mean().item()


def accuracies(log_ratio: torch.Tensor, classes: torch.Tensor) -> tuple[float, float]:
    """The accuracy of deciding by the likelihoods, and the one they expect."""
    decided = (log_ratio.argmax(1) == classes).double().mean().item()
    return decided, torch.softmax(log_ratio, dim=1).max(1).values.mean().item()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    config = qg.load_config(ROOT / "configs" / "curvature.yaml")
    parser.add_argument("--h", type=float, default=config.data.h, help="curvature (the config's)")
    parser.add_argument("--n", type=int, default=256, help="elements of each set")
    parser.add_argument("--sets", type=int, default=50, help="sets of each class")
    parser.add_argument("--sweeps", type=int, default=3000, help="sweeps of the chain")
    parser.add_argument("--burn", type=int, default=1000, help="sweeps left out at the start")
    parser.add_argument("--seed", type=int, default=21)
    parser.add_argument("--search", type=int, default=200_000, help="points to find the motions")
    args = parser.parse_args()
    if not 0 < args.burn < args.sweeps - 1:
        parser.error("--burn must be positive and at least 2 sweeps short of --sweeps")
    torch.set_default_dtype(torch.float64)
    d = config.data.dimensions[0]
    search = uniform_diamond(args.search, d, np.random.default_rng(0))
    motions = {spacetime: tuple(best_motion(spacetime, args.h, search)) for spacetime in CURVED}
    log_densities = class_log_densities(d, args.h)
    points, classes = draw_sets(args.n, args.sets, d, args.h, motions, args.seed)
    chain = Embeddings(points, torch.Generator().manual_seed(args.seed))
    samples, start = [], time.perf_counter()
    for sweep in range(args.sweeps):
        chain.sweep()
        if sweep % 5 == 0:
            chain.move(adapt=sweep < args.burn)
        if sweep >= args.burn:
            samples.append(log_ratios(chain.points, log_densities, motions))
        if (sweep + 1) % 100 == 0:
            elapsed = time.perf_counter() - start
            print(f"sweep {sweep + 1} of {args.sweeps}, {elapsed:.0f} s", file=sys.stderr)
    broken = (relations(chain.points) != chain.order).flatten(1).any(1)
    broken |= ~inside(chain.points).all(1)
    if broken.any():
        raise RuntimeError(f"the chain changed the order of {int(broken.sum())} sets")
    samples = torch.stack(samples)
    half = len(samples) // 2
    order = order_log_ratios(samples)
    first, second = order_log_ratios(samples[:half]), order_log_ratios(samples[half:])
    points_acc, points_expected = accuracies(log_ratios(points, log_densities, motions), classes)
    order_acc, order_expected = accuracies(order, classes)
    error = math.sqrt(points_acc * (1 - points_acc) / (3 * args.sets))
    print(
        f"{d}D diamond, h = {args.h}, {args.n} elements; {args.sets} sets of each class; "
        f"{args.sweeps} sweeps, the last {args.sweeps - args.burn} kept. "
        f"A standard error of about {error:.3f} on each accuracy.\n"
    )
    print("| what is known | accuracy of deciding by it | the accuracy its likelihoods expect |")
    print("|---|---|---|")
    print(f"| the points | {points_acc:.3f} | {points_expected:.3f} |")
    print(f"| the order | {order_acc:.3f} | **{order_expected:.3f}** |")
    gap = (first - second)[:, 1:].abs().mean().item()
    truth = log_ratios(points, log_densities, motions)
    middle = mixed_fraction(samples[:, classes == 0], truth[classes == 0])
    spread = samples[..., 1:].std(0).mean().item()
    print(
        f"\nThe two halves of the chain's samples give each set's log-likelihood ratios within "
        f"{gap:.2f} of each other on average; the points' and the order's differ by "
        f"{(order - truth)[:, 1:].abs().mean().item():.2f}. Has the chain mixed? A flat set's "
        "own points are one more flat embedding of its order, so among the chain's samples their "
        "log-likelihood ratio ranks uniformly once the chain has forgotten them: in the middle "
        f"half of the samples for half the flat sets. Here: {middle:.2f}. Among the embeddings "
        "of one order the points' log-likelihood ratios spread by a standard deviation of "
        f"{spread:.2f} (the chain's samples, a mean over sets; less than it would be mixed)."
    )


if __name__ == "__main__":
    main()
