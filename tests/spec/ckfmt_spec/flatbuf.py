"""The index's FlatBuffers, verified while decoding (§6.1, X3)."""
import contextlib
import struct

from .index_model import (REGION_BOX, REGION_FLAT, Box, Chunk, Entry, FlatRange, Index,
                          PathElem, Piece, Shard)
from .refusals import require


# --- FlatBuffers, verified while decoding (§6.1, X3) -------------------------

class FlatBuffer:
    MAX_DEPTH = 16          # §12
    MAX_TABLES = 1 << 28

    def __init__(self, buf):
        self.buf = buf
        self.depth = 0
        self.tables = 0
        self.vtables = {}       # position -> size, for tests that drop fields

    def check_inside(self, pos, size):
        require(0 <= pos and pos + size <= len(self.buf), "X3",
                f"{size} bytes at {pos} lie outside the index")

    def check_aligned(self, pos, align):
        require(pos % align == 0, "X3", f"position {pos} is not a multiple of {align}")

    def read(self, fmt, pos):
        self.check_inside(pos, struct.calcsize(fmt))
        return struct.unpack_from(fmt, self.buf, pos)[0]

    def follow(self, pos):
        """The target of the uoffset stored at pos."""
        self.check_aligned(pos, 4)
        offset = self.read("<I", pos)
        require(0 < offset < 1 << 31, "X3", f"bad uoffset {offset} at {pos}")
        self.check_inside(pos + offset, 1)
        return pos + offset

    @contextlib.contextmanager
    def table(self, pos):
        self.check_aligned(pos, 4)
        vtable = pos - self.read("<i", pos)
        self.check_aligned(vtable, 2)
        vtable_size = self.read("<H", vtable)
        require(vtable_size % 2 == 0, "X3", f"odd vtable size at {vtable}")
        self.check_inside(vtable, vtable_size)
        self.vtables[vtable] = vtable_size
        self.depth += 1
        self.tables += 1
        require(self.depth <= self.MAX_DEPTH, "X3", "tables nested too deep")
        require(self.tables <= self.MAX_TABLES, "X3", "too many tables")
        try:
            yield Table(self, pos, vtable, vtable_size)
        finally:
            self.depth -= 1

    def vector(self, pos, elem_size, elem_align=1):
        """(position of the first element, count) of the vector at pos."""
        self.check_aligned(pos, 4)
        count = self.read("<I", pos)
        self.check_inside(pos + 4, count * elem_size)
        if count and elem_align == 8:
            self.check_aligned(pos + 4, 8)      # ckfmt's own rule (X3)
        return pos + 4, count

    def string(self, pos):
        start, length = self.vector(pos, 1)
        self.check_inside(start + length, 1)
        require(self.buf[start + length] == 0, "X3", f"string at {pos} lacks its NUL")
        return bytes(self.buf[start:start + length])


class Table:
    def __init__(self, fb, pos, vtable, vtable_size):
        self.fb, self.pos, self.vtable, self.vtable_size = fb, pos, vtable, vtable_size

    def field_pos(self, fid):
        """Where field `fid` lies, or None when absent (a short vtable included)."""
        slot = 4 + 2 * fid
        if slot + 2 > self.vtable_size:
            return None
        offset = self.fb.read("<H", self.vtable + slot)
        return self.pos + offset if offset else None

    def scalar(self, fid, fmt, default=0):
        pos = self.field_pos(fid)
        if pos is None:
            return default
        self.fb.check_aligned(pos, struct.calcsize(fmt))
        return self.fb.read(fmt, pos)

    def target(self, fid, required):
        pos = self.field_pos(fid)
        require(pos is not None or not required, "X3", f"required field {fid} is absent")
        return None if pos is None else self.fb.follow(pos)

    def string(self, fid, required=False):
        pos = self.target(fid, required)
        return None if pos is None else self.fb.string(pos)

    def u64_vector(self, fid, required=False):
        pos = self.target(fid, required)
        if pos is None:
            return None
        start, count = self.fb.vector(pos, 8, elem_align=8)
        return struct.unpack_from(f"<{count}Q", self.fb.buf, start)

    def chunk_vector(self, fid):
        pos = self.target(fid, False)
        if pos is None:
            return []
        start, count = self.fb.vector(pos, 40, elem_align=8)
        return [Chunk(*struct.unpack_from("<QQQQB", self.fb.buf, start + 40 * i))
                for i in range(count)]

    def table_vector(self, fid, parse, required=False):
        pos = self.target(fid, required)
        if pos is None:
            return None
        start, count = self.fb.vector(pos, 4)
        return [parse(self.fb, self.fb.follow(start + 4 * i)) for i in range(count)]


# Field ids below are those of §6.3.

def parse_index(buf):
    return parse_root(FlatBuffer(buf))


def index_vtables(buf):
    """{position: size} of the vtables of an index; a test zeroes their slots."""
    fb = FlatBuffer(buf)
    parse_root(fb)
    return fb.vtables


def parse_root(fb):
    with fb.table(fb.follow(0)) as t:
        return Index(
            writer_name=t.string(0),
            writer_version=t.string(1),
            world_size=t.scalar(2, "<I"),
            save_mode=t.string(3),
            metadata=t.table_vector(4, parse_key_value) or [],
            entries=t.table_vector(5, parse_entry) or [])


def parse_key_value(fb, pos):
    with fb.table(pos) as t:
        return t.string(0, required=True), t.string(1, required=True)


def parse_entry(fb, pos):
    with fb.table(pos) as t:
        return Entry(
            path_elems=t.table_vector(0, parse_path_elem, required=True),
            kind=t.scalar(1, "<B"),
            int_value=t.scalar(2, "<q"),
            float_value=t.scalar(3, "<d", 0.0),
            bool_value=t.scalar(4, "<B") != 0,      # W6: any non-zero byte is true
            string_value=t.string(5),
            content_type=t.string(6),
            dtype=t.scalar(7, "<B"),
            shape=t.u64_vector(8),
            pieces=t.table_vector(9, parse_piece),
            partial=t.scalar(10, "<B") != 0,        # W6
            saved_layout=t.table_vector(11, parse_shard))


def parse_path_elem(fb, pos):
    with fb.table(pos) as t:
        return PathElem(kind=t.scalar(0, "<B"), key=t.string(1), index=t.scalar(2, "<Q"))


def parse_piece(fb, pos):
    with fb.table(pos) as t:
        region_type, region = parse_region(t)
        return Piece(rank=t.scalar(0, "<I"), region_type=region_type, region=region,
                     chunks=t.chunk_vector(3))


def parse_shard(fb, pos):
    with fb.table(pos) as t:
        region_type, region = parse_region(t)
        return Shard(rank=t.scalar(0, "<I"), region_type=region_type, region=region)


def parse_region(t):
    """The union at ids 1 (type) and 2 (value) of Piece and Shard."""
    region_type = t.scalar(1, "<B")
    pos = t.target(2, required=True)
    if region_type == REGION_BOX:
        with t.fb.table(pos) as box:
            return region_type, Box(box.u64_vector(0, required=True),
                                    box.u64_vector(1, required=True))
    if region_type == REGION_FLAT:
        with t.fb.table(pos) as flat:
            return region_type, FlatRange(flat.scalar(0, "<Q"), flat.scalar(1, "<Q"))
    return region_type, None                    # left to G1
