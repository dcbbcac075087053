"""A Python state flattened into the ABI's entry descriptors: tensors
(torch.Tensor, numpy.ndarray, Shard), scalars, strings, bytes, containers."""

import collections
import contextlib
import ctypes
import gc
import pickle
import sys
import threading

from ._abi import (BOOL, BYTES, DICT, DTYPE_IDS, FLOAT, INT, INT64, LIST, NONE, STRING, TENSOR,
                   _Entry)
from ._keys import INT_KEY_DICTS, ORDERED_DICTS, TUPLES, _format_component


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


# How many gc_paused() scopes are open, on any thread, and whether the
# collector was enabled when the first of them opened: the last one to close
# restores that, so that one thread's call ending does not resume the
# collector under another's.
_gc_lock = threading.Lock()
_gc_open = 0
_gc_was_enabled = False


@contextlib.contextmanager
def gc_paused():
    """Python's cycle collector paused for one save or load, as a context or
    decorator: they make several short-lived objects per entry (descriptors,
    shapes, tensors), none of them in cycles, and with tens of thousands of
    entries the collector's passes over everything alive took a third of a
    save's time and of a load's. While paused, cyclic garbage made by other
    threads waits for the next pass. A collector already paused stays so;
    with calls on several threads, it resumes when the last of them ends."""
    global _gc_open, _gc_was_enabled
    with _gc_lock:
        if _gc_open == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_open += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_open -= 1
            if _gc_open == 0 and _gc_was_enabled:
                gc.enable()


def _torch():
    return sys.modules.get("torch")


def _dtensor_box(text, shape, mesh, placements):
    """(offsets, lengths): the box of a tensor of `shape` that this rank
    holds when laid out over `mesh` by `placements`, as DTensor puts it."""
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
    for p in placements:
        if p.is_partial():
            raise TypeError("%s: a DTensor with a Partial placement holds addends of its "
                            "values, not values; redistribute it first" % text)
        if type(p).__name__ == "_StridedShard":
            raise TypeError("%s: a DTensor with a strided shard placement (%s) holds no box "
                            "of its tensor" % (text, p))
    lengths, offsets = compute_local_shape_and_global_offset(shape, mesh, placements)
    return tuple(offsets), tuple(lengths)


def _dtensor_shard(v, text):
    """A torch DTensor as the Shard of its local tensor (a view of its
    data, so a load fills the DTensor); None for anything else."""
    dt = sys.modules.get("torch.distributed.tensor")
    if dt is None or not isinstance(v, dt.DTensor):
        return None
    offsets, _ = _dtensor_box(text, tuple(v.shape), v.device_mesh, v.placements)
    return Shard(v.to_local(), tuple(v.shape), offsets=offsets)


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
    """A state flattened into C descriptors, with everything they point to.
    Each value's key path travels beside its text form, which a child's
    extends by one component (formatting whole paths again cost most of a
    save of many small tensors)."""

    def __init__(self, state, for_load):
        self.for_load = for_load
        self.entries, self.keep, self.copies = [], [], []
        self.typing = {INT_KEY_DICTS: [], TUPLES: [], ORDERED_DICTS: []}
        if not isinstance(state, dict):
            raise TypeError("a state is a dict, not %s" % type(state).__name__)
        self._container(state, [], "")

    def _add(self, text, kind, **fields):
        key = text.encode()
        self.keep.append(key)
        fields.setdefault("device", -1)
        self.entries.append(_Entry(key=key, kind=kind, **fields))

    @staticmethod
    def _child(text, comp):
        return text + "/" + _format_component(comp) if text else _format_component(comp)

    def _container(self, value, path, text):
        where = text or "the root"
        if isinstance(value, dict):
            if path:
                self._add(text, DICT)
            keys = list(value.keys())
            ints = [k for k in keys if isinstance(k, int) and not isinstance(k, bool)]
            if ints and len(ints) != len(keys):
                raise TypeError("%s: a dict's keys must be all str or all int" % where)
            if not ints and any(not isinstance(k, str) for k in keys):
                bad = next(k for k in keys if not isinstance(k, str))
                raise TypeError("%s: key %r is a %s; keys are str or int"
                                % (where, bad, type(bad).__name__))
            if ints:
                self.typing[INT_KEY_DICTS].append(text if path else None)
            if isinstance(value, collections.OrderedDict):
                self.typing[ORDERED_DICTS].append(text if path else None)
            for k, v in value.items():
                k = str(k)
                self._value(v, path + [k], self._child(text, k))
        else:
            self._add(text, LIST)
            if isinstance(value, tuple):
                self.typing[TUPLES].append(text)
            for i, v in enumerate(value):
                self._value(v, path + [i], self._child(text, i))

    def _value(self, v, path, text):
        if isinstance(v, (dict, list, tuple)):
            return self._container(v, path, text)
        np = sys.modules.get("numpy")
        if np is not None and isinstance(v, np.generic):
            v = np.asarray(v)  # a numpy scalar: a 0-d array
        shard = _dtensor_shard(v, text)
        if shard is not None:
            return self._tensor(shard.tensor, text, shard)
        if _is_tensor(v):
            return self._tensor(v, text)
        if isinstance(v, Shard):
            return self._tensor(v.tensor, text, v)
        if v is None:
            return self._add(text, NONE)
        if isinstance(v, bool):
            return self._add(text, BOOL, int_value=int(v))
        if isinstance(v, int):
            if not INT64[0] <= v <= INT64[1]:
                raise OverflowError("%s: %d does not fit in 64 bits" % (text, v))
            return self._add(text, INT, int_value=v)
        if isinstance(v, float):
            return self._add(text, FLOAT, float_value=v)
        if isinstance(v, str):
            return self._text(text, STRING, v.encode("utf-8", "surrogatepass"), None)
        if isinstance(v, (bytes, bytearray, memoryview)):
            return self._text(text, BYTES, bytes(v), b"raw")
        return self._text(text, BYTES, b"" if self.for_load else pickle.dumps(v), b"pickle")

    def _text(self, text, kind, data, content_type):
        if self.for_load:
            data = b""  # a load's entries declare kinds only
        buf = ctypes.create_string_buffer(data, len(data) or 1)
        self.keep.append(buf)
        self._add(text, kind, bytes=ctypes.cast(buf, ctypes.c_void_p), size=len(data),
                  content_type=content_type)

    def _tensor(self, t, text, shard=None):
        if not _is_tensor(t):
            raise TypeError("%s: a Shard holds a tensor, not %s" % (text, type(t).__name__))
        name = _dtype_name(t)
        if name not in DTYPE_IDS:
            raise TypeError("%s: dtype %s has no ckfmt id" % (text, name))
        layout = str(getattr(t, "layout", "torch.strided"))
        device = str(getattr(t, "device", "cpu"))
        if layout != "torch.strided" or not (device == "cpu" or device.startswith("cuda")):
            raise TypeError("%s: a %s tensor on %s; ckfmt takes dense tensors in host or CUDA "
                            "memory" % (text, layout.replace("torch.", ""), device))
        dest = t
        if not _contiguous(t):
            # Saved from, or loaded into and copied back from, a packed copy.
            dest = t.contiguous() if hasattr(t, "contiguous") else \
                sys.modules["numpy"].ascontiguousarray(t)
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
        self._add(text, TENSOR, dtype=DTYPE_IDS[name], device=_device_of(t), ndim=len(t.shape),
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
