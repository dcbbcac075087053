"""Regions and the streams of their elements (§7)."""
import math

import numpy as np

from .index_model import Box, FlatRange


# --- regions and streams (§7) ---------------------------------------------------

def elements(region):
    return region.length if isinstance(region, FlatRange) else math.prod(region.lengths)


def ravel(index, shape):
    flat = 0
    for i, s in zip(index, shape):
        flat = flat * s + i
    return flat


def flat_to_boxes(start, stop, shape):
    """Boxes whose row-major order is the flat range [start, stop) (§7.5)."""
    if start >= stop:
        return []
    if not shape:
        return [Box((), ())]
    inner = tuple(shape[1:])
    row = math.prod(inner)
    first, last = start // row, stop // row
    head, tail = start % row, stop % row

    def in_row(r, boxes):
        return [Box((r,) + b.offsets, (1,) + b.lengths) for b in boxes]

    if first == last:
        return in_row(first, flat_to_boxes(head, tail, inner))
    boxes = []
    if head:
        boxes += in_row(first, flat_to_boxes(head, row, inner))
        first += 1
    if last > first:
        boxes.append(Box((first,) + (0,) * len(inner), (last - first,) + inner))
    if tail:
        boxes += in_row(last, flat_to_boxes(0, tail, inner))
    return boxes


def contiguous_start(region, shape):
    """The first global flat index if the region's stream is a run of the
    global flat order (a flat range, or a box of whole trailing rows), else None."""
    if isinstance(region, FlatRange):
        return region.start
    longer = [d for d, length in enumerate(region.lengths) if length != 1]
    if not longer or region.lengths[longer[0] + 1:] == tuple(shape[longer[0] + 1:]):
        return ravel(region.offsets, shape)
    return None


def box_flat_indices(box, shape):
    """Global flat index of each stream position of a box (§7.1)."""
    flat = np.zeros([1] * len(shape), dtype=np.int64)
    for d in range(len(shape)):
        axis = (box.offsets[d] + np.arange(box.lengths[d], dtype=np.int64)) * math.prod(shape[d + 1:])
        flat = flat + axis.reshape([-1 if k == d else 1 for k in range(len(shape))])
    return flat.reshape(-1)
