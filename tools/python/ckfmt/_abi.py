"""The C ABI of libckfmt.so (ckfmt/c_api.h) as ctypes declares it: status
codes, entry kinds, dtype ids, the descriptor structures and callbacks,
and finding the library."""

import ctypes
import ctypes.util
import os

# Status codes (ckfmt/status.h) and entry kinds (spec/FORMAT.md) as the C ABI
# (ckfmt/c_api.h) spells them.
STATUS_NAMES = ["OK", "InvalidArgument", "IOError", "Corruption", "Unsupported", "Mismatch",
                "NotFound", "MissingKeys", "UnexpectedKeys", "Aborted", "Internal"]
TENSOR, BYTES, INT, FLOAT, BOOL, STRING, NONE, DICT, LIST = range(1, 10)
UNEXPECTED = {"reconstruct": 0, "ignore": 1, "error": 2}
MISSING = {"error": 0, "ignore": 1}
# ckfmt dtype ids (spec/FORMAT.md section 4) by torch / numpy dtype name.
DTYPE_IDS = {"float64": 1, "float32": 2, "float16": 3, "bfloat16": 4, "float8_e4m3fn": 5,
             "float8_e5m2": 6, "int64": 7, "int32": 8, "int16": 9, "int8": 10, "uint8": 11,
             "bool": 12, "complex64": 13, "complex128": 14, "uint16": 15, "uint32": 16,
             "uint64": 17}
DTYPE_NAMES = {v: k for k, v in DTYPE_IDS.items()}
INT64 = (-(1 << 63), (1 << 63) - 1)


class CkfmtError(Exception):
    """A failure reported by ckfmt; `code` names its kind ("Mismatch", ...)."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = STATUS_NAMES[code] if 0 <= code < len(STATUS_NAMES) else str(code)


class _Entry(ctypes.Structure):
    _fields_ = [("key", ctypes.c_char_p), ("kind", ctypes.c_uint8), ("dtype", ctypes.c_uint8),
                ("device", ctypes.c_int32), ("ndim", ctypes.c_uint32),
                ("shape", ctypes.POINTER(ctypes.c_uint64)), ("data", ctypes.c_void_p),
                ("int_value", ctypes.c_int64), ("float_value", ctypes.c_double),
                ("bytes", ctypes.c_void_p), ("size", ctypes.c_uint64),
                ("content_type", ctypes.c_char_p), ("global_ndim", ctypes.c_uint32),
                ("global_shape", ctypes.POINTER(ctypes.c_uint64)),
                ("offsets", ctypes.POINTER(ctypes.c_uint64)), ("flat_start", ctypes.c_uint64)]


class _Metadata(ctypes.Structure):
    _fields_ = [("key", ctypes.c_char_p), ("value", ctypes.c_char_p)]


_ALLOC = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(_Entry))
_ON_ENTRY = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(_Entry))
_ON_METADATA = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p)
_ON_TEXT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_char),
                            ctypes.c_size_t)
_LAYOUT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(_Entry),
                           ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint64))


class _AsyncOptions(ctypes.Structure):
    _fields_ = [("wait_if_busy", ctypes.c_int), ("copy_threads", ctypes.c_uint32),
                ("snapshot_bytes", ctypes.c_uint64)]


class _LoadOptions(ctypes.Structure):
    _fields_ = [("verify_checksums", ctypes.c_int), ("unexpected", ctypes.c_int),
                ("missing", ctypes.c_int), ("reconstruct_device", ctypes.c_int32),
                ("prefixes", ctypes.POINTER(ctypes.c_char_p)), ("n_prefixes", ctypes.c_size_t),
                ("alloc", _ALLOC), ("alloc_ctx", ctypes.c_void_p),
                ("on_entry", _ON_ENTRY), ("entry_ctx", ctypes.c_void_p),
                ("on_metadata", _ON_METADATA), ("metadata_ctx", ctypes.c_void_p),
                ("refuse_content_type", ctypes.c_char_p), ("layout", _LAYOUT),
                ("layout_ctx", ctypes.c_void_p)]


_ALL_GATHER = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64,
                               ctypes.c_void_p)
_BROADCAST = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64,
                              ctypes.c_int)
_POINT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64,
                          ctypes.c_int, ctypes.c_int)


class _CommOps(ctypes.Structure):
    _fields_ = [("ctx", ctypes.c_void_p), ("rank", ctypes.c_int), ("size", ctypes.c_int),
                ("all_gather", _ALL_GATHER), ("broadcast", _BROADCAST), ("send", _POINT),
                ("recv", _POINT)]


class _DistOptions(ctypes.Structure):
    _fields_ = [("mode", ctypes.c_int), ("memory_budget", ctypes.c_uint64),
                ("check_contents", ctypes.c_int)]


_libs = {}


def _lib(path=None):
    path = path or os.environ.get("CKFMT_LIB")
    if not path:
        here = os.path.dirname(os.path.abspath(__file__))
        built = os.path.join(here, "..", "..", "..", "build", "engine", "libckfmt.so")
        path = built if os.path.exists(built) else ctypes.util.find_library("ckfmt")
    if not path:
        raise OSError("libckfmt.so not found: pass lib= or set CKFMT_LIB")
    if path not in _libs:
        lib = ctypes.CDLL(path)
        if not hasattr(lib, "ckfmt_dist_save_entries"):  # the newest entry point
            raise OSError("%s lacks ckfmt_dist_save_entries: a libckfmt.so older than this "
                          "binding" % path)
        lib.ckfmt_save_entries.argtypes = [ctypes.c_char_p, ctypes.POINTER(_Entry), ctypes.c_size_t,
                                           ctypes.POINTER(_Metadata), ctypes.c_size_t,
                                           ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
        lib.ckfmt_load_entries.argtypes = [ctypes.c_char_p, ctypes.POINTER(_Entry),
                                           ctypes.c_size_t, ctypes.POINTER(_LoadOptions),
                                           ctypes.c_char_p, ctypes.c_size_t]
        for f in (lib.ckfmt_verify, lib.ckfmt_verify_checksums):
            f.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
        lib.ckfmt_async_saver_new.argtypes = [ctypes.POINTER(_AsyncOptions),
                                              ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p,
                                              ctypes.c_size_t]
        lib.ckfmt_async_saver_free.argtypes = [ctypes.c_void_p]
        lib.ckfmt_list_entries.argtypes = [ctypes.c_char_p, _ON_ENTRY, ctypes.c_void_p,
                                           _ON_METADATA, ctypes.c_void_p, ctypes.c_char_p,
                                           ctypes.c_size_t]
        lib.ckfmt_describe_json.argtypes = [ctypes.c_char_p, ctypes.c_char_p, _ON_TEXT,
                                            ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
        lib.ckfmt_async_save_entries.argtypes = [
            ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(_Entry), ctypes.c_size_t,
            ctypes.POINTER(_Metadata), ctypes.c_size_t, ctypes.c_char_p, ctypes.c_char_p,
            ctypes.c_size_t]
        lib.ckfmt_async_prepare_entries.argtypes = [
            ctypes.c_void_p, ctypes.POINTER(_Entry), ctypes.c_size_t, ctypes.c_char_p,
            ctypes.c_size_t]
        lib.ckfmt_async_wait.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
        lib.ckfmt_async_busy.argtypes = [ctypes.c_void_p]
        lib.ckfmt_async_last_blocked_seconds.argtypes = [ctypes.c_void_p]
        lib.ckfmt_async_last_blocked_seconds.restype = ctypes.c_double
        lib.ckfmt_comm_new.argtypes = [ctypes.POINTER(_CommOps), ctypes.POINTER(ctypes.c_void_p),
                                       ctypes.c_char_p, ctypes.c_size_t]
        lib.ckfmt_comm_free.argtypes = [ctypes.c_void_p]
        lib.ckfmt_dist_save_entries.argtypes = [
            ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(_Entry), ctypes.c_size_t,
            ctypes.POINTER(_Metadata), ctypes.c_size_t, ctypes.c_char_p,
            ctypes.POINTER(_DistOptions), ctypes.c_char_p, ctypes.c_size_t]
        _libs[path] = lib
    return _libs[path]


def _scalar(e):
    """The Python value of an int, bool, float or string entry; else None."""
    if e.kind in (INT, BOOL):
        return e.int_value if e.kind == INT else bool(e.int_value)
    if e.kind == FLOAT:
        return e.float_value
    if e.kind == STRING:
        return ctypes.string_at(e.bytes, e.size).decode("utf-8", "surrogatepass") if e.size else ""
    return None


def _check(rc, err):
    if rc:
        raise CkfmtError(rc, err.value.decode("utf-8", "replace"))
