"""The enumerations (§4, §6.2) and the index as decoded (§6.3), unchecked."""
from dataclasses import dataclass
from typing import NamedTuple


# --- enumerations (§4, §6.2) -------------------------------------------------

class DType(NamedTuple):
    name: str          # canonical (torch) name, as tools print it
    size: int
    safetensors: str | None
    numpy: str | None  # None: numpy has no such type


DTYPES = {
    1: DType("float64", 8, "F64", "<f8"),
    2: DType("float32", 4, "F32", "<f4"),
    3: DType("float16", 2, "F16", "<f2"),
    4: DType("bfloat16", 2, "BF16", None),
    5: DType("float8_e4m3fn", 1, "F8_E4M3", None),
    6: DType("float8_e5m2", 1, "F8_E5M2", None),
    7: DType("int64", 8, "I64", "<i8"),
    8: DType("int32", 4, "I32", "<i4"),
    9: DType("int16", 2, "I16", "<i2"),
    10: DType("int8", 1, "I8", "i1"),
    11: DType("uint8", 1, "U8", "u1"),
    12: DType("bool", 1, "BOOL", "?"),
    13: DType("complex64", 8, "C64", "<c8"),
    14: DType("complex128", 16, None, "<c16"),   # safetensors has none
    15: DType("uint16", 2, "U16", "<u2"),
    16: DType("uint32", 4, "U32", "<u4"),
    17: DType("uint64", 8, "U64", "<u8"),
}
U8 = 11

TENSOR, BYTES, INT, FLOAT, BOOL, STRING, NONE, DICT, LIST = range(1, 10)
KIND_NAMES = {TENSOR: "tensor", BYTES: "bytes", INT: "int", FLOAT: "float",
              BOOL: "bool", STRING: "string", NONE: "none", DICT: "dict",
              LIST: "list"}
CODEC_NAMES = {0: "none", 1: "zstd", 2: "byteplane-zstd"}
PATH_KEY, PATH_INDEX = 0, 1
REGION_BOX, REGION_FLAT = 1, 2


# --- the index model (§6.3) ---------------------------------------------------

@dataclass(frozen=True)
class Box:
    offsets: tuple
    lengths: tuple


@dataclass(frozen=True)
class FlatRange:
    start: int
    length: int


class Chunk(NamedTuple):
    offset: int
    stored_size: int
    raw_size: int
    checksum: int
    codec: int


@dataclass
class PathElem:
    kind: int
    key: bytes | None
    index: int


@dataclass
class Shard:
    rank: int
    region_type: int
    region: Box | FlatRange | None     # None: an unknown union type (G1)


@dataclass
class Piece(Shard):
    chunks: list


@dataclass
class Entry:
    path_elems: list
    kind: int
    int_value: int
    float_value: float
    bool_value: bool
    string_value: bytes | None
    content_type: bytes | None
    dtype: int
    shape: tuple | None
    pieces: list | None
    partial: bool
    saved_layout: list | None

    @property
    def path(self):
        """Components as bytes (dict keys) and ints (list indices)."""
        return tuple(c.key if c.kind == PATH_KEY else c.index for c in self.path_elems)


@dataclass
class Index:
    writer_name: bytes | None
    writer_version: bytes | None
    world_size: int
    save_mode: bytes | None
    metadata: list          # [(key, value)] as bytes, in file order
    entries: list
