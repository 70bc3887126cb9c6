"""Curvature: a ceiling on the causal order's Bayes accuracy, below the points' one.

python studies/order_ceiling.py [--sizes N ...] [--sets M ...] [--steps K1 K2] [--chains C]

studies/curvature_bound.py bounds every model of the order by the Bayes accuracy of the points;
studies/order_bound.py tries for the order's own and needs a chain that mixes. This script needs
no mixing. Let Y be the order together with X_K, the points after K steps of a Markov chain
that keeps the order (studies/order_bound.py's hit-and-run within each element's cell, and the
diamond's shifts, boosts and rotations), started at the points, K drawn uniformly from K1..K2
and not told. Y is made from the points and from randomness that knows nothing of the class,
and the order is read off Y, so the Bayes accuracy of the order is at most Y's, and Y's at most
the points', whatever K1, K2 and however little the chain mixes. The longer the chain, the more
of the points' positions X_K has forgotten, and the closer Y's comes to the order's.

Y's Bayes accuracy can be computed because each step of the chain is its own adjoint for the
uniform density on the order's embeddings (a sweep over the elements in random order, or a
motion accepted with its volume change, chosen at random each step), so the kernel Q from X_0 to
X_K is symmetric, and a class's likelihood of Y = y is, up to a factor the classes share,
int p_c(x) Q(x, y) dx = int Q(y, x) p_c(x) dx: the class's density averaged over chains that
start at y, at a uniform step between K1 and K2. C such chains a set estimate it; the mean, over
sets of all three classes, of the largest posterior estimates the Bayes accuracy of Y. The
chains' noise biases that estimate (the largest of noisy posteriors, each a ratio of noisy
likelihoods), most likely upwards; the same estimate from one chain a set, beside it, shows the
size of that bias, which shrinks as the chains grow in number.

The points' Bayes accuracy on the same sets, beside it, and on P further sets (cheap: no
chains), gives the ceiling as the points' accuracy plus the paired difference, whose standard
error is far smaller than either accuracy's. The classes are those of the other two scripts:
flat, and de Sitter and anti-de Sitter each moved back by its best conformal motion (which
changes no order).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch
from scipy.special import softmax

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

try:
    import numba
except ImportError:  # pragma: no cover - the studies extra brings it
    sys.exit(
        "studies/order_ceiling.py needs numba, in the 'studies' extra: pip install -e '.[studies]'"
    )

from curvature_bound import best_motion, class_log_densities  # noqa: E402
from order_bound import CURVED, draw_sets, inside, log_ratios, motion, relations, rotation  # noqa: E402

import QuantumGravPy as qg  # noqa: E402
from QuantumGravPy.physics import uniform_diamond  # noqa: E402

SWEEP = 0.8  # the chance that a step is a sweep; otherwise one motion of a random kind
KINDS = ("shift", "boost", "rotation")


@numba.njit(parallel=True, error_model="numpy", cache=True)
def _sweep(points, order, active, permutation, directions, uniforms):  # pragma: no cover
    """Hit-and-run for every element of each active set [B, N, d], in the order ``permutation``
    [B, N]: along the unit ``directions`` [B, N, d], to the point ``uniforms`` [B, N] of the way
    across the segment on which none of the element's relations changes and it stays in the
    diamond (between the nearest roots, either side, of the squared interval to every other
    element and to both tips). A move that rounding would take across a light cone is checked
    against ``order`` [B, N, N] (+1 where j is in i's future) and not taken."""
    sets, n, d = points.shape
    for b in numba.prange(sets):
        if not active[b]:
            continue
        for step in range(n):
            i = permutation[b, step]
            low, high = -np.inf, np.inf
            for j in range(n + 2):
                if j == i:
                    continue
                a = directions[b, step, 0] ** 2
                half_b = 0.0
                c = 0.0
                for k in range(d):
                    if j < n:
                        gap = points[b, i, k] - points[b, j, k]
                    elif k == 0:
                        gap = points[b, i, 0] - (-1.0 if j == n else 1.0)  # the tips
                    else:
                        gap = points[b, i, k]
                    v = directions[b, step, k]
                    if k == 0:
                        half_b += gap * v
                        c += gap * gap
                    else:
                        a -= v * v
                        half_b -= gap * v
                        c -= gap * gap
                bq = 2.0 * half_b
                disc = bq * bq - 4.0 * a * c
                if disc < 0.0:
                    continue
                root = math.sqrt(disc)
                q = -0.5 * (bq + root if bq >= 0.0 else bq - root)
                for r in (q / a, c / q):  # the two roots, stably
                    if not math.isfinite(r):
                        continue
                    if 0.0 < r < high:
                        high = r
                    elif low < r < 0.0:
                        low = r
            s = low + (high - low) * uniforms[b, step]
            moved = np.empty(d)
            radius = 0.0
            for k in range(d):
                moved[k] = points[b, i, k] + s * directions[b, step, k]
                if k > 0:
                    radius += moved[k] ** 2
            if abs(moved[0]) + math.sqrt(radius) >= 1.0:
                continue
            keep = True
            for j in range(n):
                if j == i:
                    continue
                dt = points[b, j, 0] - moved[0]
                dr = 0.0
                for k in range(1, d):
                    dr += (points[b, j, k] - moved[k]) ** 2
                dr = math.sqrt(dr)
                relation = 1 if dt > dr else (-1 if -dt > dr else 0)
                if relation != order[b, i, j]:
                    keep = False
                    break
            if keep:
                for k in range(d):
                    points[b, i, k] = moved[k]


class Chain:
    """Markov chains over the embeddings of each set's order [B, N, d] (numpy, float64), each
    step its own adjoint for the uniform density on them: for each set on its own, a sweep
    with probability ``sweeps``, else a shift, boost or rotation (one at random) of the given
    scale, taken with its volume change."""

    def __init__(self, points: np.ndarray, rng: np.random.Generator, scales: dict,
                 sweeps: float = SWEEP):  # fmt: skip
        self.sweeps = sweeps  # the chance of a sweep (1: sweeps alone; 0: motions alone)
        self.points = np.ascontiguousarray(points, dtype=np.float64).copy()
        self.order = relations(torch.from_numpy(self.points)).numpy()
        self.rng, self.scales = rng, dict(scales)
        self.taken = {kind: [0, 0] for kind in KINDS}

    def step(self) -> None:
        count, n, d = self.points.shape
        choice = self.rng.random(count)
        permutation = self.rng.permuted(np.tile(np.arange(n), (count, 1)), axis=1)
        directions = self.rng.standard_normal((count, n, d))
        directions /= np.linalg.norm(directions, axis=-1, keepdims=True)
        _sweep(self.points, self.order, choice < self.sweeps, permutation, directions,
               self.rng.random((count, n)))  # fmt: skip
        share = (choice - self.sweeps) / max(1.0 - self.sweeps, 1e-12)
        kind = np.clip((share * len(KINDS)).astype(int), 0, len(KINDS) - 1)
        for k, name in enumerate(KINDS):
            sets = np.flatnonzero((choice >= self.sweeps) & (kind == k))
            if len(sets):
                self._motion(sets, name)

    def _motion(self, sets: np.ndarray, kind: str) -> None:
        x = torch.from_numpy(self.points[sets])
        z = torch.from_numpy(self.rng.standard_normal(len(sets)) * self.scales[kind])
        axis = torch.from_numpy(self.rng.standard_normal((len(sets), x.shape[-1] - 1)))
        axis /= axis.norm(dim=-1, keepdim=True)
        if kind == "rotation":
            moved, take = rotation(x, axis, z), torch.ones(len(sets), dtype=torch.bool)
        else:
            none = torch.zeros_like(z)
            shift, rapidity = (z, none) if kind == "shift" else (none, z)
            moved, log_volume = motion(x, shift, axis, rapidity)
            u = torch.from_numpy(self.rng.random(len(sets)))
            take = u.log() < log_volume.sum(-1)
        take &= inside(moved).all(-1)
        if take.any():  # a motion keeps the order; in floating point, make sure
            same = relations(moved[take]) == torch.from_numpy(self.order[sets[take.numpy()]])
            take[take.clone()] = same.flatten(1).all(-1)
        self.points[sets[take.numpy()]] = moved[take].numpy()
        self.taken[kind][0] += int(take.sum())
        self.taken[kind][1] += len(sets)


def tuned_scales(n: int, d: int, seed: int, steps: int = 150) -> dict:
    """Motion scales taking about 35% of moves, tuned on flat sets of their own (so the chain
    that the ceiling uses is fixed before it sees a set)."""
    rng = np.random.default_rng(seed)
    points = np.stack([uniform_diamond(n, d, rng) for _ in range(16)])
    chain = Chain(points, rng, {"shift": 0.05, "boost": 0.05, "rotation": 0.3})
    for _ in range(steps):
        for kind in KINDS:
            chain.taken[kind] = [0, 0]
            chain._motion(np.arange(len(points)), kind)
            taken, tried = chain.taken[kind]
            chain.scales[kind] *= math.exp(0.5 * (taken / tried - 0.35))
    chain.scales["rotation"] = min(chain.scales["rotation"], math.pi)  # none is refused
    return chain.scales


def _check(chain: Chain) -> None:
    x = torch.from_numpy(chain.points)
    broken = (relations(x).numpy() != chain.order).reshape(len(x), -1).any(1)
    broken |= ~inside(x).all(1).numpy()
    if broken.any():
        raise RuntimeError(f"the chain changed the order of {int(broken.sum())} sets")


def ceiling(
    points: torch.Tensor, steps: tuple[int, int], chains: int, log_densities, motions: dict,
    scales: dict, rng: np.random.Generator, report=print,
) -> dict:  # fmt: skip
    """For each set [B, N, d]: the points' log-likelihood ratios [B, 3], and Y's, from all
    ``chains`` continuations [B, 3] and from each alone [C, B, 3]."""
    first, last = steps
    count = len(points)
    chain = Chain(points.numpy(), rng, scales)
    stop = rng.integers(first, last + 1, size=count)  # K of each set
    y = chain.points.copy()
    start = time.perf_counter()
    for k in range(1, last + 1):
        chain.step()
        y[stop == k] = chain.points[stop == k]
        if k % 100 == 0:
            report(f"  to X_K: step {k} of {last}, {time.perf_counter() - start:.0f} s")
    _check(chain)
    start = time.perf_counter()
    chain = Chain(np.repeat(y, chains, axis=0), rng, scales)  # set b's chains are b*C .. b*C+C-1
    total = np.full((count * chains, 3), -np.inf)
    for k in range(1, last + 1):
        chain.step()
        if k >= first:
            x = torch.from_numpy(chain.points)
            total = np.logaddexp(total, log_ratios(x, log_densities, motions).numpy())
        if k % 100 == 0:
            report(f"  from X_K: step {k} of {last}, {time.perf_counter() - start:.0f} s")
    _check(chain)
    each = total.reshape(count, chains, 3).transpose(1, 0, 2)
    together = np.logaddexp.reduce(each, axis=0)
    return {"points": log_ratios(points, log_densities, motions).numpy(),
            "together": together, "each": each, "taken": chain.taken}  # fmt: skip


def expected(log_ratio: np.ndarray) -> np.ndarray:
    """Each set's largest posterior (equal priors): the accuracy the likelihoods expect."""
    return softmax(log_ratio, axis=-1).max(-1)


def mean_error(values: np.ndarray) -> tuple[float, float]:
    return float(values.mean()), float(values.std(ddof=1) / math.sqrt(len(values)))


def report(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def row(n: int, sets: int, args, motions: dict, log_densities, report) -> str:
    """One size's line of the table."""
    d, (first, last) = 4, args.steps
    scales = tuned_scales(n, d, args.seed + n + 1)
    points, classes = draw_sets(n, sets, d, args.h, motions, args.seed + n)
    start = time.perf_counter()
    out = ceiling(points, (first, last), args.chains, log_densities, motions, scales,
                  np.random.default_rng(args.seed + n + 2), report)  # fmt: skip
    minutes = (time.perf_counter() - start) / 60
    on_sets = expected(out["points"])
    together = expected(out["together"])
    alone = np.mean([expected(e) for e in out["each"]], axis=0)
    many, _ = draw_sets(n, args.points, d, args.h, motions, args.seed + n + 3)
    bulk = mean_error(expected(log_ratios(many, log_densities, motions).numpy()))
    gap, gap_alone = mean_error(together - on_sets), mean_error(alone - on_sets)
    value, error = bulk[0] + gap[0], math.hypot(bulk[1], gap[1])
    decided = (out["together"].argmax(1) == classes.numpy()).mean()
    taken = ", ".join(f"{k} {t / max(c, 1):.0%}" for k, (t, c) in out["taken"].items())
    report(f"{n} elements: {minutes:.0f} min; motions {scales}, taken {taken}")
    return (
        f"| {n} | {bulk[0]:.4f} ({bulk[1]:.4f}) | {3 * sets} | {on_sets.mean():.4f} | "
        f"{together.mean():.4f} ({gap[0]:+.4f}, {gap[1]:.4f}) | {alone.mean():.4f} "
        f"({gap_alone[0]:+.4f}) | **{value:.4f}** ({error:.4f}) | {value + 3 * error:.4f} | "
        f"{decided:.3f} | {minutes:.0f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    config = qg.load_config(ROOT / "configs" / "curvature.yaml")
    parser.add_argument("--h", type=float, default=config.data.h, help="curvature (the config's)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[256, 512], metavar="N")
    parser.add_argument(
        "--sets", type=int, nargs="+", default=[300, 150], metavar="M",
        help="sets of each class with chains, one number for each size",
    )  # fmt: skip
    parser.add_argument("--steps", type=int, nargs=2, default=[500, 1000], metavar=("K1", "K2"))
    parser.add_argument("--chains", type=int, default=2, help="continuations of each set")
    parser.add_argument("--points", type=int, default=20000, help="sets of each class, points")
    parser.add_argument("--seed", type=int, default=31)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--search", type=int, default=200_000, help="points to find the motions")
    args = parser.parse_args()
    first, last = args.steps
    if not 1 <= first <= last:
        parser.error("--steps K1 K2 needs 1 <= K1 <= K2")
    if len(args.sets) != len(args.sizes):
        parser.error(f"--sets needs one number for each of the {len(args.sizes)} --sizes")
    if args.chains < 2 or min(args.sets) < 2 or min(args.sizes) < 2:
        parser.error("--chains, --sets and --sizes need 2 or more")
    if list(config.data.dimensions) != [4]:
        parser.error("the chain's rotations are those of 4D; configs/curvature.yaml is not 4D")
    numba.set_num_threads(min(args.threads, numba.config.NUMBA_NUM_THREADS))
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float64)
    search = uniform_diamond(args.search, 4, np.random.default_rng(0))
    motions = {spacetime: tuple(best_motion(spacetime, args.h, search)) for spacetime in CURVED}
    log_densities = class_log_densities(4, args.h)
    print(
        f"4D diamond, h = {args.h}. K uniform in {first}..{last}; {args.chains} chains a set "
        f"from X_K; {args.points:,} further sets of each class for the points alone. The "
        "Bayes accuracies (expected: the mean of the largest posterior), each with its standard "
        "error; Y's with its difference from the points' on the same sets and that "
        "difference's standard error. The ceiling is the points' accuracy on the further sets "
        "plus that difference: no model of the order passes it but by chance; the next column "
        "adds a margin of 3 standard errors.\n"
    )
    print(
        "| elements | the points | sets with chains | the points, on them | Y | Y, one chain a "
        "set | **the ceiling** | with the margin | deciding by Y's likelihoods | minutes |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for n, sets in zip(args.sizes, args.sets, strict=True):
        print(row(n, sets, args, motions, log_densities, report), flush=True)


if __name__ == "__main__":
    main()
