"""Checks of settings: the field metadata that checks one value (:func:`value_check`). Those of
several values of a section are its ``validate`` method's; those of settings of different
sections that exclude each other are :mod:`.across`'s."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def value_check(predicate: Callable[[Any], bool], expected: str) -> dict:
    """A field's metadata: ``predicate`` holds for every valid value; ``expected`` says what
    that is in the error of one that is not."""
    return {"check": predicate, "expected": expected}


POSITIVE = value_check(lambda v: v > 0, "a positive number")
NON_NEGATIVE = value_check(lambda v: v >= 0, "a number >= 0")
PROBABILITY = value_check(lambda v: 0 <= v < 1, "a number in [0, 1)")
