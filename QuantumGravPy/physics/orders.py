"""Partial orders given as matrices: closing and reducing them, checking them, labelling them.

A causal set on disk may come as its causal matrix (every relation) or as its link matrix
(the Hasse diagram); either determines the other. Both are boolean [N, N] matrices with
``m[i, j]`` true when i precedes j.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor


def _compose(a: Tensor, b: Tensor) -> Tensor:
    """Boolean matrix product: ``[i, j]`` true when some k has a[i, k] and b[k, j].

    A sum of products of 0 and 1 is positive exactly when one product is, and never rounds to
    0, so the fastest type the hardware multiplies in answers it exactly.
    """
    dtype = count_dtype(a.device)
    return torch.matmul(a.to(dtype), b.to(dtype)) > 0


def count_dtype(device: torch.device) -> torch.dtype:
    """bfloat16 where matrix products in it are fast (CUDA; CPUs with AVX512-BF16 or AMX),
    else float32: for 0/1 matrices, whether an entry of the product is 0 is the same in both."""
    if device.type == "cuda" or (device.type == "cpu" and _cpu_has_bf16()):
        return torch.bfloat16
    return torch.float32


@functools.cache
def _cpu_has_bf16() -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            flags = f.read()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def transitive_closure(links: Tensor) -> Tensor:
    """Every relation implied by ``links`` ([N, N] or [B, N, N], bool), by repeated squaring."""
    relations = links.bool()
    while True:
        closed = relations | _compose(relations, relations)
        if torch.equal(closed, relations):
            return relations
        relations = closed


def transitive_reduction(relations: Tensor) -> Tensor:
    """The links of a transitively closed ``relations`` ([N, N] or [B, N, N], bool): related
    pairs with nothing in between (the count of elements between i and j is (C C)[i, j])."""
    relations = relations.bool()
    return relations & ~_compose(relations, relations)


def order_violation(relations: Tensor) -> str | None:
    """Why ``relations`` ([N, N], bool) is not a strict partial order, or None if it is one."""
    n = relations.shape[-1]
    if relations.dim() != 2 or relations.shape[0] != n:
        return f"not a square matrix (shape {list(relations.shape)})"
    loops = relations.diagonal().nonzero().flatten()
    if len(loops):
        return f"element {int(loops[0])} precedes itself"
    both = (relations & relations.t()).nonzero()
    if len(both):
        i, j = both[0].tolist()
        return f"elements {i} and {j} precede each other"
    implied = _compose(relations, relations) & ~relations
    if implied.any():
        i, j = implied.nonzero()[0].tolist()
        return f"not transitively closed: {i} precedes {j} through others but not directly"
    return None


def natural_labelling(relations: Tensor) -> Tensor:
    """A permutation that puts every element after all of its past (a linear extension).

    In a strict partial order an element's past strictly contains the past of each element
    before it, so sorting by the size of the past (stably) is a natural labelling.
    """
    return torch.argsort(relations.sum(-2), stable=True)


def is_naturally_labelled(relations: Tensor) -> bool:
    """Whether every relation points to a later index (the matrix is strictly upper triangular)."""
    return not bool(relations.tril().any())
