"""ckfmt for Python: save and load whole training states through libckfmt.so.

    import ckfmt
    ckfmt.save("step_1000.ckfmt", {"model": model.state_dict(),
                                   "optim": optimizer.state_dict(),
                                   "step": 1000, "loader": loader.state_dict()})
    # A fresh process: the model is built, the optimizer has no state yet.
    state = {"model": model.state_dict(), "optim": optimizer.state_dict()}
    ckfmt.load("step_1000.ckfmt", state)   # fills and completes `state`
    optimizer.load_state_dict(state["optim"])

A state is nested dicts and lists (tuples) of tensors (torch.Tensor on the
CPU or a GPU, numpy.ndarray), None, bool, int (64-bit), float, str and
bytes. load() fills the caller's tensors in place and creates what the
caller lacks (the optimizer state an optimizer makes on its first step),
so nothing in the file is silently dropped. Dict keys are str, or int in a
dict whose keys are all ints (an optimizer's per-parameter state); int
keys, tuples and OrderedDicts come back as they were saved, recorded as
`ckfmt convert` records them, so a file converted from or to torch.save
keeps them too. Other objects are pickled when saved (content type
"pickle") and unpickled on load only with allow_pickle=True: unpickling
runs code from the file.

Only the standard library is needed; numpy and torch are used when the
state holds their arrays. The library is found from `lib`, $CKFMT_LIB,
the build tree beside this file, or the system's library path.
"""

import collections
import ctypes
import ctypes.util
import json
import os
import pickle
import sys

__all__ = ["save", "load", "describe", "verify", "AsyncSaver", "Shard", "Entry", "CkfmtError"]

# Status codes (ckfmt/status.h) and entry kinds (spec/FORMAT.md) as the C ABI
# (ckfmt/c_api.h) spells them.
STATUS_NAMES = ["OK", "InvalidArgument", "IOError", "Corruption", "Unsupported", "Mismatch",
                "NotFound", "MissingKeys", "UnexpectedKeys", "Aborted", "Internal"]
TENSOR, BYTES, INT, FLOAT, BOOL, STRING, NONE, DICT, LIST = range(1, 10)
UNEXPECTED = {"reconstruct": 0, "ignore": 1, "error": 2}
MISSING = {"error": 0, "ignore": 1}
# Typing of Python containers that ckfmt has no kind for: the metadata keys
# `ckfmt convert` writes and reads (JSON arrays of key paths; null: root).
INT_KEY_DICTS = "convert.torch.int_key_dicts"
TUPLES = "convert.torch.tuples"
ORDERED_DICTS = "convert.torch.ordered_dicts"
# ckfmt dtype ids (spec/FORMAT.md section 4) by torch / numpy dtype name.
DTYPE_IDS = {"float64": 1, "float32": 2, "float16": 3, "bfloat16": 4, "float8_e4m3fn": 5,
             "float8_e5m2": 6, "int64": 7, "int32": 8, "int16": 9, "int8": 10, "uint8": 11,
             "bool": 12, "complex64": 13, "complex128": 14, "uint16": 15, "uint32": 16,
             "uint64": 17}
DTYPE_NAMES = {v: k for k, v in DTYPE_IDS.items()}
_ELEMENT_SIZES = {1: 8, 2: 4, 3: 2, 4: 2, 5: 1, 6: 1, 7: 8, 8: 4, 9: 2, 10: 1, 11: 1, 12: 1,
                  13: 8, 14: 16, 15: 2, 16: 4, 17: 8}
INT64 = (-(1 << 63), (1 << 63) - 1)


class CkfmtError(Exception):
    """A failure reported by ckfmt; `code` names its kind ("Mismatch", ...)."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = STATUS_NAMES[code] if 0 <= code < len(STATUS_NAMES) else str(code)


class Shard:
    """A tensor that holds part of a larger (global) one, for a state given
    to load() or save(): the box at `offsets` of a tensor of `global_shape`
    whose lengths are the tensor's own shape (a tensor parallel rank's
    slice), or with `flat_start` instead, the global tensor's elements
    [flat_start, flat_start + numel) in row-major order (an FSDP flat
    parameter's range). A load fills it with its part of the file's tensor,
    however the file was sharded; a save of a lone shard stores that part."""

    def __init__(self, tensor, global_shape, offsets=None, flat_start=None):
        if (offsets is None) == (flat_start is None):
            raise ValueError("a Shard takes offsets (a box) or flat_start (a flat range)")
        self.tensor, self.global_shape = tensor, tuple(global_shape)
        self.offsets = None if offsets is None else tuple(offsets)
        self.flat_start = flat_start


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


class _AsyncOptions(ctypes.Structure):
    _fields_ = [("wait_if_busy", ctypes.c_int), ("copy_threads", ctypes.c_uint32),
                ("snapshot_bytes", ctypes.c_uint64)]


class _LoadOptions(ctypes.Structure):
    _fields_ = [("verify_checksums", ctypes.c_int), ("unexpected", ctypes.c_int),
                ("missing", ctypes.c_int), ("reconstruct_device", ctypes.c_int32),
                ("prefixes", ctypes.POINTER(ctypes.c_char_p)), ("n_prefixes", ctypes.c_size_t),
                ("alloc", _ALLOC), ("alloc_ctx", ctypes.c_void_p),
                ("on_entry", _ON_ENTRY), ("entry_ctx", ctypes.c_void_p),
                ("on_metadata", _ON_METADATA), ("metadata_ctx", ctypes.c_void_p)]


_libs = {}


def _lib(path=None):
    path = path or os.environ.get("CKFMT_LIB")
    if not path:
        here = os.path.dirname(os.path.abspath(__file__))
        built = os.path.join(here, "..", "..", "build", "engine", "libckfmt.so")
        path = built if os.path.exists(built) else ctypes.util.find_library("ckfmt")
    if not path:
        raise OSError("libckfmt.so not found: pass lib= or set CKFMT_LIB")
    if path not in _libs:
        lib = ctypes.CDLL(path)
        if not hasattr(lib, "ckfmt_list_entries"):
            raise OSError("%s lacks ckfmt_list_entries: a libckfmt.so older than this binding"
                          % path)
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
        _libs[path] = lib
    return _libs[path]


def _check(rc, err):
    if rc:
        raise CkfmtError(rc, err.value.decode("utf-8", "replace"))


# ---- Key paths, as spec/FORMAT.md Appendix C writes them ("optim/state/0").

def _format_component(c):
    if isinstance(c, int):
        return "[%d]" % c
    if c == "":
        return '""'
    out = "\\" if c.startswith('"') else ""
    for ch in c:
        out += "\\" + ch if ch in "/\\[" else ch
    return out


def _format_path(path):
    return "/".join(_format_component(c) for c in path)


def _parse_path(text):
    path, cur, escaped = [], "", False

    def flush():
        if not escaped and cur == '""':
            path.append("")
        elif (not escaped and 3 <= len(cur) <= 21 and cur[0] == "[" and cur[-1] == "]"
              and cur[1:-1].isdigit() and cur[1:-1].isascii()):
            path.append(int(cur[1:-1]))
        else:
            path.append(cur)

    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            cur, escaped, i = cur + text[i + 1], True, i + 2
            continue
        if ch == "/":
            flush()
            cur, escaped = "", False
        else:
            cur += ch
        i += 1
    flush()
    return path


# ---- Tensors: torch.Tensor or numpy.ndarray.

def _torch():
    return sys.modules.get("torch")


def _is_tensor(x):
    t = _torch()
    if t is not None and isinstance(x, t.Tensor):
        return True
    np = sys.modules.get("numpy")
    return np is not None and isinstance(x, np.ndarray)


def _dtype_name(x):
    return str(x.dtype).replace("torch.", "")


def _device_of(x):
    dev = getattr(x, "device", None)
    return dev.index if getattr(dev, "type", "cpu") == "cuda" else -1


def _data_ptr(x):
    return x.data_ptr() if hasattr(x, "data_ptr") else x.ctypes.data


def _contiguous(x):
    return x.is_contiguous() if hasattr(x, "is_contiguous") else x.flags["C_CONTIGUOUS"]


class _Flat:
    """A state flattened into C descriptors, with everything they point to."""

    def __init__(self, state, for_load):
        self.for_load = for_load
        self.entries, self.keep, self.copies = [], [], []
        self.typing = {INT_KEY_DICTS: [], TUPLES: [], ORDERED_DICTS: []}
        if not isinstance(state, dict):
            raise TypeError("a state is a dict, not %s" % type(state).__name__)
        self._container(state, [])

    def _add(self, path, kind, **fields):
        key = _format_path(path).encode()
        self.keep.append(key)
        e = _Entry(key=key, kind=kind, device=-1)
        for name, value in fields.items():
            setattr(e, name, value)
        self.entries.append(e)

    def _container(self, value, path):
        where = _format_path(path) or "the root"
        if isinstance(value, dict):
            if path:
                self._add(path, DICT)
            keys = list(value.keys())
            ints = [k for k in keys if isinstance(k, int) and not isinstance(k, bool)]
            if ints and len(ints) != len(keys):
                raise TypeError("%s: a dict's keys must be all str or all int" % where)
            if not ints and any(not isinstance(k, str) for k in keys):
                bad = next(k for k in keys if not isinstance(k, str))
                raise TypeError("%s: key %r is a %s; keys are str or int"
                                % (where, bad, type(bad).__name__))
            if ints:
                self.typing[INT_KEY_DICTS].append(_format_path(path) if path else None)
            if isinstance(value, collections.OrderedDict):
                self.typing[ORDERED_DICTS].append(_format_path(path) if path else None)
            for k, v in value.items():
                self._value(v, path + [str(k)])
        else:
            self._add(path, LIST)
            if isinstance(value, tuple):
                self.typing[TUPLES].append(_format_path(path))
            for i, v in enumerate(value):
                self._value(v, path + [i])

    def _value(self, v, path):
        if isinstance(v, (dict, list, tuple)):
            return self._container(v, path)
        np = sys.modules.get("numpy")
        if np is not None and isinstance(v, np.generic):
            v = np.asarray(v)  # a numpy scalar: a 0-d array
        if _is_tensor(v):
            return self._tensor(v, path)
        if isinstance(v, Shard):
            return self._tensor(v.tensor, path, v)
        if v is None:
            return self._add(path, NONE)
        if isinstance(v, bool):
            return self._add(path, BOOL, int_value=int(v))
        if isinstance(v, int):
            if not INT64[0] <= v <= INT64[1]:
                raise OverflowError("%s: %d does not fit in 64 bits" % (_format_path(path), v))
            return self._add(path, INT, int_value=v)
        if isinstance(v, float):
            return self._add(path, FLOAT, float_value=v)
        if isinstance(v, str):
            return self._text(path, STRING, v.encode("utf-8", "surrogatepass"), None)
        if isinstance(v, (bytes, bytearray, memoryview)):
            return self._text(path, BYTES, bytes(v), b"raw")
        return self._text(path, BYTES, b"" if self.for_load else pickle.dumps(v), b"pickle")

    def _text(self, path, kind, data, content_type):
        if self.for_load:
            data = b""  # a load's entries declare kinds only
        buf = ctypes.create_string_buffer(data, len(data) or 1)
        self.keep.append(buf)
        self._add(path, kind, bytes=ctypes.cast(buf, ctypes.c_void_p), size=len(data),
                  content_type=content_type)

    def _tensor(self, t, path, shard=None):
        if not _is_tensor(t):
            raise TypeError("%s: a Shard holds a tensor, not %s" % (_format_path(path),
                                                                  type(t).__name__))
        name = _dtype_name(t)
        if name not in DTYPE_IDS:
            raise TypeError("%s: dtype %s has no ckfmt id" % (_format_path(path), name))
        dest = t
        if not _contiguous(t):
            # Saved from, or loaded into and copied back from, a packed copy.
            dest = t.contiguous() if hasattr(t, "contiguous") else sys.modules["numpy"].ascontiguousarray(t)
            self.copies.append((t, dest))
        shape = (ctypes.c_uint64 * max(1, len(t.shape)))(*t.shape)
        self.keep.extend([dest, shape])
        fields = {}
        if shard is not None:
            g = (ctypes.c_uint64 * max(1, len(shard.global_shape)))(*shard.global_shape)
            self.keep.append(g)
            fields = {"global_ndim": len(shard.global_shape), "global_shape": g}
            if shard.offsets is not None:
                o = (ctypes.c_uint64 * max(1, len(shard.offsets)))(*shard.offsets)
                self.keep.append(o)
                fields["offsets"] = o
            else:
                fields["flat_start"] = shard.flat_start
        self._add(path, TENSOR, dtype=DTYPE_IDS[name], device=_device_of(t), ndim=len(t.shape),
                  shape=shape, data=_data_ptr(dest), **fields)

    def array(self):
        return (_Entry * max(1, len(self.entries)))(*self.entries)


def _sync_devices(flat):
    """Finishes the caller's stream work on its GPU tensors, as the ABI requires."""
    torch = _torch()
    if torch is None:
        return
    for device in sorted({e.device for e in flat.entries if e.kind == TENSOR and e.device >= 0}):
        torch.cuda.synchronize(device)


# ---- The API.

def _for_save(state, metadata):
    """The state's descriptors and its metadata (the caller's, and the typing
    of Python containers), with what they point to."""
    flat = _Flat(state, for_load=False)
    md = dict(metadata or {})
    for key, paths in flat.typing.items():
        if paths:
            md[key] = json.dumps(paths)
    items = [(k.encode(), v.encode()) for k, v in md.items()]
    md_array = (_Metadata * max(1, len(items)))(*[_Metadata(k, v) for k, v in items])
    _sync_devices(flat)
    return flat, md_array, len(items)


def save(path, state, codec="none", metadata=None, lib=None):
    """Saves `state` (a dict) to `path` atomically: a failed save leaves what
    was at `path` as it was. codec: "none", "zstd" or "byteplane-zstd".
    metadata: a str -> str dict stored in the file's index."""
    flat, md, n_md = _for_save(state, metadata)
    err = ctypes.create_string_buffer(4096)
    rc = _lib(lib).ckfmt_save_entries(os.fsencode(path), flat.array(), len(flat.entries), md, n_md,
                                      codec.encode(), err, len(err))
    _check(rc, err)


class AsyncSaver:
    """Saves in the background: save() returns once the state is copied into
    snapshot memory (GPU tensors to pinned host memory), and the caller may
    change its tensors right away. A failed background save never leaves a
    partial file; its CkfmtError is raised once, by the next save() (which
    then starts nothing) or by wait(). Use from one thread at a time.

        saver = ckfmt.AsyncSaver()
        saver.prepare(state)              # optional: fault in the snapshot memory
        saver.save("step_1000.ckfmt", state)
        ...                               # training goes on
        saver.wait()                      # before exit, or to know it is on disk

    wait_if_busy: a save while one is writing waits for it (else raises
    CkfmtError "Aborted"). snapshot_bytes: most snapshot memory (0: no
    limit); a larger state's leading tensors are written from the caller's
    memory before save() returns."""

    def __init__(self, wait_if_busy=True, copy_threads=0, snapshot_bytes=0, lib=None):
        self._lib = _lib(lib)
        opts = _AsyncOptions(int(bool(wait_if_busy)), copy_threads, snapshot_bytes)
        self._handle = ctypes.c_void_p()
        err = ctypes.create_string_buffer(4096)
        _check(self._lib.ckfmt_async_saver_new(ctypes.byref(opts), ctypes.byref(self._handle),
                                               err, len(err)), err)

    def _saver(self):
        if not self._handle:
            raise ValueError("the AsyncSaver is closed")
        return self._handle

    def prepare(self, state):
        flat = _Flat(state, for_load=False)
        err = ctypes.create_string_buffer(4096)
        _check(self._lib.ckfmt_async_prepare_entries(self._saver(), flat.array(),
                                                     len(flat.entries), err, len(err)), err)

    def save(self, path, state, codec="none", metadata=None):
        flat, md, n_md = _for_save(state, metadata)
        err = ctypes.create_string_buffer(4096)
        _check(self._lib.ckfmt_async_save_entries(self._saver(), os.fsencode(path), flat.array(),
                                                  len(flat.entries), md, n_md, codec.encode(),
                                                  err, len(err)), err)

    def wait(self):
        """Waits for the save in flight; raises its CkfmtError if it failed."""
        err = ctypes.create_string_buffer(4096)
        _check(self._lib.ckfmt_async_wait(self._saver(), err, len(err)), err)

    @property
    def busy(self):
        return bool(self._lib.ckfmt_async_busy(self._saver()))

    @property
    def last_blocked_seconds(self):
        """Seconds the last save() blocked its caller."""
        return self._lib.ckfmt_async_last_blocked_seconds(self._saver())

    def close(self):
        """Waits for the save in flight (an error is logged, not raised) and
        frees the snapshot memory; wait() first to see the error."""
        if self._handle:
            self._lib.ckfmt_async_saver_free(self._handle)
            self._handle = ctypes.c_void_p()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if getattr(self, "_handle", None):
            self.close()


class _Loaded:
    """What a load hands back through its callbacks."""

    def __init__(self, tensor_type, device):
        self.tensor_type, self.device = tensor_type, device
        self.created, self.values, self.metadata = {}, [], {}
        self.error = None

    def alloc(self, _ctx, e):
        try:
            e = e.contents
            key = e.key.decode()
            shape = tuple(e.shape[i] for i in range(e.ndim))
            t = self._empty(DTYPE_NAMES[e.dtype], shape, e.device)
            self.created[key] = t
            return _data_ptr(t) or None  # NULL is fine for a tensor without elements
        except BaseException as x:  # surfaces after the load
            self.error = self.error or x
            return None

    def _empty(self, dtype, shape, device):
        if self.tensor_type == "numpy":
            np = sys.modules.get("numpy") or __import__("numpy")
            if not hasattr(np, dtype):
                raise TypeError("numpy has no %s: load with tensor_type='torch'" % dtype)
            return np.empty(shape, dtype=getattr(np, dtype))
        torch = _torch() or __import__("torch")
        dev = torch.device("cuda", device) if device >= 0 else torch.device("cpu")
        t = torch.empty(shape, dtype=getattr(torch, dtype), device=dev)
        if device >= 0:
            torch.cuda.current_stream(dev).synchronize()  # its memory may be in use until then
        return t

    def on_entry(self, _ctx, e):
        try:
            e = e.contents
            key = e.key.decode()
            if e.kind == TENSOR:
                value = self.created.get(key)
                if value is None:  # no alloc: ckfmt's memory, valid during this call only
                    shape = tuple(e.shape[i] for i in range(e.ndim))
                    value = self._empty(DTYPE_NAMES[e.dtype], shape, -1)
                    ctypes.memmove(_data_ptr(value), e.data, value.nbytes)
            elif e.kind in (INT, BOOL):
                value = e.int_value if e.kind == INT else bool(e.int_value)
            elif e.kind == FLOAT:
                value = e.float_value
            elif e.kind in (STRING, BYTES):
                raw = ctypes.string_at(e.bytes, e.size) if e.size else b""
                value = raw.decode("utf-8", "surrogatepass") if e.kind == STRING else \
                    (e.content_type.decode(), raw)
            else:
                value = None
            self.values.append((key, e.kind, value))
            return 0
        except BaseException as x:
            self.error = self.error or x
            return 1

    def on_metadata(self, _ctx, key, value):
        self.metadata[key.decode()] = value.decode()
        return 0


def _paths(metadata, key):
    try:
        return {tuple(_parse_path(p)) if p is not None else () for p in json.loads(metadata[key])}
    except (KeyError, ValueError, TypeError):
        return set()


class _Tree:
    """Sets values at key paths in a caller's nested dicts and lists."""

    def __init__(self, root, metadata):
        self.root = root
        self.int_keys = _paths(metadata, INT_KEY_DICTS)
        self.tuples = _paths(metadata, TUPLES)
        self.ordered = _paths(metadata, ORDERED_DICTS)

    def _key(self, container, where, comp):
        # A dict saved with int keys gets them back, as does one that has them.
        if isinstance(container, dict) and isinstance(comp, str):
            digits = comp[1:] if comp.startswith("-") else comp
            if digits.isdigit() and digits.isascii() and \
                    (where in self.int_keys or int(comp) in container):
                return int(comp)
        return comp

    def _writable(self, parent, k, node):
        """`node`, the child k of `parent`, as a container that takes values:
        a tuple becomes a list in its place (tuples come back at the end)."""
        if isinstance(node, tuple):
            node = list(node)
            _set(parent, k, node)
        return node

    def set(self, path, kind, value):
        node, where = self.root, ()
        for comp in path[:-1]:
            k = self._key(node, where, comp)
            node = self._writable(node, k, _get(node, k))
            if not isinstance(node, (dict, list)):
                raise CkfmtError(5, "%s is %s, not a container" % (_format_path(list(where) + [comp]),
                                                                  type(node).__name__))
            where += (comp,)
        k = self._key(node, where, path[-1])
        exists = _get(node, k)
        if kind == DICT:
            fresh = collections.OrderedDict() if tuple(path) in self.ordered else {}
            value = exists if isinstance(exists, dict) else fresh
        elif kind == LIST:
            value = exists if isinstance(exists, (list, tuple)) else []
        _set(node, k, value)

    def restore_tuples(self):
        # Deepest first: a tuple cannot take its elements afterwards.
        for p in sorted(self.tuples, key=len, reverse=True):
            node, where = self.root, ()
            for comp in p[:-1]:
                if not isinstance(node, (dict, list)):
                    break
                node = _get(node, self._key(node, where, comp))
                where += (comp,)
            if not isinstance(node, (dict, list)):
                continue  # not loaded (a prefix, an ignored entry)
            k = self._key(node, where, p[-1])
            if isinstance(_get(node, k), list):
                _set(node, k, tuple(_get(node, k)))


def _rebuild(state, loaded, allow_pickle, file_name):
    # Every value first, then the caller's state: a refused pickle changes
    # nothing beyond the tensors already filled in place.
    values = []
    for key, kind, value in loaded.values:
        if kind == BYTES:
            content_type, raw = value
            value = raw
            if content_type == "pickle":
                if not allow_pickle:
                    raise CkfmtError(9, "%s: %s holds a pickled object; load with "
                                        "allow_pickle=True if you trust this file"
                                     % (file_name, key))
                value = pickle.loads(raw)
        values.append((_parse_path(key), kind, value))
    tree = _Tree(state, loaded.metadata)
    for path, kind, value in values:
        tree.set(path, kind, value)
    tree.restore_tuples()
    return state


def _get(node, k):
    if isinstance(node, dict):
        return node.get(k)
    return node[k] if isinstance(k, int) and k < len(node) else None


def _set(node, k, value):
    if isinstance(node, dict):
        node[k] = value
    elif k == len(node):
        node.append(value)
    else:
        node[k] = value


def load(path, state=None, verify=True, unexpected="reconstruct", missing="error",
         device=None, prefixes=(), tensor_type=None, allow_pickle=False, lib=None):
    """Loads `path` into `state` (a dict; None: a new one) and returns it.

    The caller's tensors are filled in place (same dtype and shape, else
    CkfmtError "Mismatch"); its other values are replaced by the file's.
    unexpected: what the file has and `state` lacks: "reconstruct" (create
    it: tensors on `device`, e.g. "cuda:0", as torch tensors unless
    tensor_type="numpy"), "ignore", or "error". missing: what `state` has
    and the file lacks: "error" or "ignore". prefixes: load only what lies
    under these key paths ("optim", "model/layers/[0]").
    A state whose containers are tuples gets lists in their place where a
    value inside must be replaced."""
    if state is None:
        state = {}
    for name, value, allowed in (("unexpected", unexpected, UNEXPECTED), ("missing", missing, MISSING)):
        if value not in allowed:
            raise ValueError("%s=%r: expected one of %s" % (name, value, ", ".join(allowed)))
    flat = _Flat(state, for_load=True)
    if tensor_type is None:
        tensor_type = "torch" if _torch() is not None or device not in (None, "cpu") else "numpy"
    dev = -1
    if device not in (None, "cpu"):
        d = str(device)
        if not d.startswith("cuda"):
            raise ValueError("device %r: expected \"cpu\", \"cuda\" or \"cuda:N\"" % d)
        dev = int(d.split(":")[1]) if ":" in d else (_torch() or __import__("torch")).cuda.current_device()
        if tensor_type == "numpy":
            raise ValueError("numpy arrays live in host memory: device=%r needs torch" % d)
    loaded = _Loaded(tensor_type, dev)
    alloc, on_entry, on_md = _ALLOC(loaded.alloc), _ON_ENTRY(loaded.on_entry), \
        _ON_METADATA(loaded.on_metadata)
    pre = [(p if isinstance(p, str) else _format_path(p)).encode() for p in prefixes]
    pre_array = (ctypes.c_char_p * max(1, len(pre)))(*pre)
    opts = _LoadOptions(verify_checksums=int(bool(verify)), unexpected=UNEXPECTED[unexpected],
                        missing=MISSING[missing], reconstruct_device=dev, prefixes=pre_array,
                        n_prefixes=len(pre), alloc=alloc, on_entry=on_entry, on_metadata=on_md)
    _sync_devices(flat)
    err = ctypes.create_string_buffer(4096)
    rc = _lib(lib).ckfmt_load_entries(os.fsencode(path), flat.array(), len(flat.entries),
                                      ctypes.byref(opts), err, len(err))
    if loaded.error is not None:
        raise loaded.error
    _check(rc, err)
    for original, packed in flat.copies:
        original[...] = packed
    return _rebuild(state, loaded, allow_pickle, os.fsdecode(path))


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
            shape = tuple(e.shape[i] for i in range(e.ndim)) if e.kind == TENSOR else None
            value = {INT: e.int_value, BOOL: bool(e.int_value), FLOAT: e.float_value}.get(e.kind)
            if e.kind == STRING:
                value = ctypes.string_at(e.bytes, e.size).decode("utf-8", "surrogatepass") \
                    if e.size else ""
            nbytes = e.size if e.kind == BYTES else None
            if e.kind == TENSOR:
                nbytes = 1
                for d in shape:
                    nbytes *= d
                nbytes *= _ELEMENT_SIZES[e.dtype]
            entries.append(Entry(e.key.decode(), KIND_NAMES[e.kind],
                                 DTYPE_NAMES.get(e.dtype) if e.kind == TENSOR else None, shape,
                                 nbytes, e.content_type.decode() if e.kind == BYTES else None,
                                 value))
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


def verify(path, checksums_only=False, lib=None):
    """Verifies `path` as `ckfmt verify` does; raises CkfmtError if it is not
    valid. checksums_only: every checksum, no decoding (the disk's speed)."""
    err = ctypes.create_string_buffer(4096)
    f = _lib(lib).ckfmt_verify_checksums if checksums_only else _lib(lib).ckfmt_verify
    _check(f(os.fsencode(path), err, len(err)), err)
