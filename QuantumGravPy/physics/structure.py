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

import threading
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
    triangular = _block_triangular(matrix, lower=transposed)
    related = _boolean(matrix, lower=transposed if triangular else None)
    if bool(related.diagonal().any()):
        raise NotAnOrder(_violation(related, transposed))
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
    """Q = C C > 0 and what follows from it, over the triangle holding the matrix (``lower``:
    below the diagonal, False: above) in blocks of :data:`_PANEL` squared, or over all of it
    (None) in one product. Each block of the product is read while it is in cache: its links
    written into a mask of its panel of rows, its positive entries counted. On a CPU these
    passes are numpy's (several times torch's for bytes)."""
    n, on_cpu = related.shape[0], related.device.type == "cpu"
    size = -(-n // _PAD) * _PAD
    panels = _panels(n, size, lower)
    operand = _operand(related, size, panels)
    parts = _NumpyParts(n) if on_cpu else _TorchParts(n, related.device)
    entries = parts.entries(related)
    step = size if lower is None else _PANEL  # columns of a block
    for start, stop, first, last in panels:
        height, width = min(stop, n) - start, min(last, n) - first
        block = entries[start : start + height, first : first + width]  # the panel's triangle
        linked = parts.mask(height, width)
        for left in range(first, last, step):
            right = min(left + step, last)
            # the inner indices through which an entry of these columns can be reached
            inner = (
                slice(0, size)
                if lower is None
                else slice(left, stop)
                if lower
                else slice(start, right)
            )
            product = torch.matmul(operand[start:stop, inner], operand[inner, left:right])
            columns = slice(left - first, min(right, n) - first)
            parts.block(product[:height, : columns.stop - columns.start], block, linked, columns)
        parts.panel(linked, block, start, first)
    return parts.result()


class _NumpyParts:
    """What :func:`_product_parts` gathers on a CPU, in numpy."""

    def __init__(self, n: int):
        self.rows, self.cols, self.implied = [], [], 0
        self.rows_sum, self.cols_sum = np.zeros(n, np.int64), np.zeros(n, np.int64)

    def entries(self, related: Tensor) -> np.ndarray:
        return related.view(torch.uint8).numpy()

    def mask(self, height: int, width: int) -> np.ndarray:
        return np.empty((height, width), dtype=np.bool_)

    def block(self, product: Tensor, block: np.ndarray, linked: np.ndarray, columns: slice):
        # a product's entries are 0 or positive, and so are their bits as signed integers
        counts = product.view(_SIGNED[product.element_size()]).numpy()
        np.less(counts, block[:, columns], out=linked[:, columns])
        self.implied += np.count_nonzero(counts)

    def panel(self, linked: np.ndarray, block: np.ndarray, start: int, first: int) -> None:
        height, width = block.shape
        row, col = np.divmod(np.flatnonzero(linked), width)
        self.rows.append(start + row)
        self.cols.append(first + col)
        # bytes summed into the narrowest integer that holds the count, not widened one by one
        self.rows_sum[start : start + height] = block.sum(1, dtype=_narrow(width))
        self.cols_sum[first : first + width] += block.sum(0, dtype=_narrow(height))

    def result(self) -> _Parts:
        row, col = np.concatenate(self.rows), np.concatenate(self.cols)
        sums = torch.from_numpy(self.rows_sum), torch.from_numpy(self.cols_sum)
        return _Parts(torch.from_numpy(row), torch.from_numpy(col), *sums, int(self.implied))


class _TorchParts:
    """What :func:`_product_parts` gathers, in torch on the matrix's device (a GPU waits for
    it once, at the end)."""

    def __init__(self, n: int, device: torch.device):
        self.rows, self.cols, self.device = [], [], device
        self.implied = torch.zeros((), dtype=torch.int64, device=device)
        self.rows_sum = torch.zeros(n, dtype=torch.int64, device=device)
        self.cols_sum = torch.zeros(n, dtype=torch.int64, device=device)

    def entries(self, related: Tensor) -> Tensor:
        return related

    def mask(self, height: int, width: int) -> Tensor:
        return torch.empty(height, width, dtype=torch.bool, device=self.device)

    def block(self, product: Tensor, block: Tensor, linked: Tensor, columns: slice) -> None:
        between = product > 0
        torch.logical_and(block[:, columns], ~between, out=linked[:, columns])
        self.implied += between.sum()

    def panel(self, linked: Tensor, block: Tensor, start: int, first: int) -> None:
        row, col = linked.nonzero().unbind(1)
        self.rows.append(start + row)
        self.cols.append(first + col)
        self.rows_sum[start : start + block.shape[0]] = block.sum(1)
        self.cols_sum[first : first + block.shape[1]] += block.sum(0)

    def result(self) -> _Parts:
        sums = self.rows_sum, self.cols_sum
        return _Parts(torch.cat(self.rows), torch.cat(self.cols), *sums, int(self.implied))


def _narrow(length: int) -> type:
    return np.uint16 if length < 1 << 16 else np.int64


# Signed integers of each size: a product's entries as bits, for comparing and counting.
_SIGNED = {2: torch.int16, 4: torch.int32}
# Operands kept for the next matrix, by row stride (see :func:`_operand`), up to this size.
_KEEP_BYTES = 64 << 20
_kept = threading.local()


def _panels(n: int, size: int, lower: bool | None) -> list[tuple[int, int, int, int]]:
    """The panels of rows of the product (padded to ``size``): (start, stop) of their rows,
    (first, last) of the columns their entries can be in (and of the inner indices)."""
    if lower is None:
        return [(0, size, 0, size)]
    panels = []
    for start in range(0, n, _PANEL):
        stop = min(start + _PANEL, size)
        panels.append((start, stop, 0, stop) if lower else (start, stop, start, size))
    return panels


def _operand(related: Tensor, size: int, panels: list[tuple[int, int, int, int]]) -> Tensor:
    """``related`` as the product's operand: in the product's type, padded with zeros to
    ``size`` squared, its rows a power of two (and a tile) apart; only the panels' triangle is
    written, the products read no more. Kernels prepared for a shape are kept per row stride
    too, so one stride for all sizes up to the next power of two keeps them few. On a CPU the
    memory is kept for the next matrix of its stride: fresh memory costs a fault a page, as
    much again as converting the matrix into it."""
    n, device, dtype = related.shape[0], related.device, count_dtype(related.device)
    stride = (1 << (size - 1).bit_length()) + _PAD
    rows = stride - _PAD
    kept = _kept.__dict__.setdefault("operands", {})
    memory = kept.get((stride, dtype)) if device.type == "cpu" else None
    if memory is None:
        memory = torch.empty(rows, stride, dtype=dtype, device=device)
        if device.type == "cpu" and memory.nbytes <= _KEEP_BYTES:
            kept[stride, dtype] = memory
    operand = memory[:size, :size]
    operand[n:].zero_()
    operand[:n, n:].zero_()
    entries = related.view(torch.uint8)
    for start, stop, first, last in panels:
        stop, last = min(stop, n), min(last, n)
        operand[start:stop, first:last] = entries[start:stop, first:last]
    return operand


def _block_triangular(matrix: Tensor, *, lower: bool) -> bool:
    """Whether every nonzero entry lies in the panels' triangle: below (``lower``) or above the
    diagonal but for the diagonal's squares of :data:`_PANEL` elements, where either side may
    hold some (the panels' products read those squares whole; a relation pointing backwards
    there is found by the links, and the set relabelled)."""
    if matrix.device.type != "cpu":
        n, width = matrix.shape[0], _PANEL
        block = torch.arange(n, device=matrix.device) // width
        outside = block[None, :] > block[:, None] if lower else block[None, :] < block[:, None]
        return not bool(((matrix != 0) & outside).any())
    m, n = matrix.numpy(), matrix.shape[0]
    for start in range(0, n, _PANEL):
        stop = min(start + _PANEL, n)
        if np.count_nonzero(m[start:stop, stop:] if lower else m[start:stop, :start]):
            return False
    return True


def _boolean(matrix: Tensor, *, lower: bool | None) -> Tensor:
    """The matrix as booleans: viewed in place when it holds bytes 0 and 1 (as files do),
    which only the panels' triangle (``lower`` as in :func:`_product_parts`) can fail to,
    where the matrix is block-triangular (it is 0 elsewhere)."""
    if matrix.dtype == torch.bool:
        return matrix
    if matrix.dtype == torch.uint8 and matrix.numel():
        n = matrix.shape[0]
        size = -(-n // _PAD) * _PAD
        if all(
            int(matrix[start : min(stop, n), first : min(last, n)].max()) <= 1
            for start, stop, first, last in _panels(n, size, lower)
        ):
            return matrix.view(torch.bool)
    return matrix != 0


def _violation(related: Tensor, transposed: bool) -> str:
    relations = related.t() if transposed else related
    return order_violation(relations.cpu()) or "not a strict partial order"


def _stable_argsort(values: Tensor, bound: int) -> Tensor:
    """``argsort(values, stable=True)`` of integers in [0, bound): on CPU by numpy's radix sort
    when they fit 16 bits (linear, where torch's stable sort is a merge sort)."""
    if values.device.type == "cpu" and bound <= 1 << 16:
        return torch.from_numpy(np.argsort(values.numpy().astype(np.uint16), kind="stable"))
    return torch.argsort(values, stable=True)
