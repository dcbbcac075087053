"""The Python binding on a state of many small entries, beside torch.save.

A model of 10,000 tensors of 1 KiB and an Adam-like optimizer state of
10,000 int-keyed entries (a moment and a 0-d step tensor each): 40,000
entries, 30,000 tensors, where per-entry work in Python, not the disk,
decides the time. Prints, per run, the binding's save (and its share
spent flattening the state into descriptors), its load into an empty dict
(everything created), and torch.save / torch.load of the same state.

    python3 bench/compare/many_entries.py --lib build/engine/libckfmt.so [--dir DIR] [--runs 3]
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools",
                                "python"))
import ckfmt  # noqa: E402
from ckfmt._flatten import _Flat, gc_paused  # noqa: E402  the flattening step alone


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    g = torch.Generator().manual_seed(0)
    state = {"model": {f"layers.{i}.w{j}": torch.randn(256, generator=g)
                       for i in range(1000) for j in range(10)},
             "optim": {"state": {i: {"exp_avg": torch.randn(256, generator=g),
                                     "step": torch.tensor(1.0)} for i in range(10000)}}}
    work = tempfile.mkdtemp(prefix="ckfmt-many-entries-", dir=args.dir)
    ck, pt = os.path.join(work, "s.ckfmt"), os.path.join(work, "s.pt")
    rows = {k: [] for k in ("save", "flatten", "load", "torch.save", "torch.load")}

    def timed(name, f):
        t0 = time.perf_counter()
        out = f()
        rows[name].append(time.perf_counter() - t0)
        return out

    for _ in range(args.runs):
        timed("save", lambda: ckfmt.save(ck, state, lib=args.lib))
        timed("flatten", gc_paused()(lambda: _Flat(state, for_load=False).array()))
        back = timed("load", lambda: ckfmt.load(ck, lib=args.lib))
        timed("torch.save", lambda: torch.save(state, pt))
        timed("torch.load", lambda: torch.load(pt, weights_only=True))
    assert all(torch.equal(back["model"][k], v) for k, v in state["model"].items())
    assert sorted(back["optim"]["state"]) == list(range(10000))
    for f in (ck, pt):
        os.unlink(f)
    os.rmdir(work)
    print(f"40,000 entries (30,000 tensors of 1 KiB), {args.runs} runs; seconds, median (min-max)")
    for name, ts in rows.items():
        print(f"  {name:<12} {statistics.median(ts):6.3f} ({min(ts):.3f}-{max(ts):.3f})")
    med = {k: statistics.median(v) for k, v in rows.items()}
    print(f"  ckfmt speed-up: save {med['torch.save'] / med['save']:.2f}x, "
          f"load {med['torch.load'] / med['load']:.2f}x")


if __name__ == "__main__":
    main()
