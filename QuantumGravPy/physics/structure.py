"""A causal set's links, sizes of pasts and futures and natural labelling, from its causal
matrix, checked, in less than the time of one matrix product of its size.

With C the relations and Q = (C C > 0) the pairs with some element between them, the links
are C and not Q, and C is transitively closed exactly when Q holds no pair outside C, that is
when |Q| = |C| - |links|: one boolean product both checks the order and reduces it. A matrix
that is transitive and has no loops has no cycle, so its links alone then say whether it is
naturally labelled (every link pointing to a later element).

Causal sets come naturally labelled (QuantumGrav.jl writes sprinklings in time order), and then
C is strictly triangular and so is C C: the product is taken in panels of rows, each only over
the elements after the panel's first, a third of a full product's arithmetic, and every pass
over the entries (turning the product into booleans, comparing it with C, finding the links,
counting) reads only the triangle. A matrix triangular on the wrong side, or on neither, takes
the full product. The matrix is never transposed or copied as booleans: a transposed one
(Julia's column-major arrays read in Python) is read as stored, its rows and columns swapped.
On a GPU every step runs there.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

from .orders import count_dtype, order_violation


class NotAnOrder(ValueError):
    """A causal matrix that is not a strict partial order; the message says why."""


class OrderStructure(NamedTuple):
    """What a causal set's graph is made of, read from its causal matrix by :func:`order_structure`.

    Elements are in a natural labelling: ``labelling[k]`` is the matrix's element that became
    element k (None when the matrix was in one already)."""

    links: Tensor  # [2, L] int64: (i, j) for each link i -> j, i < j, sorted by i, then j
    past: Tensor  # [N] int64: elements in each element's past
    future: Tensor  # [N] int64
    labelling: Tensor | None


# Rows of a panel of the triangular product; a multiple of _PAD.
_PANEL = 512
# The product's operands are padded to a multiple of this: matrix kernels run fastest on whole
# tiles, and a library that prepares kernels per shape (oneDNN on CPUs) prepares a few dozen
# for all sizes of a file instead of one per size (a new shape costs more than its product).
_PAD = 64


def order_structure(matrix: Tensor, *, transposed: bool = False) -> OrderStructure:
    """The links, the sizes of pasts and futures and a natural labelling of the causal set whose
    causal matrix is ``matrix`` ([N, N]; nonzero where the row's element precedes the
    column's, or, with ``transposed``, the column's the row's). Raises :class:`NotAnOrder`
    naming the problem for a matrix that is not a strict partial order."""
    n = matrix.shape[-1]
    if matrix.dim() != 2 or matrix.shape[0] != n:
        raise NotAnOrder(f"not a square matrix (shape {list(matrix.shape)})")
    related = _boolean(matrix)
    if bool(related.diagonal().any()):
        raise NotAnOrder(_violation(related, transposed))
    triangular = _block_triangular(related, lower=transposed)
    parts = _product_parts(related, lower=transposed if triangular else None)
    row, col, rows_sum, cols_sum, implied = parts
    if implied != int(rows_sum.sum()) - len(row):
        raise NotAnOrder(_violation(related, transposed))
    earlier, later = (col, row) if transposed else (row, col)
    past, future = (rows_sum, cols_sum) if transposed else (cols_sum, rows_sum)
    if bool((earlier < later).all()):
        if transposed:  # found in order of the later element
            by_earlier = _stable_argsort(earlier, n)
            earlier, later = earlier[by_earlier], later[by_earlier]
        return OrderStructure(torch.stack([earlier, later]), past, future, None)
    labelling = torch.argsort(past, stable=True)  # a strictly larger past comes later
    position = torch.empty_like(labelling)
    position[labelling] = torch.arange(n, device=labelling.device)
    earlier, later = position[earlier], position[later]
    by_earlier = torch.argsort(earlier * n + later)
    links = torch.stack([earlier[by_earlier], later[by_earlier]])
    return OrderStructure(links, past[labelling], future[labelling], labelling)


class _Parts(NamedTuple):
    row: Tensor  # the links' positions in the matrix as stored
    col: Tensor
    rows_sum: Tensor  # true entries of each row, int64
    cols_sum: Tensor
    implied: int  # pairs with an element between them, |Q|


def _product_parts(related: Tensor, *, lower: bool | None) -> _Parts:
    """Q = C C > 0 and what follows from it, in panels of rows over the triangle holding the
    matrix (``lower``: below the diagonal, False: above) or over all of it (None)."""
    n, device = related.shape[0], related.device
    size = -(-n // _PAD) * _PAD
    # Rows a power of two (and a tile) apart: kernels prepared for a shape are kept per row
    # stride too, so one stride for all sizes up to the next power of two keeps them few.
    stride = (1 << (size - 1).bit_length()) + _PAD
    operand = torch.empty(size, stride, dtype=count_dtype(device), device=device)[:, :size]
    operand[n:].zero_()
    operand[:n, n:].zero_()
    operand[:n, :n] = related.view(torch.uint8)
    panel = size if lower is None else _PANEL
    rows, cols, implied = [], [], 0
    rows_sum = torch.zeros(n, dtype=torch.int64, device=device)
    cols_sum = torch.zeros(n, dtype=torch.int64, device=device)
    for start in range(0, n, panel):
        stop = min(start + panel, size)  # in the padded operand; n in the matrix
        # the columns (and inner indices) a row of the panel can have entries in
        first, last = (0, size) if lower is None else (0, stop) if lower else (start, size)
        product = torch.matmul(operand[start:stop, first:last], operand[first:last, first:last])
        height, width = min(stop, n) - start, min(last, n) - first
        between = product[:height, :width].bool()  # a positive sum of 0s and 1s stays positive
        del product
        block = related[start : start + height, first : first + width]
        linked = torch.gt(block.view(torch.uint8), between.view(torch.uint8))
        flat = _flat_nonzero(linked)
        rows.append(start + flat // width)
        cols.append(first + flat % width)
        implied += _count_all(between)
        rows_sum[start : start + height] = _count(block, 1)
        cols_sum[first : first + width] += _count(block, 0)
    return _Parts(torch.cat(rows), torch.cat(cols), rows_sum, cols_sum, implied)


def _block_triangular(related: Tensor, *, lower: bool) -> bool:
    """Whether every true entry lies in the panels' triangle: below (``lower``) or above the
    diagonal but for the diagonal's squares of :data:`_PANEL` elements, where either side may
    hold some (the panels' products read those squares whole; a relation pointing backwards
    there is found by the links, and the set relabelled)."""
    if related.device.type != "cpu":
        n, width = related.shape[0], _PANEL
        block = torch.arange(n, device=related.device) // width
        outside = block[None, :] > block[:, None] if lower else block[None, :] < block[:, None]
        return not bool((related & outside).any())
    m, n = related.numpy(), related.shape[0]
    for start in range(0, n, _PANEL):
        stop = min(start + _PANEL, n)
        if np.count_nonzero(m[start:stop, stop:] if lower else m[start:stop, :start]):
            return False
    return True


def _boolean(matrix: Tensor) -> Tensor:
    """The matrix as booleans: viewed in place when it holds bytes 0 and 1 (as files do)."""
    if matrix.dtype == torch.bool:
        return matrix
    if matrix.dtype == torch.uint8 and matrix.numel() and int(matrix.max()) <= 1:
        return matrix.view(torch.bool)
    return matrix != 0


def _violation(related: Tensor, transposed: bool) -> str:
    relations = related.t() if transposed else related
    return order_violation(relations.cpu()) or "not a strict partial order"


def _flat_nonzero(mask: Tensor) -> Tensor:
    """Positions of the true entries of a contiguous boolean matrix, flattened row by row
    (numpy's is several times torch's on CPU for sparse masks)."""
    if mask.device.type == "cpu":
        return torch.from_numpy(np.flatnonzero(mask.numpy()))
    return mask.view(-1).nonzero().view(-1)


def _count(mask: Tensor, dim: int) -> Tensor:
    """True entries along ``dim``, int64: on CPU summed as bytes by numpy into the narrowest
    integer that holds the count (torch's sum of booleans converts each entry first)."""
    if mask.device.type != "cpu":
        return mask.sum(dim)
    narrow = np.uint16 if mask.shape[dim] < 1 << 16 else np.int64
    counts = mask.numpy().view(np.uint8).sum(dim, dtype=narrow)
    return torch.from_numpy(counts.astype(np.int64))


def _count_all(mask: Tensor) -> int:
    if mask.device.type == "cpu":
        return int(np.count_nonzero(mask.numpy()))
    return int(mask.sum())


def _stable_argsort(values: Tensor, bound: int) -> Tensor:
    """``argsort(values, stable=True)`` of integers in [0, bound): on CPU by numpy's radix sort
    when they fit 16 bits (linear, where torch's stable sort is a merge sort)."""
    if values.device.type == "cpu" and bound <= 1 << 16:
        return torch.from_numpy(np.argsort(values.numpy().astype(np.uint16), kind="stable"))
    return torch.argsort(values, stable=True)
