"""Write the generated blocks of the documentation: the configuration reference in config.md
(from the comments in QuantumGravPy/config/schema.py) and the table of strategies in
distributed.md (from the docstrings of the classes in QuantumGravPy/parallel/strategies/).

    python docs/scripts/reference.py

Tests check that both are current (tests/test_docs.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from QuantumGravPy.config import docs  # noqa: E402
from QuantumGravPy.parallel import strategies  # noqa: E402

BLOCKS = {
    "config.md": docs.reference_markdown,
    "distributed.md": strategies.reference_markdown,
}


def main() -> int:
    for name, make in BLOCKS.items():
        path = ROOT / "docs" / name
        changed = docs.update(path, make())
        print(f"{path.relative_to(ROOT)}: {'updated' if changed else 'already current'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
