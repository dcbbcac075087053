#!/usr/bin/env python3
"""Live check of `ckfmt convert` output against torch itself.

For each committed fixture: convert it to ckfmt, then ckfmt -> .pt,
ckfmt -> .safetensors and ckfmt -> a DCP directory with the converter, and
load those with torch.load(weights_only=True), safetensors.torch.load_file
and DCP's dcp_to_torch_save. Every tensor (dtype, shape, XXH3 of its bytes)
and value must match the fixture's manifest. The MLP fixture's model and
optimizer state must load into a fresh model and AdamW, from the .pt and
through dcp.load from the DCP directory; the tensor-parallel fixture's DCP
output, whose tensors keep their shards as chunks, must load on 2 gloo
ranks into DTensors split other ways. Needs a Python with torch, safetensors and xxhash (the fixtures venv);
CTest registers this only when configure finds one.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # keep tests/fixtures free of __pycache__
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "fixtures"))
import make_fixtures  # noqa: E402  (walk / tensor_info: the manifest's own rules)

FIXTURES = ["mlp_adamw.pt", "dtypes.pt", "views.pt", "params.pt", "legacy.pt", "model.safetensors",
            "sharded_st", "dcp_fsdp2", "dcp_tp", "dcp_safetensors"]


def load_pt(path):
    """torch.load(weights_only=True); torch before 2.5 refuses the newer
    unsigned dtypes there (torch.uint16 and up) in any file, its own
    included, so those files are loaded without it."""
    import torch
    try:
        return torch.load(path, weights_only=True)
    except Exception as e:  # noqa: BLE001
        if not refuses_new_unsigned(e):
            raise
        print(f"note: torch {torch.__version__} refuses torch.uint16-64 under weights_only; "
              f"{os.path.basename(path)} loaded without it")
        return torch.load(path, weights_only=False)


def refuses_new_unsigned(error):
    """Whether `error` is an older torch's weights_only refusal of the
    unsigned dtypes it added in 2.3 (its DCP reads every tensor that way)."""
    inner = getattr(error, "failures", {}).values()  # DCP's CheckpointException, per rank
    return any(f"GLOBAL torch.uint{n} " in str(e) for e in (error, *inner) for n in (16, 32, 64))


def dcp_to_torch_save_before_2_3(dcp_dir, out):
    """What torch 2.3's dcp_to_torch_save does, with the API before it: a
    single-process load of every item into tensors made from .metadata
    (bytes items replace their placeholder), unflattened as saved."""
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint._nested_dict import unflatten_state_dict
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata
    reader = dcp.FileSystemReader(dcp_dir)
    meta = reader.read_metadata()
    flat = {k: torch.empty(m.size, dtype=m.properties.dtype)
            if isinstance(m, TensorStorageMetadata) else None
            for k, m in meta.state_dict_metadata.items()}
    dcp.load_state_dict(flat, reader, no_dist=True,
                        planner=DefaultLoadPlanner(flatten_state_dict=False))
    torch.save(unflatten_state_dict(flat, meta.planner_data), out)


def summarize(obj):
    tensors, values = {}, {}
    make_fixtures.walk(obj, [], tensors, values)
    return tensors, values


def reshard_worker(rank, port, dcp_dir, manifest_path, result_file):
    """Loads the DCP output of the tensor-parallel fixture on 2 gloo ranks
    into DTensors split other ways than it was saved, and checks the full
    values against the manifest."""
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    try:
        from torch.distributed.tensor import Shard, distribute_tensor
    except ImportError:  # torch before 2.5
        from torch.distributed._tensor import Shard, distribute_tensor
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    mesh = init_device_mesh("cpu", (2,))
    layouts = {"colwise.weight": ((4, 5), torch.float32, Shard(0)),
               "rowwise.weight": ((5, 6), torch.bfloat16, Shard(1)),
               "heads": ((2, 3, 7), torch.int32, Shard(1)),
               "bias": ((6,), torch.float64, Shard(0))}
    state = {"model": {k: distribute_tensor(torch.zeros(shape, dtype=dt), mesh, [p])
                       for k, (shape, dt, p) in layouts.items()},
             "step": 0}
    dcp.load(state, checkpoint_id=dcp_dir)
    full = {k: v.full_tensor() for k, v in state["model"].items()}
    if rank == 0:
        with open(manifest_path) as f:
            want = json.load(f)
        bad = [k for k, t in full.items()
               if make_fixtures.tensor_info(t) != want["tensors"]["model." + k]]
        if state["step"] != 7:
            bad.append("step")
        with open(result_file, "w") as f:
            f.write(",".join(bad) if bad else "ok")
    dist.barrier()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckfmt", required=True, help="the ckfmt binary")
    ap.add_argument("--fixtures", required=True)
    args = ap.parse_args()
    import warnings
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException
    try:
        from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    except ImportError:  # torch before 2.3
        dcp_to_torch_save = dcp_to_torch_save_before_2_3
    from safetensors.torch import load_file
    warnings.filterwarnings("ignore")  # DCP warns that no process group is set up

    passed, failed = 0, 0
    skipped = []

    def check(name, ok, detail=""):
        nonlocal passed, failed
        if ok:
            passed += 1
        else:
            failed += 1
            print(f"FAIL {name}: {detail}")

    def differing(got, want):
        return [k for k in set(got) | set(want) if got.get(k) != want.get(k)][:6]

    def check_against_manifest(name, obj, manifest):
        if set(obj.keys()) == {"value"} and "value" not in str(list(manifest["tensors"])):
            obj = obj["value"]
        tensors, values = summarize(obj)
        check(f"{name} tensors", tensors == manifest["tensors"],
              differing(tensors, manifest["tensors"]))
        check(f"{name} values", values == manifest["values"], differing(values, manifest["values"]))

    def convert(src, dst, *extra):
        r = subprocess.run([args.ckfmt, "convert", src, dst, "--no-fsync", *extra],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"convert {src} -> {dst} failed: {r.stderr}")
        return r.stdout

    with tempfile.TemporaryDirectory() as tmp:
        for fx in FIXTURES:
            with open(os.path.join(args.fixtures, fx + ".manifest.json")) as f:
                manifest = json.load(f)
            base = os.path.join(tmp, fx.replace(".", "_"))
            ck = base + ".ckfmt"
            pt = base + ".pt"
            st = base + ".safetensors"
            convert(os.path.join(args.fixtures, fx), ck)
            convert(ck, pt)
            convert(ck, st)

            check_against_manifest(f"{fx} .pt", load_pt(pt), manifest)

            dcp_dir = base + "_dcp"
            convert(ck, dcp_dir, "--to", "dcp")
            back = base + "_dcp.pt"
            try:
                dcp_to_torch_save(dcp_dir, back)
                check_against_manifest(f"{fx} DCP", torch.load(back, weights_only=False),
                                       manifest)
            except (Exception, CheckpointException) as e:  # the latter is a BaseException
                if not refuses_new_unsigned(e):
                    raise
                skipped.append(f"{fx} DCP: torch {torch.__version__} reads no uint16-64 "
                               "tensor through DCP, its own saves' included")

            flat = load_file(st)
            st_tensors = {k: make_fixtures.tensor_info(v) for k, v in flat.items()}
            want = {k: v for k, v in manifest["tensors"].items() if v["dtype"] != "complex128"}
            check(f"{fx} .safetensors tensors", st_tensors == want, differing(st_tensors, want))

        # The MLP's optimizer state loads into a fresh AdamW (int param ids,
        # tuple betas, tensor steps), and the model's weights into the model.
        ck = os.path.join(tmp, "mlp.ckfmt")
        pt = os.path.join(tmp, "mlp.pt")
        convert(os.path.join(args.fixtures, "mlp_adamw.pt"), ck)
        convert(ck, pt)
        obj = torch.load(pt, weights_only=True)
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                    torch.nn.Linear(32, 8))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
        try:
            model.load_state_dict(obj["model"])
            opt.load_state_dict(obj["optim"])
            ok = all(isinstance(k, int) for k in obj["optim"]["state"])
            ok = ok and isinstance(obj["optim"]["param_groups"][0]["betas"], tuple)
            x = torch.randn(2, 16)
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
            check("mlp optimizer resumes", ok, "int keys / tuple betas lost")
        except Exception as e:  # noqa: BLE001
            check("mlp optimizer resumes", False, repr(e))

        # The same state through dcp.load into a model and an AdamW that has
        # stepped once (DCP loads in place, so the state must exist).
        dcp_dir = os.path.join(tmp, "mlp_dcp")
        convert(ck, dcp_dir, "--to", "dcp")
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                    torch.nn.Linear(32, 8))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
        model(torch.randn(2, 16)).sum().backward()
        opt.step()
        sd = {"model": model.state_dict(), "optim": opt.state_dict()}
        try:
            dcp.load(sd, checkpoint_id=dcp_dir)
            model.load_state_dict(sd["model"])
            opt.load_state_dict(sd["optim"])
            want = torch.load(pt, weights_only=True)  # obj was stepped above
            ok = all(torch.equal(model.state_dict()[k], want["model"][k]) for k in want["model"])
            got_state = opt.state_dict()["state"]
            ok = ok and all(torch.equal(got_state[i][n], want["optim"]["state"][i][n])
                            for i in want["optim"]["state"] for n in ("exp_avg", "exp_avg_sq"))
            ok = ok and opt.state_dict()["param_groups"][0]["betas"] == (0.9, 0.999)
            check("mlp dcp.load into model and AdamW", ok, "values differ")
        except Exception as e:  # noqa: BLE001
            check("mlp dcp.load into model and AdamW", False, repr(e))

        # A resharding load on 2 ranks of a DCP output whose tensors are in
        # chunks (the fixture's column, row and last-dim splits).
        import socket
        import torch.multiprocessing as mp
        ck = os.path.join(tmp, "tp.ckfmt")
        dcp_dir = os.path.join(tmp, "tp_dcp")
        convert(os.path.join(args.fixtures, "dcp_tp"), ck)
        convert(ck, dcp_dir, "--to", "dcp")
        result = os.path.join(tmp, "reshard.txt")
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        sock.close()
        try:
            ranks = mp.spawn(reshard_worker, args=(port, dcp_dir,
                                                   os.path.join(args.fixtures,
                                                                "dcp_tp.manifest.json"),
                                                   result), nprocs=2, join=False)
            # A rank stuck in gloo fails this check, not the whole run.
            deadline = time.monotonic() + 120
            while True:
                try:
                    if ranks.join(timeout=1):
                        break
                except mp.ProcessExitedException as e:
                    # Rank 0 writes its verdict only after full_tensor(),
                    # which gathers from rank 1: a verdict means both loaded,
                    # and a rank that died after it died tearing gloo down
                    # (seen once in torch 2.15: "terminate called without an
                    # active exception").
                    if not os.path.exists(result):
                        raise
                    print(f"note: a rank died after the check, in teardown: {e!r}")
                    break
                if time.monotonic() > deadline:
                    for p in ranks.processes:
                        p.kill()
                    raise TimeoutError("the 2 ranks did not finish in 120 s")
            with open(result) as f:
                got = f.read()
            check("tp DCP output loads resharded on 2 ranks", got == "ok", got)
        except Exception as e:  # noqa: BLE001
            check("tp DCP output loads resharded on 2 ranks", False, repr(e))

    for why in skipped:
        print(f"skipped {why}")
    print(f"{passed} passed, {failed} failed, {len(skipped)} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
