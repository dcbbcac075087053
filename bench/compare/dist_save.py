"""A sharded training state saved and loaded by several processes: ckfmt
through the Python binding (one file, parallel and flattened) beside
torch.distributed.checkpoint (DCP), on the same DTensors.

Every rank holds its rows (Shard(0) over a CPU device mesh, gloo) of
compare.py's state: bf16 weights and fp32 AdamW moments. A save is timed
from a barrier to the barrier after it, as the job waits for its slowest
rank; the page cache is dropped before every load, into DTensors of the
same layout whose pages are already touched. Prints medians (min-max) in
GiB/s of the state and ckfmt's speed-ups over DCP.

    python3 bench/compare/dist_save.py --lib build/engine/libckfmt.so [--ranks 2]
        [--size-gib 2] [--runs 5] [--dir DIR]
"""
import argparse
import multiprocessing
import os
import shutil
import statistics
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import make_state, sync_and_drop  # noqa: E402  compare.py's state and cache drop

import ckfmt  # noqa: E402  (compare.py put tools/python on the path)

SYSTEMS = ("ckfmt-parallel", "ckfmt-flattened", "dcp")


def rank_main(rank, args, init, results):
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    os.environ["CKFMT_LIB"] = args.lib
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=args.ranks)
    mesh = init_device_mesh("cpu", (args.ranks,))
    full = make_state(int(args.size_gib * (1 << 30)))
    state = {k: distribute_tensor(t, mesh, [Shard(0)]) for k, t in full.items()}
    dest = {k: distribute_tensor(torch.zeros_like(t), mesh, [Shard(0)]) for k, t in full.items()}
    del full
    comm = ckfmt.TorchComm()
    times = {s: ([], []) for s in SYSTEMS}
    for run in range(args.runs):
        for system in SYSTEMS:
            path = os.path.join(args.dir, "%s-%d" % (system, run))
            dist.barrier()
            t0 = time.perf_counter()
            if system == "dcp":
                dcp.save(state, checkpoint_id=path)
            else:
                ckfmt.save(path, state, comm=comm, mode=system.split("-")[1])
            dist.barrier()
            save_s = time.perf_counter() - t0
            if rank == 0:
                sync_and_drop(path)
            dist.barrier()
            t0 = time.perf_counter()
            if system == "dcp":
                dcp.load(dest, checkpoint_id=path)
            else:
                ckfmt.load(path, dest)
            dist.barrier()
            load_s = time.perf_counter() - t0
            for k in ("model.layers.0.w0", "optim.layers.0.w0.exp_avg"):
                assert torch.equal(dest[k].to_local(), state[k].to_local()), (system, k)
            times[system][0].append(save_s)
            times[system][1].append(load_s)
            dist.barrier()
            if rank == 0:
                shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
    if rank == 0:
        gib = sum(t.numel() * t.element_size() for t in state.values()) / (1 << 30)  # global
        results.put((gib, times))
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--size-gib", type=float, default=2.0)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    args.lib = os.path.abspath(args.lib)
    args.dir = tempfile.mkdtemp(prefix="ckfmt-dist-", dir=args.dir)
    try:
        ctx = multiprocessing.get_context("spawn")
        results = ctx.Queue()
        init = "file://" + os.path.join(args.dir, "rendezvous")
        procs = [ctx.Process(target=rank_main, args=(r, args, init, results))
                 for r in range(args.ranks)]
        for p in procs:
            p.start()
        gib, times = results.get()
        for p in procs:
            p.join()
    finally:
        shutil.rmtree(args.dir, ignore_errors=True)
    print("%d ranks (gloo), %.2f GiB state in DTensors sharded by rows, %d runs, torch %s"
          % (args.ranks, gib, args.runs, torch.__version__))
    print("%-16s %28s %28s" % ("system", "save GiB/s (med, min-max)", "load GiB/s (med, min-max)"))

    def rate(ts):
        return "%.3f (%.3f-%.3f)" % (gib / statistics.median(ts), gib / max(ts), gib / min(ts))

    for s in SYSTEMS:
        print("%-16s %28s %28s" % (s, rate(times[s][0]), rate(times[s][1])))
    for s in SYSTEMS[:2]:
        print("%s speed-up vs dcp: save %.2fx, load %.2fx" % (
            s, statistics.median(times["dcp"][0]) / statistics.median(times[s][0]),
            statistics.median(times["dcp"][1]) / statistics.median(times[s][1])))


if __name__ == "__main__":
    main()
