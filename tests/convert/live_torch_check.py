#!/usr/bin/env python3
"""Live check of `ckfmt convert` output against torch itself.

For each committed fixture: convert it to ckfmt, then ckfmt -> .pt and
ckfmt -> .safetensors with the converter, and load those with
torch.load(weights_only=True) and safetensors.torch.load_file. Every tensor
(dtype, shape, XXH3 of its bytes) and value must match the fixture's
manifest. The optimizer state of the MLP fixture must load into a fresh
AdamW. Needs a Python with torch, safetensors and xxhash (the fixtures venv);
CTest registers this only when configure finds one.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # keep tests/fixtures free of __pycache__
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "fixtures"))
import make_fixtures  # noqa: E402  (walk / tensor_info: the manifest's own rules)

FIXTURES = ["mlp_adamw.pt", "dtypes.pt", "views.pt", "legacy.pt", "model.safetensors",
            "sharded_st", "dcp_fsdp2"]


def summarize(obj):
    tensors, values = {}, {}
    make_fixtures.walk(obj, [], tensors, values)
    return tensors, values


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckfmt", required=True, help="the ckfmt binary")
    ap.add_argument("--fixtures", required=True)
    args = ap.parse_args()
    import torch
    from safetensors.torch import load_file

    passed, failed = 0, 0

    def check(name, ok, detail=""):
        nonlocal passed, failed
        if ok:
            passed += 1
        else:
            failed += 1
            print(f"FAIL {name}: {detail}")

    def convert(src, dst):
        r = subprocess.run([args.ckfmt, "convert", src, dst, "--no-fsync"], capture_output=True,
                           text=True)
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

            obj = torch.load(pt, weights_only=True)
            if set(obj.keys()) == {"value"} and "value" not in str(list(manifest["tensors"])):
                obj = obj["value"]
            tensors, values = summarize(obj)
            check(f"{fx} .pt tensors", tensors == manifest["tensors"],
                  sorted(set(tensors.items()) ^ set(manifest["tensors"].items()))[:4]
                  if False else
                  [k for k in set(tensors) | set(manifest["tensors"])
                   if tensors.get(k) != manifest["tensors"].get(k)][:6])
            check(f"{fx} .pt values", values == manifest["values"],
                  [k for k in set(values) | set(manifest["values"])
                   if values.get(k) != manifest["values"].get(k)][:6])

            flat = load_file(st)
            st_tensors = {k: make_fixtures.tensor_info(v) for k, v in flat.items()}
            want = {k: v for k, v in manifest["tensors"].items() if v["dtype"] != "complex128"}
            check(f"{fx} .safetensors tensors", st_tensors == want,
                  [k for k in set(st_tensors) | set(want) if st_tensors.get(k) != want.get(k)][:6])

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

    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
