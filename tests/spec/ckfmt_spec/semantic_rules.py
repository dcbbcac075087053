"""The rules of §6.6 that a decoded index must meet before the file opens."""
import bisect
import math

import numpy as np

from .index_model import (BOOL, BYTES, DICT, DTYPES, FLOAT, INT, LIST, PATH_INDEX, PATH_KEY,
                          REGION_BOX, REGION_FLAT, STRING, TENSOR, U8, Box, FlatRange)
from .layout import BLOCK, MAX_CHUNK_RAW, T3_BUDGET
from .refusals import Unsupported, checked_product, require
from .regions import elements, flat_to_boxes, ravel


# --- semantic rules (§6.6) -----------------------------------------------------

def check_index(ix, index_offset):
    """Every rule of §6.6 after X1-X3, entry by entry as §11's check_index goes."""
    keys = [k for k, _ in ix.metadata]
    require(len(set(keys)) == len(keys), "X4", "a metadata key repeats")
    require(ix.world_size >= 1, "X5", "world_size is 0")
    tree = TreeCheck()
    budget = T3_BUDGET
    extents = []
    for i, entry in enumerate(ix.entries):
        where = f"entry {i}"
        tree.add(entry, where)
        check_entry_fields(entry, where)
        if entry.kind in (TENSOR, BYTES):
            extents += check_geometry(entry, ix.world_size, index_offset, where)
            budget = check_coverage(entry, budget, where)
    extents.sort()
    for (a, size), (b, _) in zip(extents, extents[1:]):
        require(a + size <= b, "C5", f"chunks at {a} and {b} overlap")


class TreeCheck:
    """P1-P8: each entry's path against the entries before it (§6.4)."""

    def __init__(self):
        self.kinds = {(): DICT}          # the implicit root is a dict
        self.children = {}
        self.open = [()]                 # the root, then containers still open

    def add(self, entry, where):
        for c in entry.path_elems:
            require(c.kind in (PATH_KEY, PATH_INDEX), "P1", where)
            if c.kind == PATH_KEY:
                require(c.key is not None and c.index == 0, "P2", where)
            else:
                require(c.key is None, "P3", where)
        path = entry.path
        require(len(path) >= 1, "P4", where)
        parent, last = path[:-1], path[-1]
        while not is_proper_prefix(self.open[-1], path):
            self.open.pop()              # nothing below it can follow any more
        require(self.open[-1] == parent, "P5", f"{where}: parent is not the open container")
        if self.kinds[parent] == DICT:
            require(entry.path_elems[-1].kind == PATH_KEY, "P6", where)
        else:
            expected = self.children.get(parent, 0)
            require(entry.path_elems[-1].kind == PATH_INDEX and last == expected,
                    "P7", f"{where}: expected list index {expected}")
            self.children[parent] = expected + 1
        require(path not in self.kinds, "P8", f"{where}: path repeats")
        self.kinds[path] = entry.kind
        if entry.kind in (DICT, LIST):
            self.open.append(path)


def is_proper_prefix(a, b):
    return len(a) < len(b) and b[:len(a)] == a


def check_entry_fields(e, where):
    """E1-E9."""
    require(1 <= e.kind <= 9, "E1", f"{where}: kind {e.kind}")
    if e.kind not in (TENSOR, BYTES):
        require(e.shape is None and e.pieces is None and e.saved_layout is None
                and not e.partial and e.dtype == 0, "E2", where)
        require(e.content_type is None
                and (e.kind == STRING or e.string_value is None)
                and (e.kind == INT or e.int_value == 0)
                and (e.kind == FLOAT or e.float_value == 0)   # numerically: -0.0 too
                and (e.kind == BOOL or not e.bool_value), "E3", where)
        require(e.kind != STRING or e.string_value is not None, "E4", where)
        return
    require(e.string_value is None and e.int_value == 0 and e.float_value == 0
            and not e.bool_value, "E5", where)
    require((e.content_type is not None) == (e.kind == BYTES), "E6", where)
    require(1 <= e.dtype <= 17, "E7", f"{where}: dtype {e.dtype}")
    require(e.shape is not None, "E8", where)
    require(e.kind != BYTES or (e.dtype == U8 and len(e.shape) == 1), "E9", where)


def check_geometry(e, world_size, index_offset, where):
    """T1, X6, G1-G3, C1-C4 of a data entry; returns its chunks' stored extents."""
    esize = DTYPES[e.dtype].size
    extent = checked_product((d for d in e.shape if d), "T1", where)
    checked_product((extent, esize), "T1", where)
    n = 0 if 0 in e.shape else extent
    extents = []
    for piece in e.pieces or []:
        check_region(piece, e.shape, n, world_size, where)
        for c in piece.chunks:
            require(1 <= c.raw_size <= MAX_CHUNK_RAW and c.raw_size % esize == 0, "C1", where)
            require(c.stored_size >= 1 and (c.codec != 0 or c.stored_size == c.raw_size),
                    "C2", where)
            require(c.offset % BLOCK == 0 and BLOCK <= c.offset <= index_offset
                    and c.stored_size <= index_offset - c.offset, "C3", where)
            extents.append((c.offset, c.stored_size))
        require(sum(c.raw_size for c in piece.chunks) == elements(piece.region) * esize,
                "C4", f"{where}: chunks do not add up to the region")
    for shard in e.saved_layout or []:
        check_region(shard, e.shape, n, world_size, where)
    return extents


def check_region(placement, shape, n, world_size, where):
    """X6 and G1-G3 for a piece or a saved-layout shard."""
    require(placement.rank < world_size, "X6", f"{where}: rank {placement.rank}")
    region = placement.region
    require(placement.region_type in (REGION_BOX, REGION_FLAT), "G1",
            f"{where}: region type {placement.region_type}")
    if isinstance(region, Box):
        require(len(region.offsets) == len(region.lengths) == len(shape), "G2", where)
        require(all(o <= s and length <= s - o
                    for o, length, s in zip(region.offsets, region.lengths, shape)), "G2", where)
    else:
        require(region.start <= n and region.length <= n - region.start, "G3", where)


def check_coverage(e, budget, where):
    """T2 and T3; returns what is left of the index's T3 work bound.

    The work is priced as §6.6 prices the reference's: boxes sorted on
    dimension 0 cost 1 unit per pair whose dimension-0 intervals meet; a flat
    range and a box cost (rank + 1)^2 where the box's flat span meets the range.
    """
    regions = [p.region for p in e.pieces or [] if elements(p.region) > 0]
    n = math.prod(e.shape)
    held = sum(map(elements, regions))
    require(held <= n, "T2", f"{where}: pieces hold {held} of {n} elements")
    require(e.partial or held == n, "T2", f"{where}: pieces hold {held} of {n} elements")
    if len(regions) < 2:               # also every 0-d tensor, by T2
        return budget
    flats = sorted((r for r in regions if isinstance(r, FlatRange)), key=lambda r: r.start)
    for a, b in zip(flats, flats[1:]):
        require(a.start + a.length <= b.start, "T3", f"{where}: flat ranges overlap")
    boxes = sorted((r for r in regions if isinstance(r, Box)), key=lambda r: r.offsets[0])
    starts = [b.offsets[0] for b in boxes]
    box_ends = [bisect.bisect_left(starts, b.offsets[0] + b.lengths[0], i + 1)
                for i, b in enumerate(boxes)]
    flat_starts = [f.start for f in flats]
    flat_ends = [f.start + f.length for f in flats]
    spans = [(ravel(b.offsets, e.shape),
              ravel([o + length - 1 for o, length in zip(b.offsets, b.lengths)], e.shape))
             for b in boxes]
    flat_ranges = [(bisect.bisect_right(flat_ends, first), bisect.bisect_right(flat_starts, last))
                   for first, last in spans]
    cost = sum(end - i - 1 for i, end in enumerate(box_ends))
    cost += sum(max(0, hi - lo) for lo, hi in flat_ranges) * (len(e.shape) + 1) ** 2
    if cost > budget:
        raise Unsupported("T3", f"{where}: the coverage check would exceed 2^26 units")
    # The pairs priced above, compared a row of candidates at a time.
    lows, highs = box_arrays(boxes, len(e.shape))
    for i, end in enumerate(box_ends):
        require(not any_meet(lows[i], highs[i], lows[i + 1:end], highs[i + 1:end]),
                "T3", f"{where}: boxes overlap")
    pieces_of_flats = [flat_to_boxes(f.start, f.start + f.length, e.shape) for f in flats]
    first = np.cumsum([0] + [len(p) for p in pieces_of_flats])
    flat_lows, flat_highs = box_arrays([b for p in pieces_of_flats for b in p], len(e.shape))
    for i, (lo, hi) in enumerate(flat_ranges):
        rows = slice(first[lo], first[max(lo, hi)])
        require(not any_meet(lows[i], highs[i], flat_lows[rows], flat_highs[rows]),
                "T3", f"{where}: a box and a flat range overlap")
    return budget - cost


def box_arrays(boxes, rank):
    """Boxes as (first, end) index arrays of shape (len(boxes), rank)."""
    lows = np.array([b.offsets for b in boxes], dtype=np.uint64).reshape(len(boxes), rank)
    return lows, lows + np.array([b.lengths for b in boxes], dtype=np.uint64).reshape(len(boxes), rank)


def any_meet(low, high, lows, highs):
    """Whether the box [low, high) shares an element with any of the boxes [lows, highs)."""
    return bool(np.all(np.maximum(low, lows) < np.minimum(high, highs), axis=1).any())
