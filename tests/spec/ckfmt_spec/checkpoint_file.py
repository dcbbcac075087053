"""CheckpointFile: opening a file (§3.3, §6, §11), reading its chunks and entries."""
import math
import os
import struct

import numpy as np

from .chunk_codecs import decode_byteplanes, decode_zstd
from .flatbuf import parse_index
from .index_model import (BOOL, BYTES, DICT, DTYPES, FLOAT, INT, LIST, NONE, STRING,
                          TENSOR)
from .layout import BLOCK, FOOTER_MAGIC, HEADER_MAGIC, align_up, xxh3
from .refusals import Uncovered, Unsupported, require, require_memory
from .regions import box_flat_indices, contiguous_start, elements
from .semantic_rules import check_index
from .values import BytesBlob, PartialTensor, Tensor, text


# --- the file ----------------------------------------------------------------------

class CheckpointFile:
    def __init__(self, path):
        self.path = path
        self.file = open(path, "rb")
        try:
            self._open()
        except BaseException:
            self.file.close()
            raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self.file.close()

    def _read(self, offset, size):
        self.file.seek(offset)
        data = self.file.read(size)
        if len(data) != size:
            raise OSError(f"{self.path}: short read at {offset}")
        return data

    def _open(self):
        """§11 open_checkpoint: §3.3, then X1-X3, then §6.6."""
        size = self.size = os.fstat(self.file.fileno()).st_size
        require(size % BLOCK == 0 and size >= 2 * BLOCK, "L1", f"file size {size}")
        header = self._read(0, BLOCK)
        require(header[:8] == HEADER_MAGIC, "H1", "not a ckfmt file")
        major, minor, flags = struct.unpack_from("<HHI", header, 8)
        if major != 1:
            raise Unsupported("H2", f"format version {major}.{minor}")
        require(flags == 0, "H3")
        require(not any(header[16:]), "H4")
        footer = self._read(size - 64, 64)
        require(footer[56:] == FOOTER_MAGIC, "F1")
        require(struct.unpack_from("<Q", footer, 48)[0] == xxh3(footer[:48]), "F2")
        offset, length, checksum, f_major, f_minor, f_flags = struct.unpack_from("<QQQHHI", footer)
        if f_major != 1:
            raise Unsupported("F3", f"format version {f_major}.{f_minor}")
        require(f_flags == 0 and not any(footer[32:48]), "F4")
        require(offset % BLOCK == 0 and offset >= BLOCK, "F5")
        require(offset <= size - 64 and length <= size - 64 - offset, "F6")
        require(length <= (1 << 31) - 2, "F7")
        require(align_up(offset + length + 64) == size, "F8")
        require((major, minor) == (f_major, f_minor), "H5")
        self.version = (major, minor)
        buf = self._read(offset, length)
        require(xxh3(buf) == checksum, "X1")
        require(length >= 8 and buf[4:8] == b"CKIX", "X2")
        self.index = parse_index(buf)                       # X3
        check_index(self.index, offset)                     # §6.6
        self.index_offset = offset

    @property
    def metadata(self):
        return {text(k): text(v) for k, v in self.index.metadata}

    def read_chunk(self, c):
        """§5.4: the raw bytes of one chunk."""
        stored = self._read(c.offset, c.stored_size)
        require(xxh3(stored) == c.checksum, "D1", f"chunk at {c.offset}: checksum mismatch")
        if c.codec == 0:
            return stored                                   # D3
        if c.codec == 1:
            return decode_zstd(stored, c.raw_size, "D4")
        if c.codec == 2:
            return decode_byteplanes(stored, c.raw_size)   # D5, D6
        raise Unsupported("D2", f"chunk at {c.offset}: unknown codec {c.codec}")

    def read_covered(self, entry):
        """Every stored element of a data entry: (row-major bytes, coverage mask)."""
        n, esize = math.prod(entry.shape), DTYPES[entry.dtype].size
        require_memory(3 * n * esize + n, "the entry")      # output, a copy, the chunks
        out = np.zeros(n * esize, dtype=np.uint8)
        covered = np.zeros(n, dtype=bool)
        for piece in entry.pieces or []:
            if not piece.chunks:
                continue
            raw = np.frombuffer(b"".join(map(self.read_chunk, piece.chunks)), dtype=np.uint8)
            start = contiguous_start(piece.region, entry.shape)
            if start is not None:
                out[start * esize:start * esize + len(raw)] = raw
                covered[start:start + len(raw) // esize] = True
            else:
                flat = box_flat_indices(piece.region, entry.shape)
                out.reshape(-1, esize)[flat] = raw.reshape(-1, esize)
                covered[flat] = True
        return out.tobytes(), covered

    def read_entry(self, entry):
        """A data entry's bytes, row-major; T4 if any element is not stored."""
        n = math.prod(entry.shape)
        held = sum(elements(p.region) for p in entry.pieces or [])
        if held < n:                   # by T2 and T3, known before reading
            raise Uncovered("T4", f"the file holds {held} of {n} elements")
        return self.read_covered(entry)[0]

    def value(self, entry, allow_partial=False):
        """An entry as a Python value. With allow_partial, a partial data entry
        comes back as a PartialTensor instead of failing T4."""
        kind = entry.kind
        if kind in (TENSOR, BYTES) and entry.partial and allow_partial:
            return PartialTensor(entry.dtype, entry.shape, *self.read_covered(entry))
        if kind == TENSOR:
            return Tensor(entry.dtype, entry.shape, self.read_entry(entry))
        if kind == BYTES:
            return BytesBlob(self.read_entry(entry), text(entry.content_type))
        if kind == INT:
            return entry.int_value
        if kind == FLOAT:
            return entry.float_value
        if kind == BOOL:
            return entry.bool_value
        if kind == STRING:
            return text(entry.string_value)
        return {NONE: None, DICT: {}, LIST: []}[kind]

    def load(self, allow_partial=False):
        """The state dict: nested dicts and lists, dict keys in file order (§6.4)."""
        root = {}
        containers = {(): root}
        for entry in self.index.entries:
            value = self.value(entry, allow_partial)
            parent = containers[entry.path[:-1]]
            if isinstance(parent, dict):
                parent[text(entry.path[-1])] = value
            else:
                parent.append(value)       # P7: list children come in order
            if entry.kind in (DICT, LIST):
                containers[entry.path] = value
        return root
