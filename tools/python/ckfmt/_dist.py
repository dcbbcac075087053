"""Saves spread over the processes of a job: the transport a distributed
save runs its collectives over (the caller's, e.g. a torch.distributed
process group), and the save itself."""

import ctypes
import os

from ._abi import _ALL_GATHER, _BROADCAST, _POINT, CkfmtError, _CommOps, _DistOptions, _lib

MODES = {"flattened": 0, "parallel": 1}


class TorchComm:
    """ckfmt's transport over a torch.distributed process group (None: the
    default one) whose backend takes CPU tensors, as gloo does; for a job
    whose default group is NCCL-only, pass
    torch.distributed.new_group(backend="gloo")."""

    def __init__(self, group=None):
        import torch.distributed as dist
        self._dist, self._group = dist, group
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)

    def _peer(self, r):  # torch.distributed takes global ranks
        return r if self._group is None else self._dist.get_global_rank(self._group, r)

    @staticmethod
    def _tensor(view):
        import torch
        return torch.frombuffer(view, dtype=torch.uint8)

    def all_gather(self, send, recv):
        n, out = len(send), self._tensor(recv)
        parts = [out[r * n:(r + 1) * n] for r in range(self.size)]
        self._dist.all_gather(parts, self._tensor(send), group=self._group)

    def broadcast(self, buf, root):
        self._dist.broadcast(self._tensor(buf), src=self._peer(root), group=self._group)

    def send(self, buf, dst, tag):
        self._dist.send(self._tensor(buf), dst=self._peer(dst), group=self._group, tag=tag)

    def recv(self, buf, src, tag):
        self._dist.recv(self._tensor(buf), src=self._peer(src), group=self._group, tag=tag)


class _Transport:
    """A comm object's methods as the C ABI's operations. The memoryviews
    they get are valid during the call only; an exception fails the
    operation, and save() raises it as the cause of ckfmt's error."""

    def __init__(self, comm):
        self.comm, self.error = comm, None
        self.ops = _CommOps(None, comm.rank, comm.size, _ALL_GATHER(self._all_gather),
                            _BROADCAST(self._broadcast), _POINT(self._send), _POINT(self._recv))

    @staticmethod
    def _view(ptr, n):
        return memoryview((ctypes.c_uint8 * n).from_address(ptr)).cast("B")

    def _run(self, op):
        try:
            op()
            return 0
        except BaseException as x:
            self.error = self.error or x
            return 1

    # Every rank passes the same size to a collective: one without bytes is
    # skipped everywhere, so no transport sees an empty buffer.
    def _all_gather(self, _ctx, send, n, recv):
        return self._run(lambda: n and self.comm.all_gather(
            self._view(send, n), self._view(recv, n * self.comm.size)))

    def _broadcast(self, _ctx, data, n, root):
        return self._run(lambda: n and self.comm.broadcast(self._view(data, n), root))

    def _send(self, _ctx, data, n, dst, tag):
        return self._run(lambda: self.comm.send(self._view(data, n), dst, tag))

    def _recv(self, _ctx, data, n, src, tag):
        return self._run(lambda: self.comm.recv(self._view(data, n), src, tag))


def dist_save(lib, comm, path, entries, n, metadata, n_metadata, codec, mode, memory_budget,
              check_contents):
    """ckfmt_dist_save_entries over `comm`; raises CkfmtError (caused by the
    transport's exception where it failed)."""
    if mode not in MODES:
        raise ValueError("mode=%r: expected one of %s" % (mode, ", ".join(MODES)))
    lib = _lib(lib)
    transport = _Transport(comm)
    err = ctypes.create_string_buffer(4096)
    handle = ctypes.c_void_p()
    rc = lib.ckfmt_comm_new(ctypes.byref(transport.ops), ctypes.byref(handle), err, len(err))
    if rc == 0:
        options = _DistOptions(MODES[mode], memory_budget, int(bool(check_contents)))
        try:
            rc = lib.ckfmt_dist_save_entries(handle, os.fsencode(path), entries, n, metadata,
                                             n_metadata, codec.encode(), ctypes.byref(options),
                                             err, len(err))
        finally:
            lib.ckfmt_comm_free(handle)
    if rc:
        raise CkfmtError(rc, err.value.decode("utf-8", "replace")) from transport.error
