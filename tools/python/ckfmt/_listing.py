"""describe(), inspect() and verify(): what a file holds, and whether it is intact."""

import collections
import ctypes
import json
import os

from ._abi import (_ON_ENTRY, _ON_METADATA, _ON_TEXT, BOOL, BYTES, DICT, DTYPE_NAMES, FLOAT, INT,
                   LIST, NONE, STRING, TENSOR, _check, _lib, _scalar)
from ._keys import _format_path

Entry = collections.namedtuple("Entry", "key kind dtype shape nbytes content_type value")
Entry.__doc__ = """One entry of a file's index, as describe() lists it: key, its key path
("optim/state/0/exp_avg"); kind, "tensor", "bytes", "int", "float", "bool",
"str", "none", "dict" or "list"; dtype ("bfloat16"), shape (global) and
nbytes for a tensor; nbytes and content_type for bytes; value for ints,
floats, bools and strings."""
KIND_NAMES = {TENSOR: "tensor", BYTES: "bytes", INT: "int", FLOAT: "float", BOOL: "bool",
              STRING: "str", NONE: "none", DICT: "dict", LIST: "list"}


def describe(path, lib=None):
    """What `path` holds, without reading its data: (entries, metadata), the
    entries (Entry) in the file's order, a container before what it holds,
    and the metadata dict. The index is verified first, as for a load."""
    entries, metadata, error = [], {}, []

    def on_entry(_ctx, e):
        try:
            e = e.contents
            tensor = e.kind == TENSOR
            entries.append(Entry(e.key.decode(), KIND_NAMES[e.kind],
                                 DTYPE_NAMES.get(e.dtype) if tensor else None,
                                 tuple(e.shape[i] for i in range(e.ndim)) if tensor else None,
                                 e.size if tensor or e.kind == BYTES else None,
                                 e.content_type.decode() if e.kind == BYTES else None,
                                 _scalar(e)))
            return 0
        except BaseException as x:
            error.append(x)
            return 1

    def on_metadata(_ctx, key, value):
        metadata[key.decode()] = value.decode()
        return 0

    err = ctypes.create_string_buffer(4096)
    rc = _lib(lib).ckfmt_list_entries(os.fsencode(path), _ON_ENTRY(on_entry), None,
                                      _ON_METADATA(on_metadata), None, err, len(err))
    if error:
        raise error[0]
    _check(rc, err)
    return entries, metadata


def inspect(path, prefix=None, lib=None):
    """All the index says of `path`, without reading its data: the document
    `ckfmt inspect --json` prints (spec/INSPECT_JSON.md), as a dict. It has
    the format "version", "writer", "world_size" and "save_mode" of the save,
    "metadata", "entries" in the file's order (each with its "key", "kind",
    and for tensors and bytes "dtype", "shape", "partial", "raw_bytes",
    "stored_bytes", "pieces" with their rank, region and chunks, and
    "saved_layout"), and "totals". prefix: only the entries at or below this
    key path (a str, or a sequence of keys and list indices)."""
    out = []

    def on_json(_ctx, text, n):
        out.append(ctypes.string_at(text, n))
        return 0

    pre = None if prefix is None else (
        prefix if isinstance(prefix, str) else _format_path(prefix)).encode()
    err = ctypes.create_string_buffer(4096)
    rc = _lib(lib).ckfmt_describe_json(os.fsencode(path), pre, _ON_TEXT(on_json), None, err,
                                       len(err))
    _check(rc, err)
    return json.loads(out[0])


def verify(path, checksums_only=False, lib=None):
    """Verifies `path` as `ckfmt verify` does; raises CkfmtError if it is not
    valid. checksums_only: every checksum, no decoding (the disk's speed)."""
    err = ctypes.create_string_buffer(4096)
    f = _lib(lib).ckfmt_verify_checksums if checksums_only else _lib(lib).ckfmt_verify
    _check(f(os.fsencode(path), err, len(err)), err)
