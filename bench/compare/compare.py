"""ckfmt against torch.save, torch.distributed.checkpoint and safetensors.

Every system saves and loads the same tensors in the same run. Saves are
timed to durability (fsync) for all systems, each into a path whose old
output was removed before the clock started, and each after an untimed raw
write of the same size (see warm_up_write); before every load the files'
pages are dropped from the page cache (posix_fadvise DONTNEED after fsync),
so loads come from the disk. Loads fill preallocated tensors where the
system can (ckfmt, DCP, safetensors); torch.load allocates its own.
Prints medians of --runs runs with min-max, and ckfmt's ratio to each.

--device cuda puts the state and the load destinations on the GPU: every
system then saves from and loads into GPU memory as its users call it
(ckfmt through its Python binding, tools/python/ckfmt, which hands
the GPU pointers to libckfmt.so; torch.save of CUDA tensors,
torch.load restoring them to the GPU, DCP into CUDA tensors, safetensors
with device="cuda"); each operation ends with torch.cuda.synchronize().
"""
import argparse
import functools
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools",
                                "python"))
import ckfmt  # noqa: E402  the binding users call: tools/python/ckfmt


def make_state(total_bytes):
    """bf16 weights ~ N(0, 0.02), fp32 AdamW moments: exp_avg ~ N(0, 1e-3),
    exp_avg_sq small and positive. 10 bytes per parameter."""
    g = torch.Generator().manual_seed(0)
    params = total_bytes // 10
    shapes, left, i = [], params, 0
    while left > 0:
        rows = min(4096, max(1, left // 4096))
        shapes.append((f"layers.{i // 4}.w{i % 4}", (rows, 4096)))
        left -= rows * 4096
        i += 1
    sd = {}
    for name, shape in shapes:
        sd[f"model.{name}"] = (torch.randn(shape, generator=g) * 0.02).to(torch.bfloat16)
        sd[f"optim.{name}.exp_avg"] = torch.randn(shape, generator=g) * 1e-3
        sd[f"optim.{name}.exp_avg_sq"] = (torch.randn(shape, generator=g) * 1e-3) ** 2
    return sd


def nbytes(sd):
    return sum(t.numel() * t.element_size() for t in sd.values())


def sync_and_drop(path):
    paths = [path] if os.path.isfile(path) else [os.path.join(r, f) for r, _, fs in os.walk(path) for f in fs]
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)


def touched_like(sd):
    """Destinations whose pages are already touched: the first write to a
    fresh page costs whoever makes it (on this project's VMs up to 6x the
    load itself, the host backing the page only then), and only the first
    system to load into these tensors would pay it."""
    return {k: torch.zeros_like(t) for k, t in sd.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--raw-tool", default="")
    ap.add_argument("--dir", default="")
    ap.add_argument("--size-gib", type=float, default=2.0)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--device", default="cpu", help="cpu, or cuda: the state on the GPU")
    args = ap.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda":
        device = torch.device("cuda", torch.cuda.current_device() if device.index is None else device.index)
        torch.cuda.set_device(device)

    def synced(f):
        """f, ending with the GPU's queued work done (a no-op on the host)."""
        if device.type != "cuda":
            return f
        def g(*a, **kw):
            out = f(*a, **kw)
            torch.cuda.synchronize()
            return out
        return g
    torch.set_num_threads(os.cpu_count())
    import safetensors.torch as st
    import torch.distributed.checkpoint as dcp

    ck_save = functools.partial(ckfmt.save, lib=args.lib)
    ck_load = functools.partial(ckfmt.load, lib=args.lib)
    workdir = tempfile.mkdtemp(prefix="ckfmt-compare-", dir=args.dir or None)
    sd = {k: t.to(device) for k, t in make_state(int(args.size_gib * (1 << 30))).items()}
    size = nbytes(sd)
    dst = touched_like(sd)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "host memory"
    print(f"state: {len(sd)} tensors, {size / 2**30:.2f} GiB in {where}; dir {workdir}; "
          f"torch {torch.__version__}")

    def fsync_file(p):
        fd = os.open(p, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)

    def torch_save(p):
        torch.save(sd, p)
        fsync_file(p)

    def torch_load(p):
        return torch.load(p, weights_only=True)

    def dcp_save(p, **writer_options):
        dcp.save(sd, storage_writer=dcp.FileSystemWriter(p, **writer_options))
        for r, _, fs in os.walk(p):
            for f in fs:
                fsync_file(os.path.join(r, f))

    def dcp_load(p):
        dcp.load(dst, checkpoint_id=p)

    def sf_save(p):
        st.save_file(sd, p)
        fsync_file(p)

    def sf_load(p):
        from safetensors import safe_open
        with safe_open(p, framework="pt", device=str(device)) as f:
            for k in f.keys():
                dst[k].copy_(f.get_tensor(k))

    systems = {
        "ckfmt": (lambda p: ck_save(p, sd), lambda p: ck_load(p, dst), "a.ckfmt"),
        "ckfmt-byteplane": (lambda p: ck_save(p, sd, codec="byteplane-zstd"),
                            lambda p: ck_load(p, dst), "b.ckfmt"),
        "torch.save": (torch_save, torch_load, "a.pt"),
        "dcp": (dcp_save, dcp_load, "dcp"),
        # DCP as a user who tunes it saves: one writer thread per core (its
        # default is one). The targets are against the default; this row
        # says how much of the gap tuning closes.
        "dcp-threads": (lambda p: dcp_save(p, thread_count=os.cpu_count()), dcp_load, "dcp-t"),
        "safetensors": (sf_save, sf_load, "a.safetensors"),
    }
    systems = {n: (synced(save), synced(load), f) for n, (save, load, f) in systems.items()}
    rows = ["ckfmt", "ckfmt-nocheck"] + [n for n in systems if n != "ckfmt"]
    times = {name: {"save": [], "load": []} for name in rows}
    raw_next_to_load = []  # GiB/s of whole 4 MiB blocks
    raw_next_to_save = []  # GiB/s, each after its own warm-up, as the saves
    checksum_cost = []     # per run: load time with checksums / without, paired

    def raw_tool(*tool_args, check=False):
        """Runs ckfmt-bench-e2e with `tool_args`; the GiB/s of its RAW line
        by name (write_gibs, read_gibs), or {} without the tool."""
        if not (args.raw_tool and os.access(args.raw_tool, os.X_OK)):
            return {}
        out = subprocess.run([args.raw_tool, *tool_args], capture_output=True, text=True,
                             check=check)
        for line in out.stdout.splitlines():
            if line.startswith("RAW "):  # RAW write_gibs=.. read_gibs=..
                return {k: float(v) for k, v in (kv.split("=") for kv in line.split()[1:])}
        return {}

    def raw_read(p):
        return raw_tool("--raw-read", p).get("read_gibs")

    def raw_write():
        """A timed raw write of the state's size, prepared as every save is."""
        os.sync()
        warm_up_write()
        return raw_tool("--raw-write", os.path.join(workdir, "paired.bin"),
                        "--size-gib", str(args.size_gib)).get("write_gibs")

    def warm_up_write():
        """An untimed raw write of the state's size, before every save alike:
        on this virtual disk the first write after reads runs up to 25%
        slower, and every save here follows the previous system's load. It
        spares only writers fast enough to feel the disk."""
        raw_tool("--raw-write", os.path.join(workdir, "warm-up.bin"),
                 "--size-gib", str(args.size_gib), check=True)

    for run in range(args.runs):
        for name, (save, load, fname) in systems.items():
            p = os.path.join(workdir, fname)
            # A raw write next to ckfmt's save, before it in even runs and
            # after it in odd ones: the disk's speed drifts within a run.
            if name == "ckfmt" and run % 2 == 0:
                raw_next_to_save.append(raw_write())
            if save:
                # The last run's output goes first, untimed, for every system
                # alike: this disk is mounted with online discard, and freeing
                # 2 GiB inside a timed save (an overwrite, a rename over the old
                # file) would charge that save for the TRIMs.
                if os.path.isdir(p):
                    shutil.rmtree(p)
                elif os.path.exists(p):
                    os.unlink(p)
                os.sync()
                warm_up_write()
                t0 = time.perf_counter()
                save(p)
                times[name]["save"].append(time.perf_counter() - t0)
            if name == "ckfmt" and run % 2 == 1:
                raw_next_to_save.append(raw_write())
            sync_and_drop(p)
            t0 = time.perf_counter()
            out = load(p)
            times[name]["load"].append(time.perf_counter() - t0)
            del out
            if name == "ckfmt":
                # The same file read raw, next to its load: the disk's speed
                # drifts within a run, so only this pairing isolates ckfmt's share.
                raw_next_to_load.append(raw_read(p))
                # The checksums' cost: ckfmt's file loaded with and without
                # them, each from a dropped cache after a read (the raw one,
                # then each other), in alternating order. The timed load above
                # follows a save, and this disk reads slower after writes, so
                # it is no fair partner for an unchecked load.
                pair = {}
                for verify in ((True, False) if run % 2 == 0 else (False, True)):
                    sync_and_drop(p)
                    t0 = time.perf_counter()
                    synced(ck_load)(p, dst, verify=verify)
                    pair[verify] = time.perf_counter() - t0
                times["ckfmt-nocheck"]["load"].append(pair[False])
                checksum_cost.append(pair[True] / pair[False])
            if run == 0 and name.startswith("ckfmt"):
                bad = [k for k in sd if not torch.equal(sd[k], dst[k])]
                assert not bad, f"{name}: {len(bad)} tensors differ after load, e.g. {bad[0]}"
        print(f"run {run + 1}/{args.runs} done", flush=True)

    dst.clear()  # the load destinations, freed for the async part
    async_saves(sd, workdir, args.runs, args.lib, dcp)
    raw = raw_tool("--raw-only", "--dir", workdir, "--size-gib", str(min(args.size_gib, 2.0)))
    shutil.rmtree(workdir)

    gib = size / 2**30
    def stats(ts):
        r = [gib / t for t in ts]
        return statistics.median(r), min(r), max(r)
    print(f"\n{'system':<16} {'save GiB/s (med, min-max)':>28} {'load GiB/s (med, min-max)':>28}")
    for name in times:
        cells = []
        for op in ("save", "load"):
            if times[name][op]:
                m, lo, hi = stats(times[name][op])
                cells.append(f"{m:7.3f} ({lo:.3f}-{hi:.3f})")
            else:
                cells.append("-")
        print(f"{name:<16} {cells[0]:>28} {cells[1]:>28}")
    if raw:
        print(f"{'raw disk':<16} {raw['write_gibs']:7.3f}{'':>21} {raw['read_gibs']:7.3f}")
    med = {n: {op: statistics.median(v) for op, v in d.items() if v} for n, d in times.items()}
    print("\nckfmt speed-up (median time of the other / median time of ckfmt):")
    for other in ("torch.save", "dcp", "dcp-threads", "safetensors"):
        print(f"  vs {other:<12} save {med[other]['save'] / med['ckfmt']['save']:6.3f}x   "
              f"load {med[other]['load'] / med['ckfmt']['load']:6.3f}x")
    # Users who turn compression on get these; compressed bytes are fewer
    # for the disk, so the save can outrun it (logical bytes per second).
    print("ckfmt byte-plane zstd speed-up (median time of the other / of ckfmt-byteplane):")
    for other in ("torch.save", "dcp", "dcp-threads", "safetensors"):
        print(f"  vs {other:<12} save {med[other]['save'] / med['ckfmt-byteplane']['save']:6.3f}x   "
              f"load {med[other]['load'] / med['ckfmt-byteplane']['load']:6.3f}x")
    print(f"  checksum cost on load: {statistics.median(checksum_cost):.3f}x (median over runs of"
          f" the time with checksums / without, paired: {' '.join(f'{c:.3f}' for c in checksum_cost)})")
    paired = [gib / t / r for t, r in zip(times["ckfmt"]["save"], raw_next_to_save) if r]
    if paired:
        print(f"  ckfmt save / raw write next to it (median of runs): "
              f"{statistics.median(paired):.3f}  [{' '.join(f'{x:.2f}' for x in sorted(paired))}]")
    paired = [gib / t / r for t, r in zip(times["ckfmt"]["load"], raw_next_to_load) if r]
    if paired:
        print(f"  ckfmt load / raw read of the same file next to it (median of runs): "
              f"{statistics.median(paired):.3f}  [{' '.join(f'{x:.2f}' for x in sorted(paired))}]")
    if raw:
        print(f"  ckfmt save / raw write at the end: "
              f"{gib / med['ckfmt']['save'] / raw['write_gibs']:.3f}; "
              f"load / raw read: {gib / med['ckfmt']['load'] / raw['read_gibs']:.3f}")
        print(f"  byteplane save (logical) / raw write: "
              f"{gib / med['ckfmt-byteplane']['save'] / raw['write_gibs']:.3f}; "
              f"load / raw read: {gib / med['ckfmt-byteplane']['load'] / raw['read_gibs']:.3f}")


def async_saves(sd, workdir, runs, lib, dcp):
    """How long an async save blocks its caller: ckfmt's AsyncSaver, its
    snapshot memory prepared at start-up as its users are told to, and
    dcp.async_save, each beside a copy of the state into preallocated host
    tensors (pinned for a GPU state): the least an async save must do
    before it returns. Each save is waited for before the next step."""
    cuda = any(t.is_cuda for t in sd.values())
    host = {k: torch.zeros(t.shape, dtype=t.dtype, pin_memory=cuda) for k, t in sd.items()}
    saver = ckfmt.AsyncSaver(lib=lib)
    saver.prepare(sd)
    blocked = {"copy": [], "ckfmt": [], "dcp": []}

    def timed(name, f):
        t0 = time.perf_counter()
        out = f()
        if cuda:
            torch.cuda.synchronize()
        blocked[name].append(time.perf_counter() - t0)
        return out

    for _ in range(runs):
        timed("copy", lambda: [host[k].copy_(t) for k, t in sd.items()])
        p = os.path.join(workdir, "async.ckfmt")
        timed("ckfmt", lambda: saver.save(p, sd))
        saver.wait()
        os.unlink(p)
        p = os.path.join(workdir, "async-dcp")
        timed("dcp", lambda: dcp.async_save(sd, checkpoint_id=p)).result()
        shutil.rmtree(p)
    saver.close()
    med = {k: statistics.median(v) for k, v in blocked.items()}
    print("\nasync save, caller blocked (s, median and min-max of runs):")
    for name, label in (("copy", "copy of the state into host memory"),
                        ("ckfmt", "ckfmt AsyncSaver.save"), ("dcp", "dcp.async_save")):
        ratio = "" if name == "copy" else f"   {med[name] / med['copy']:.2f}x the copy"
        print(f"  {label:<36} {med[name]:7.3f} ({min(blocked[name]):.3f}-"
              f"{max(blocked[name]):.3f}){ratio}")
    print(f"  ckfmt speed-up vs dcp.async_save (blocked time): {med['dcp'] / med['ckfmt']:.2f}x")


if __name__ == "__main__":
    main()
