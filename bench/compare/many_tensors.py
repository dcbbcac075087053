"""Converting checkpoints of many small tensors: ckfmt convert against the
same conversion done with torch's own tools, in one run.

Three inputs, made here: a torch.distributed.checkpoint (DCP) directory of
--dcp-tensors 4-element tensors (dcp.save, one process), a safetensors
repo of --st-tensors one-element tensors in --st-shards shards with a
model.safetensors.index.json, and one safetensors file of as many. Each is
converted to one ckfmt file by `ckfmt convert` and, as the baseline, to
one file by the library that reads it: torch's dcp_to_torch_save, and
safetensors load_file of every shard (or the file) then save_file of all
tensors. The other way, the DCP state as one ckfmt file (and as one .pt
for the baseline) goes out to a DCP directory: `ckfmt convert --to dcp`
against torch.load and dcp.save. Outputs are fsynced by both. Prints
medians of --runs runs (min-max) and the baseline's time over ckfmt's.
Costs here grow with the number of tensors, not bytes: this is what a
many-expert model's checkpoint stresses.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
import warnings

import torch

warnings.filterwarnings("ignore")


def fsync_file(p):
    fd = os.open(p, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)


def make_dcp(path, n):
    import torch.distributed.checkpoint as dcp
    dcp.save({"model": {f"layers.{i}.w": torch.randn(4) for i in range(n)}}, checkpoint_id=path)


def make_st_repo(path, n, shards):
    from safetensors.torch import save_file
    os.makedirs(path)
    weight_map = {}
    per = (n + shards - 1) // shards
    for s in range(shards):
        name = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        keys = [f"layers.{i}.w" for i in range(s * per, min(n, (s + 1) * per))]
        save_file({k: torch.randn(1) for k in keys}, os.path.join(path, name))
        weight_map.update({k: name for k in keys})
    with open(os.path.join(path, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": dict(sorted(weight_map.items()))}, f)


def make_st_file(path, n):
    from safetensors.torch import save_file
    save_file({f"layers.{i}.w": torch.randn(1) for i in range(n)}, path)


def st_resave(src, dst):
    from safetensors.torch import load_file, save_file
    save_file(load_file(src), dst)
    fsync_file(dst)


def torch_dcp_convert(src, dst):
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    dcp_to_torch_save(src, dst)
    fsync_file(dst)


def torch_to_dcp(src, dst):
    import torch.distributed.checkpoint as dcp
    dcp.save(torch.load(src, weights_only=True), checkpoint_id=dst)


def remove(path):
    if os.path.isdir(path):
        shutil.rmtree(path)
    elif os.path.exists(path):
        os.unlink(path)


def st_consolidate(src, dst):
    from safetensors.torch import load_file, save_file
    with open(os.path.join(src, "model.safetensors.index.json")) as f:
        shards = sorted(set(json.load(f)["weight_map"].values()))
    merged = {}
    for s in shards:
        merged.update(load_file(os.path.join(src, s)))
    save_file(merged, dst)
    fsync_file(dst)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True, help="the ckfmt command-line tool")
    ap.add_argument("--dir", default="")
    ap.add_argument("--dcp-tensors", type=int, default=30000)
    ap.add_argument("--st-tensors", type=int, default=90000)
    ap.add_argument("--st-shards", type=int, default=100)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="ckfmt-many-", dir=args.dir or None)
    try:
        dcp_dir, st_dir = os.path.join(work, "dcp"), os.path.join(work, "st")
        st_file = os.path.join(work, "one.safetensors")
        make_dcp(dcp_dir, args.dcp_tensors)
        make_st_repo(st_dir, args.st_tensors, args.st_shards)
        make_st_file(st_file, args.st_tensors)
        # The DCP state as one file of each kind, for the way back out.
        one_ckfmt, one_pt = os.path.join(work, "one.ckfmt"), os.path.join(work, "one.pt")
        subprocess.run([args.tool, "convert", dcp_dir, one_ckfmt, "-q"], check=True)
        torch_dcp_convert(dcp_dir, one_pt)
        # (what, source, baseline name, baseline, its output, ckfmt's output, ckfmt arguments)
        cases = [
            (f"DCP dir, {args.dcp_tensors} tensors", dcp_dir, "torch dcp_to_torch_save",
             torch_dcp_convert, "out.pt", "out.ckfmt", []),
            (f"safetensors repo, {args.st_tensors} tensors in {args.st_shards} shards", st_dir,
             "safetensors load_file + save_file", st_consolidate, "out.safetensors", "out.ckfmt",
             []),
            (f"safetensors file, {args.st_tensors} tensors", st_file,
             "safetensors load_file + save_file", st_resave, "out.safetensors", "out.ckfmt", []),
            (f"to a DCP dir, {args.dcp_tensors} tensors (ckfmt file / .pt)", one_ckfmt,
             "torch.load + dcp.save", lambda src, dst: torch_to_dcp(one_pt, dst), "out_dcp_torch",
             "out_dcp", ["--to", "dcp"]),
        ]
        print(f"many_tensors: torch {torch.__version__}, {args.runs} runs, dir {work}")
        for what, src, base_name, base, base_out, ckfmt_out, ckfmt_args in cases:
            times = {"ckfmt": [], "base": []}
            for run in range(args.runs):
                for who in (["ckfmt", "base"] if run % 2 == 0 else ["base", "ckfmt"]):
                    out = os.path.join(work, ckfmt_out if who == "ckfmt" else base_out)
                    remove(out)
                    t0 = time.perf_counter()
                    if who == "ckfmt":
                        subprocess.run([args.tool, "convert", src, out, "-q", *ckfmt_args],
                                       check=True)
                    else:
                        base(src, out)
                    times[who].append(time.perf_counter() - t0)
            med = {k: statistics.median(v) for k, v in times.items()}
            print(f"{what}:")
            print(f"  {'ckfmt convert':<34} {med['ckfmt']:7.2f} s ({min(times['ckfmt']):.2f}-"
                  f"{max(times['ckfmt']):.2f})")
            print(f"  {base_name:<34} {med['base']:7.2f} s ({min(times['base']):.2f}-"
                  f"{max(times['base']):.2f})")
            print(f"  ckfmt faster by {med['base'] / med['ckfmt']:.2f}x")
    finally:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
