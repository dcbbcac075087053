"""load(): the caller's tensors filled in place, the rest handed back
through the ABI's callbacks and set into the caller's containers."""

import collections
import ctypes
import json
import os
import pickle
import sys

from ._abi import (_ALLOC, _LAYOUT, _ON_ENTRY, _ON_METADATA, BYTES, DICT, DTYPE_NAMES, LIST,
                   MISSING, TENSOR, UNEXPECTED, CkfmtError, _check, _lib, _LoadOptions, _scalar)
from ._flatten import Shard, _data_ptr, _dtensor_box, _Flat, _sync_devices, _torch, gc_paused
from ._keys import INT_KEY_DICTS, ORDERED_DICTS, TUPLES, _format_path, _parse_path


class _Loaded:
    """What a load hands back through its callbacks."""

    def __init__(self, tensor_type, device, layout):
        self.tensor_type, self.device, self.layout = tensor_type, device, layout
        self.created, self.values, self.metadata = {}, [], {}
        self.shards = {}  # key -> how a created shard is handed back
        self.error = None

    def where(self, _ctx, e, offsets, lengths):
        """The caller's layout for a tensor it lacks: 0 whole, 1 a box."""
        try:
            e = e.contents
            key = e.key.decode()
            shape = tuple(e.shape[i] for i in range(e.ndim))
            spec = self.layout(key, shape)
            if spec is None:
                return 0
            first, second = spec
            if type(first).__name__ == "DeviceMesh":
                if (first.device_type == "cuda") != (self.device >= 0):
                    raise ValueError("%s: its mesh is on %s, the load creates tensors on %s: "
                                     "pass device= to match" % (
                                         key, first.device_type,
                                         "cuda:%d" % self.device if self.device >= 0 else "cpu"))
                offs, lens = _dtensor_box(key, shape, first, second)
                self.shards[key] = ("dtensor", first, tuple(second), shape)
            else:
                offs, lens = first, second
                self.shards[key] = ("shard", shape, tuple(offs))
            if len(offs) != len(shape) or len(lens) != len(shape):
                raise ValueError("%s: layout gave a box of %d offsets and %d lengths for a "
                                 "%d-d tensor" % (key, len(offs), len(lens), len(shape)))
            for i in range(len(shape)):
                offsets[i], lengths[i] = offs[i], lens[i]
            return 1
        except BaseException as x:  # surfaces after the load
            self.error = self.error or x
            return 2

    def _handed_back(self, key, t):
        how = self.shards.get(key)
        if how is None:
            return t
        if how[0] == "shard":
            return Shard(t, how[1], offsets=how[2])
        from torch.distributed.tensor import DTensor
        _, mesh, placements, shape = how
        stride = [1] * len(shape)
        for i in range(len(shape) - 2, -1, -1):
            stride[i] = stride[i + 1] * shape[i + 1]
        return DTensor.from_local(t, mesh, placements, run_check=False, shape=shape,
                                  stride=tuple(stride))

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
                value = self._handed_back(key, self.created[key])  # every one came from alloc
            elif e.kind == BYTES:
                raw = ctypes.string_at(e.bytes, e.size) if e.size else b""
                value = (e.content_type.decode(), raw)
            else:
                value = _scalar(e)
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
                raise CkfmtError(5, "%s is %s, not a container"
                                 % (_format_path(list(where) + [comp]), type(node).__name__))
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


def _rebuild(state, loaded):
    # Every value first, then the caller's state: an object that fails to
    # unpickle leaves the state as it was, but for the tensors filled in
    # place. (Without allow_pickle the library refused any pickle already.)
    values = []
    for key, kind, value in loaded.values:
        if kind == BYTES:
            content_type, value = value
            if content_type == "pickle":
                value = pickle.loads(value)
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


@gc_paused()
def load(path, state=None, verify=True, unexpected="reconstruct", missing="error",
         device=None, prefixes=(), tensor_type=None, allow_pickle=False, layout=None, lib=None):
    """Loads `path` into `state` (a dict; None: a new one) and returns it.

    The caller's tensors are filled in place (same dtype and shape, else
    CkfmtError "Mismatch"); its other values are replaced by the file's.
    unexpected: what the file has and `state` lacks: "reconstruct" (create
    it: tensors on `device`, e.g. "cuda:0", as torch tensors unless
    tensor_type="numpy"), "ignore", or "error". missing: what `state` has
    and the file lacks: "error" or "ignore". prefixes: load only what lies
    under these key paths ("optim", "model/layers/[0]").
    layout(key, global_shape): for each tensor `state` lacks, None (create
    it whole), (device_mesh, placements) (create this rank's part as a
    DTensor) or (offsets, lengths) (create that box as a Shard);
    optimizer_layout() makes one that shards an optimizer's state like its
    parameters. A state whose containers are tuples gets lists in their
    place where a value inside must be replaced."""
    if state is None:
        state = {}
    for name, value, allowed in (("unexpected", unexpected, UNEXPECTED),
                                 ("missing", missing, MISSING)):
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
        if tensor_type == "numpy":
            raise ValueError("numpy arrays live in host memory: device=%r needs torch" % d)
        torch = _torch() or __import__("torch")
        dev = int(d.split(":")[1]) if ":" in d else torch.cuda.current_device()
    loaded = _Loaded(tensor_type, dev, layout)
    alloc, on_entry, on_md = _ALLOC(loaded.alloc), _ON_ENTRY(loaded.on_entry), \
        _ON_METADATA(loaded.on_metadata)
    pre = [(p if isinstance(p, str) else _format_path(p)).encode() for p in prefixes]
    pre_array = (ctypes.c_char_p * max(1, len(pre)))(*pre)
    opts = _LoadOptions(verify_checksums=int(bool(verify)), unexpected=UNEXPECTED[unexpected],
                        missing=MISSING[missing], reconstruct_device=dev, prefixes=pre_array,
                        n_prefixes=len(pre), alloc=alloc, on_entry=on_entry, on_metadata=on_md,
                        refuse_content_type=None if allow_pickle else b"pickle",
                        layout=_LAYOUT(loaded.where) if layout else _LAYOUT())
    _sync_devices(flat)
    err = ctypes.create_string_buffer(4096)
    rc = _lib(lib).ckfmt_load_entries(os.fsencode(path), flat.array(), len(flat.entries),
                                      ctypes.byref(opts), err, len(err))
    if loaded.error is not None:
        raise loaded.error
    if rc and not allow_pickle and b'content type "pickle"' in err.value:
        raise CkfmtError(rc, err.value.decode("utf-8", "replace") +
                         "; load with allow_pickle=True if you trust this file")
    _check(rc, err)
    for original, packed in flat.copies:
        original[...] = packed
    return _rebuild(state, loaded)


def optimizer_layout(optimizer, prefix="optim", then=None):
    """A load() layout that creates a torch optimizer's per-parameter state
    (its state_dict() at `prefix`: "<prefix>/state/<i>/<name>") like the
    parameter it belongs to: as a DTensor of the parameter's mesh and
    placements where the parameter is a DTensor and the global shapes
    agree (moments), else whole (a step count). Other keys go to `then`
    (a layout) or are created whole. A fresh optimizer of an FSDP2 or
    tensor parallel model then gets its state back sharded as its first
    step would have made it."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    head = _parse_path(prefix) + ["state"]

    def layout(key, global_shape):
        path = _parse_path(key)
        if len(path) == len(head) + 2 and path[:len(head)] == head:
            i = path[len(head)]
            i = int(i) if isinstance(i, str) and i.isdigit() else i
            p = params[i] if isinstance(i, int) and 0 <= i < len(params) else None
            if hasattr(p, "placements") and tuple(p.shape) == tuple(global_shape):
                return p.device_mesh, p.placements
            return None
        return then(key, global_shape) if then else None
    return layout
