"""The reader's own region arithmetic (§7), checked against §7.1 element by element."""
import itertools
import math

import numpy as np

import ckfmt_spec as spec


# --- the reader's own region arithmetic (§7) -------------------------------------

SELF_CHECK_SHAPES = [(5,), (3, 4), (2, 3, 4), (1, 3, 1, 2)]


def check_reader_regions(args, work, report):
    """Every box and flat range of a few small shapes: the reader's fast path
    for contiguous boxes and its flat-range decomposition (used by T3) agree
    with the plain element-by-element mapping of §7.1."""
    group = "reader regions"
    boxes = flats = 0
    for shape in SELF_CHECK_SHAPES:
        for offsets, lengths in all_boxes(shape):
            box = spec.Box(offsets, lengths)
            flat = spec.box_flat_indices(box, shape)
            contiguous = bool(np.all(np.diff(flat) == 1))
            start = spec.contiguous_start(box, shape)
            if (start is not None) != contiguous or (start is not None and start != flat[0]):
                report.fail(group, f"shape {shape} {box}: contiguous_start {start}, elements {list(flat)}")
            boxes += 1
        n = math.prod(shape)
        for a in range(n):
            for b in range(a + 1, n + 1):
                parts = spec.flat_to_boxes(a, b, shape)
                got = np.concatenate([spec.box_flat_indices(p, shape) for p in parts])
                if list(got) != list(range(a, b)):
                    report.fail(group, f"shape {shape}: flat_to_boxes({a}, {b}) covers {list(got)}")
                flats += 1
    return f"reader regions: {boxes} boxes and {flats} flat ranges map as §7.1 says"


def all_boxes(shape):
    """(offsets, lengths) of every non-empty box of a shape."""
    per_dim = [[(o, n) for o in range(s) for n in range(1, s - o + 1)] for s in shape]
    for combo in itertools.product(*per_dim):
        yield tuple(o for o, _ in combo), tuple(n for _, n in combo)
