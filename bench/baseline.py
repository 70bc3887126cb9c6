"""The analytic bar for the dimension classifier: the Myrheim-Meyer ordering-fraction estimator.

Classifies the test split of a config's causal-set dataset by the dimension whose expected
ordering fraction is nearest the measured one, with no training, so a GNN's test accuracy on the
same split can be read against it.

    python bench/baseline.py [CONFIG] [key=value ...]
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import QuantumGravPy as qg  # noqa: E402
from QuantumGravPy.data import dataset_from_config  # noqa: E402


def ordering_fraction(graph) -> float:
    # column 0 is |past| / N; its mean is relations / N**2
    n = graph.num_nodes
    return float(graph.x[:, 0].mean()) * 2 * n / (n - 1)


def main() -> None:
    args = sys.argv[1:]
    path = args.pop(0) if args and "=" not in args[0] else str(ROOT / "configs" / "train.yaml")
    config = qg.load_config(path, args)
    dataset = dataset_from_config(config.data)
    _, _, test = qg.split_dataset(dataset, config.data.split, config.data.seed)
    dims = config.data.dimensions
    correct = 0
    for graph in test:
        estimate = qg.myrheim_meyer_dimension(ordering_fraction(graph))
        guess = min(range(len(dims)), key=lambda k: abs(dims[k] - estimate))
        correct += guess == int(graph.y)
    print(f"Myrheim-Meyer estimator: test accuracy {correct / len(test):.4f} on {len(test)} graphs")


if __name__ == "__main__":
    main()
