"""save() and AsyncSaver."""

import ctypes
import json
import os

from ._abi import _AsyncOptions, _Metadata, _check, _lib
from ._dist import dist_save
from ._flatten import _Flat, _sync_devices, gc_paused


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


@gc_paused()
def save(path, state, codec="none", metadata=None, lib=None, comm=None, mode="flattened",
         memory_budget=0, check_contents=False):
    """Saves `state` (a dict) to `path` atomically: a failed save leaves what
    was at `path` as it was. codec: "none", "zstd" or "byteplane-zstd"
    (for float weights and optimizer state: smaller, and no slower than
    "none" where the disk is the limit; see SaveOptions::codec).
    metadata: a str -> str dict stored in the file's index.

    comm: a job of several processes saving one file together. Every rank
    calls save() with the same path and options, its own part of the state
    and a transport (TorchComm(group), or an object with `rank`, `size` and
    all_gather(send, recv), broadcast(buf, root), send(buf, dst, tag) and
    recv(buf, src, tag) on memoryviews). Shard tensors are this rank's part
    of a tensor, and the ranks' parts must cover it; everything else is
    written once, from the lowest rank that has it (ranks holding the same
    key must agree on its kind, dtype and shape, and with check_contents on
    its contents). mode: "flattened" (rank 0 gathers and writes, holding
    at most memory_budget bytes of gathered data, 0: 512 MiB; GPU tensors
    are copied to pinned host memory a bucket at a time and sent through
    comm) or "parallel" (every rank writes its own part; the directory
    must be shared). If one rank fails, every
    rank raises, naming the failing ranks, and nothing appears at `path`.
    Rank 0's metadata and typing (int keys, tuples) are the file's."""
    flat, md, n_md = _for_save(state, metadata)
    if comm is not None:
        dist_save(lib, comm, path, flat.array(), len(flat.entries), md, n_md, codec, mode,
                  memory_budget, check_contents)
        return
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

    @gc_paused()
    def prepare(self, state):
        flat = _Flat(state, for_load=False)
        err = ctypes.create_string_buffer(4096)
        _check(self._lib.ckfmt_async_prepare_entries(self._saver(), flat.array(),
                                                     len(flat.entries), err, len(err)), err)

    @gc_paused()
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
