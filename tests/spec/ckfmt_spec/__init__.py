"""A second ckfmt v1.0 reader, written from spec/FORMAT.md alone.

Nothing here was taken from the C++ sources (format/, engine/, tools/): the
reader follows the normative text and the golden vectors, so where it and
the reference disagree, the spec or the code is wrong. tests/spec/README.md
says how it is used.

    with CheckpointFile(path) as ck:   # every open-time rule (§3, §6.6)
        ck.version, ck.size, ck.index  # Index: writer, world size, metadata, entries
        ck.read_entry(entry)           # a data entry's row-major bytes (§7; T4 on gaps)
        ck.read_covered(entry)         # (bytes, coverage mask), for partial entries
        ck.value(entry)                # a Python value for one entry
        ck.load()                      # the whole state dict (§6.4)

Every refusal raises a Refusal whose .rule is the FORMAT.md identifier (L1,
H1, F1, X1, P1, E1, T1, G1, C1, D1, ...): Corrupt, Unsupported (H2, F3, D2
and the T3 work bound), Uncovered (T4: a valid file, elements not stored)
or TooLarge (§12: more memory than this machine has).

Needs Python 3.11 with numpy, xxhash and zstandard (Debian 12:
python3-numpy, python3-xxhash, python3-zstandard).

The modules follow the spec: layout (§1.2, §3, §5.1 constants), refusals,
index_model (§4, §6.2, §6.3), flatbuf (§6.1, X3), regions (§7),
semantic_rules (§6.6), chunk_codecs (§5.3), values, checkpoint_file (§11).
`python3 tests/spec/ckfmt_spec FILE` prints a file (__main__.py).
"""
from .checkpoint_file import CheckpointFile
from .chunk_codecs import decode_byteplanes, decode_zstd
from .flatbuf import index_vtables, parse_index
from .index_model import (BOOL, BYTES, CODEC_NAMES, DICT, DTYPES, FLOAT, INT, KIND_NAMES, LIST,
                          NONE, PATH_INDEX, PATH_KEY, REGION_BOX, REGION_FLAT, STRING, TENSOR,
                          U8, Box, Chunk, DType, Entry, FlatRange, Index, PathElem, Piece, Shard)
from .layout import xxh3
from .refusals import Corrupt, Refusal, TooLarge, Uncovered, Unsupported
from .regions import box_flat_indices, contiguous_start, elements, flat_to_boxes
from .semantic_rules import check_index
from .values import BytesBlob, PartialTensor, Tensor, text

__all__ = [
    "CheckpointFile",
    "Refusal", "Corrupt", "Unsupported", "Uncovered", "TooLarge",
    "DType", "DTYPES", "U8", "KIND_NAMES", "CODEC_NAMES",
    "TENSOR", "BYTES", "INT", "FLOAT", "BOOL", "STRING", "NONE", "DICT", "LIST",
    "PATH_KEY", "PATH_INDEX", "REGION_BOX", "REGION_FLAT",
    "Box", "FlatRange", "Chunk", "PathElem", "Shard", "Piece", "Entry", "Index",
    "parse_index", "index_vtables", "check_index",
    "elements", "flat_to_boxes", "contiguous_start", "box_flat_indices",
    "decode_zstd", "decode_byteplanes", "xxh3",
    "Tensor", "PartialTensor", "BytesBlob", "text",
]
