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

A job of several processes saves one file together: every rank passes its
part (Shard tensors, or DTensors, for what it holds of a larger one) and a
transport, e.g. ckfmt.save(path, state, comm=ckfmt.TorchComm()); each rank
loads its own part back into Shards or DTensors, however the file was
sharded, and with layout=optimizer_layout(optimizer) gets a fresh
optimizer's state created sharded like its parameters.

Only the standard library is needed; numpy and torch are used when the
state holds their arrays. The library is found from `lib`, $CKFMT_LIB,
the build tree beside this file, or the system's library path.
"""

from ._abi import CkfmtError
from ._dist import TorchComm
from ._flatten import Shard
from ._listing import Entry, describe, inspect, verify
from ._load import load, optimizer_layout
from ._save import AsyncSaver, save

__all__ = ["save", "load", "describe", "inspect", "verify", "AsyncSaver", "Shard", "TorchComm",
           "optimizer_layout", "Entry", "CkfmtError"]
