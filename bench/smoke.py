"""``--smoke``: a benchmark on tiny inputs, to show that it still runs to its end.

Every script in bench/ takes ``--smoke``; `make bench-smoke` (``bench/report.py --smoke``, in CI)
runs them all, so a benchmark that stopped working is seen the day it stops, not at the next
full `make bench`. Its figures mean nothing: the inputs are too small to time.
"""

from __future__ import annotations

import argparse


def parse(parser: argparse.ArgumentParser, known: bool = False, **tiny) -> argparse.Namespace:
    """``parser``'s arguments, with ``tiny``'s values in place of the options' under --smoke."""
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="tiny inputs, to check that the script runs to its end (its figures mean nothing)",
    )
    args = parser.parse_known_args()[0] if known else parser.parse_args()
    unknown = [k for k in tiny if not hasattr(args, k)]
    if unknown:
        raise TypeError(f"--smoke sets {unknown}, which the parser does not have")
    if args.smoke:
        for key, value in tiny.items():
            setattr(args, key, value)
    return args
