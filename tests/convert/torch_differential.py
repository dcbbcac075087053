#!/usr/bin/env python3
"""Differential check of `ckfmt convert` against torch itself, in one process.

Seeded random state dicts (reproducible from --seed) and targeted ones, each
probing one feature, go through three steps:

1. torch.save (default, pickle protocol 4 and the legacy pre-1.6 format)
   -> ckfmt -> .pt: torch.load(weights_only=True) of it must equal the
   original exactly: tensors bitwise (NaN payloads too), dtype and shape;
   other values bitwise; container types, key types and key order.
2. dcp.save (no process group) -> ckfmt -> .pt must equal torch's own
   dcp_to_torch_save of that directory. Where DCP cannot save and read back
   a state itself, steps 2-3 are skipped and it counts as dcp-itself-failed.
   Where this torch has it, the same through DCP's other serialization
   (FileSystemWriter(serialization_format=SAFETENSORS), which torch's own
   reader cannot read back) must give that reference too ("2 safetensors";
   states whose dtypes safetensors lacks are not saved so, and counted).
3. ckfmt -> DCP directory (`--to dcp`): dcp_to_torch_save of it, and
   dcp.load of it into a zeroed template, must give what they give on the
   directory of DCP's own dcp.save.

Strides, storage sharing, Parameter-ness and requires_grad are not compared.
A state dict's OrderedDict type and _metadata are compared (values only:
ckfmt gives _metadata back as plain dicts, which load_state_dict reads
alike). Only values ckfmt keeps exactly are generated: its documented
changes (set -> list, torch.Size -> tuple, ...) and refusals are not
exercised here. Run
by hand with a Python that has torch (checked with torch 2.15):

    python tests/convert/torch_differential.py --ckfmt build/tools/ckfmt [--random 300]
"""
import argparse
import math
import os
import random
import struct
import subprocess
import sys
import tempfile
import warnings

sys.dont_write_bytecode = True
warnings.filterwarnings("ignore")  # DCP warns that no process group is set up
import torch  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402
from torch.distributed.checkpoint.api import CheckpointException  # noqa: E402
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save  # noqa: E402
try:  # torch 2.8 and later
    from torch.distributed.checkpoint.filesystem import SerializationFormat  # noqa: E402
except ImportError:
    SerializationFormat = None

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8,
          torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool, torch.complex64,
          torch.float8_e4m3fn, torch.float8_e5m2, torch.complex128, torch.uint16,
          torch.uint32, torch.uint64]
STR_KEYS = ["a", "b", "weight", "layers.0.w", "x/y", "a/b.c", "ü", "日本語", "", " ",
            "emoji🙂", "tab\tkey", "new\nline", "0", "17", "-1", "key with space",
            "quote\"'", "back\\slash", "..", ".", "/", "a..b", "_metadata", "value", "state",
            "param_groups", "__0_0", "\u00e9\u0301"]
STRS = ["", "hello", "ü", "日本語🙂", "a\x00b", "x" * 300, "line\nbreak", "0x10", "None"]
SHAPES = [(), (0,), (3, 0), (1,), (5,), (2, 3), (4, 4), (2, 3, 2), (7,), (0, 2, 3),
          (1, 1, 1, 1), (3, 1)]


def make_dense(rng, g, dt, shape):
    """A contiguous tensor: random bytes, or ordinary floats with one special value."""
    n = math.prod(shape)
    if dt == torch.bool:
        return torch.randint(0, 2, (n,), generator=g, dtype=torch.uint8).bool().reshape(shape)
    esz = torch.empty((), dtype=dt).element_size()
    raw = torch.randint(0, 256, (n * esz,), generator=g, dtype=torch.uint8)
    if rng.random() < 0.5 and dt.is_floating_point:
        t = torch.randn(n, generator=g, dtype=torch.float32).to(dt)
        if n:
            t[0] = rng.choice([float("nan"), float("-inf"), float("inf"), -0.0])
        return t.reshape(shape)
    return raw.view(dt).reshape(shape)


def rand_tensor(rng, g):
    """A random tensor, sometimes a view (transposed, strided, offset, expanded)."""
    dt = rng.choice(DTYPES)
    shape = rng.choice(SHAPES)
    view = rng.choice(["none"] * 4 + ["transpose", "step", "offset", "expand", "clast"])
    if view == "transpose" and len(shape) >= 2:
        return make_dense(rng, g, dt, shape[::-1] if len(shape) == 2 else shape).transpose(0, 1)
    if view == "step" and len(shape) >= 1:
        return make_dense(rng, g, dt, (shape[0] * 2,) + shape[1:])[::2]
    if view == "offset":
        n = math.prod(shape)
        base = make_dense(rng, g, dt, (n + 3,))
        return base[2:2 + n].view(shape) if n else base[3:3]
    if view == "expand" and len(shape) >= 1 and shape[0] > 0:
        return make_dense(rng, g, dt, (1,) + shape[1:]).expand(*((shape[0],) + shape[1:]))
    if view == "clast":
        return make_dense(rng, g, dt, (2, 3, 2, 2)).contiguous(memory_format=torch.channels_last)
    return make_dense(rng, g, dt, shape)


def rand_float(rng):
    """A float, often a special one (NaN with a payload, -0.0, inf, subnormal)."""
    c = rng.random()
    if c < 0.1:
        return float("nan")
    if c < 0.15:
        bits = 0x7ff0000000000000 | rng.getrandbits(51) | 1
        return struct.unpack("<d", struct.pack("<Q", bits))[0]
    if c < 0.25:
        return -0.0
    if c < 0.3:
        return rng.choice([float("inf"), float("-inf"), 5e-324, 1.7976931348623157e308])
    return rng.uniform(-1e6, 1e6)


def rand_leaf(rng, g):
    """A tensor, int, float, str, bytes, None or bool."""
    c = rng.random()
    if c < 0.45:
        return rand_tensor(rng, g)
    if c < 0.55:
        return rng.choice([0, 1, -1, 2**31, -2**31 - 1, 2**63 - 1, -2**63, 255, 256, 65536,
                           rng.randint(-10**9, 10**9)])
    if c < 0.65:
        return rand_float(rng)
    if c < 0.72:
        return rng.choice(STRS)
    if c < 0.78:
        return bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 20)))
    if c < 0.84:
        return None
    return rng.choice([True, False])


def rand_value(rng, g, depth, maxdepth):
    """A leaf, or a dict, list or tuple of random values."""
    if depth >= maxdepth or rng.random() < 0.5:
        return rand_leaf(rng, g)
    c, n = rng.random(), rng.randint(0, 4)
    if c < 0.45:
        return rand_dict(rng, g, depth + 1, maxdepth, n)
    if c < 0.75:
        return [rand_value(rng, g, depth + 1, maxdepth) for _ in range(n)]
    return tuple(rand_value(rng, g, depth + 1, maxdepth) for _ in range(n))


def rand_dict(rng, g, depth, maxdepth, n):
    """A dict of n entries; below the top its keys are ints one time in five."""
    keys = rng.sample(range(-3, 40), n) if depth > 0 and rng.random() < 0.2 \
        else rng.sample(STR_KEYS, n)
    return {k: rand_value(rng, g, depth, maxdepth) for k in keys}


def random_state(seed):
    """The random state dict of one seed; some hold tensors sharing a storage."""
    rng = random.Random(seed)
    g = torch.Generator().manual_seed(seed)
    st = rand_dict(rng, g, 0, rng.choice([2, 3, 4, 6]), rng.randint(1, 7))
    if rng.random() < 0.3:
        base = make_dense(rng, g, rng.choice(DTYPES[:9]), (4, 6))
        st["shared"] = {"base": base, "row": base[1], "col": base[:, 2], "t": base.t(),
                        "same": base}
    return st


def deep(depth, kind):
    """A tensor nested `depth` levels deep in dicts, lists or both."""
    x = torch.arange(3, dtype=torch.int16)
    for i in range(depth):
        x = {"d": x} if kind == "dict" or (kind == "mix" and i % 2) else [x]
    return {"root": x}


def training_state(kind, seed):
    """Model, optimizer and scheduler after two training steps."""
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.BatchNorm1d(6), torch.nn.ReLU(),
                                torch.nn.Linear(6, 3))
    model.register_buffer("my_buf", torch.arange(5, dtype=torch.int32))
    opt = {"adamw": lambda p: torch.optim.AdamW(p, lr=1e-3, weight_decay=0.01),
           "adam_amsgrad": lambda p: torch.optim.Adam(p, lr=1e-3, amsgrad=True),
           "sgd": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True)}[kind](
        model.parameters())
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    for _ in range(2):
        opt.zero_grad()
        model(torch.randn(5, 4)).pow(2).sum().backward()
        opt.step()
        sched.step()
    return model, opt, sched


def targeted():
    """(name, state) pairs, each probing one feature that round-trips exactly."""
    t = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    big = torch.arange(1000, dtype=torch.int32)
    base = torch.arange(24, dtype=torch.float64).reshape(4, 6)
    nan_bits = {"f32": ([0x7fc00001, 0x7f800001, 0xffc12345, 0x7fffffff], torch.int32,
                        torch.float32),
                "bf16": ([0x7fc1, 0xff81, 0x7f81], torch.int16, torch.bfloat16),
                "f16": ([0x7e01, 0xfc01], torch.int16, torch.float16),
                "f8": ([0x7f, 0xff], torch.uint8, torch.float8_e4m3fn)}
    c = [("int_keys", {"state": {0: {"x": t}, 1: {"x": t + 1}}}),
         ("top_int_keys", {0: t, 1: 2}), ("nested_int_keys", {"o": {0: t, 1: 2}}),
         ("neg_int_keys", {"m": {-1: t, 5: 2}}), ("empty_top", {}),
         ("empty_containers", {"d": {}, "l": [], "t": (), "nested": {"e": {}}, "x": t}),
         ("list_of_tensors", {"l": [t, t * 2, torch.zeros(0)]}),
         ("list_mixed", {"l": [t, 1, "s", None, 2.5]}), ("tuple_of_tensors", {"tup": (t, t + 1)}),
         ("tuple_mixed", {"tup": (1, "a", None, (2, 3), [4], {"k": 5})}),
         ("list_of_dicts", {"l": [{"a": t}, {"b": 1}]}),
         ("list_of_lists", {"l": [[1, 2], [t], []]}),
         ("nested_lists_no_tensor", {"l": [[1, [2, [3]]], "x"]}),
         ("bool_leaves", {"a": True, "b": False, "l": [True, 1, 0, False]}),
         ("scalars", {"i": 2**63 - 1, "j": -2**63, "f": -0.0, "n": float("nan"), "s": "",
                      "b": b"", "none": None}),
         ("dot_key_alone", {"a.b": t}), ("dot_key_vs_nested_no_tensor", {"a.b": 1, "a": {"c": 2}}),
         ("slash_key", {"a/b": t, "c": {"d/e": 1}}),
         ("unicode_keys", {"ü": t, "日本": {"🙂": 1}, "": 2}),
         ("empty_str_key_nested", {"": {"": t}}), ("empty_key_prefix_tensor", {"": {"b": t}}),
         ("empty_key_prefix_scalar", {"": {"": 1}}), ("empty_key_in_list", {"": [t, 1]}),
         ("empty_key_prefix_collide", {"": {"b": t}, "b": t + 1}),
         ("empty_key_prefix_collide_scalar", {"": {"b": 1}, "b": 2}), ("empty_bytes", {"b": b""}),
         ("deep20_dict", deep(20, "dict")), ("deep20_list", deep(20, "list")),
         ("deep20_mix", deep(20, "mix")), ("deep99_dict", deep(98, "dict")),
         ("zero_d_each_dtype", {str(d): torch.ones((), dtype=d) for d in DTYPES}),
         ("empty_each_dtype", {str(d): torch.empty((3, 0), dtype=d) for d in DTYPES}),
         ("shared_storage", {"base": base, "t": base.t(), "row": base[2], "col": base[:, 1],
                             "exp": base[0:1].expand(3, 6)}),
         ("same_tensor_twice", {"a": t, "b": t, "l": [t, t]}),
         ("small_view_of_big", {"v": big[10:13]}), ("scalar_view_big_offset", {"v": big[999]}),
         ("nan_payloads", {k: torch.tensor(v).to(idt).view(dt)  # .to wraps
                           for k, (v, idt, dt) in nan_bits.items()}),
         ("bool_tensor_values", {"b": torch.tensor([True, False, True])}),
         ("flipped", {"f": torch.arange(5).flip(0)}), ("float_subnormal", {"f": 5e-324}),
         ("str_nul", {"s": "a\x00b", "k\x00": 1}), ("long_str", {"s": "x" * 70000}),
         ("long_bytes", {"b": bytes(range(256)) * 40}),
         ("parameter", {"p": torch.nn.Parameter(torch.ones(2))}),
         ("requires_grad", {"p": torch.ones(2, requires_grad=True)}),
         ("python_random_state", {"rng": random.Random(3).getstate()}),
         ("torch_rng_state", {"rng": torch.get_rng_state()})]
    for kind in ["adamw", "adam_amsgrad", "sgd"]:
        model, opt, sched = training_state(kind, 1)
        c.append((f"train_{kind}", {"model": model.state_dict(), "optim": opt.state_dict(),
                                    "sched": sched.state_dict(), "epoch": 2}))
    model, opt, sched = training_state("adamw", 2)
    emb = torch.nn.Embedding(5, 3, padding_idx=0)
    return c + [("bare_optim_sd", opt.state_dict()), ("bare_model_sd", model.state_dict()),
                ("sched_sd", sched.state_dict()),
                ("grad_scaler_sd", {"scaler": torch.amp.GradScaler("cpu").state_dict()}),
                ("embedding_bf16", {"emb": {k: v.to(torch.bfloat16)
                                            for k, v in emb.state_dict().items()}})]


def diff(a, b, path="", ordered=True, out=None):
    """Differences of b from a, as lines; key order counts where `ordered`."""
    out = [] if out is None else out
    p = path or "<root>"
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if (a.dtype, a.shape) != (b.dtype, b.shape):
            out.append(f"{p}: {a.dtype}{tuple(a.shape)} -> {b.dtype}{tuple(b.shape)}")
        elif not torch.equal(raw_bytes(a), raw_bytes(b)):
            out.append(f"{p}: tensor bytes differ ({a.dtype}{tuple(a.shape)})")
    elif type(a) is not type(b):
        out.append(f"{p}: {type(a).__name__} {short(a)} -> {type(b).__name__} {short(b)}")
    elif isinstance(a, dict):
        if getattr(a, "_metadata", None) != getattr(b, "_metadata", None):  # a state dict's
            out.append(f"{p}: _metadata {short(getattr(a, '_metadata', None))} -> "
                       f"{short(getattr(b, '_metadata', None))}")
        ka, kb = [(type(k).__name__, k) for k in a], [(type(k).__name__, k) for k in b]
        if sorted(ka, key=repr) != sorted(kb, key=repr):
            out.append(f"{p}: keys {short(list(a))} -> {short(list(b))}")
            return out
        if ordered and ka != kb:
            out.append(f"{p}: key order {short(list(a))} -> {short(list(b))}")
        for k in a:
            diff(a[k], b[k], f"{path}[{k!r}]", ordered, out)
    elif isinstance(a, (list, tuple)):
        if len(a) != len(b):
            out.append(f"{p}: length {len(a)} -> {len(b)}")
        for i, (x, y) in enumerate(zip(a, b)):
            diff(x, y, f"{path}[{i}]", ordered, out)
    elif isinstance(a, float):
        if struct.pack("<d", a) != struct.pack("<d", b):
            out.append(f"{p}: {a!r} -> {b!r}")
    elif a != b:
        out.append(f"{p}: {short(a)} -> {short(b)}")
    return out


def raw_bytes(t):
    """A tensor's bytes, as a flat uint8 tensor."""
    return torch.empty(t.shape, dtype=t.dtype).copy_(t.detach()).reshape(-1).view(torch.uint8)


def short(x, n=80):
    """repr, cut to n characters."""
    s = repr(x)
    return s if len(s) <= n else s[:n] + "..."


def zeroed(o):
    """A state of o's structure to dcp.load into: tensors zeroed, other leaves None."""
    if isinstance(o, torch.Tensor):
        return torch.zeros(o.shape, dtype=o.dtype)
    if isinstance(o, dict):
        return {k: zeroed(v) for k, v in o.items()}
    if isinstance(o, list):
        return [zeroed(v) for v in o]
    return None  # tuples are DCP leaves too


def outcome(fn):
    """fn(), or the text of its error (of a CheckpointException, its first rank's)."""
    try:
        return fn()
    except (Exception, CheckpointException) as e:  # the latter is a BaseException
        e = next(iter((getattr(e, "failures", None) or {0: e}).values()))
        e = e[0] if isinstance(e, tuple) else e
        return f"error {type(e).__name__}: {str(e)[:200]}"


def read_dcp(d, state, out):
    """What dcp_to_torch_save makes of DCP directory d, and what dcp.load of it
    puts into zeroed(state); each an error text, paths cut, where it fails."""
    tmpl = zeroed(state)  # (both functions return None)
    got = (outcome(lambda: dcp_to_torch_save(d, out) or torch.load(out, weights_only=False)),
           outcome(lambda: dcp.load(tmpl, checkpoint_id=d) or tmpl))
    return [g.replace(d, "DIR").replace(out, "OUT") if isinstance(g, str) else g for g in got]


def check_case(state, work, convert):
    """Steps 1-3 for one state: ({step: differences}, whether DCP itself failed)."""
    fails = {}
    at = lambda name: os.path.join(work, name)  # noqa: E731

    def run(step, fn):
        d = outcome(fn)
        if d:
            fails[step] = [d] if isinstance(d, str) else d

    def step1(tag, kw):
        torch.save(state, at(tag + ".pt"), **kw)
        convert(at(tag + ".pt"), at(tag + ".ckfmt"))
        convert(at(tag + ".ckfmt"), at(tag + "_back.pt"))
        return diff(state, torch.load(at(tag + "_back.pt"), weights_only=True))

    def step2():
        convert(at("dcp_own"), at("2.ckfmt"))
        convert(at("2.ckfmt"), at("2.pt"))
        return diff(ref, torch.load(at("2.pt"), weights_only=True), ordered=False)

    def step3():
        convert(at("1.ckfmt"), at("dcp_ckfmt"), "--to", "dcp")
        want = read_dcp(at("dcp_own"), state, at("own.pt"))
        got = read_dcp(at("dcp_ckfmt"), state, at("mine.pt"))
        return ([f"dcp_to_torch_save {x}" for x in diff(want[0], got[0], ordered=False)] +
                [f"dcp.load {x}" for x in diff(want[1], got[1], ordered=False)])

    def step2_safetensors():
        convert(at("dcp_st"), at("2st.ckfmt"))
        convert(at("2st.ckfmt"), at("2st.pt"))
        return diff(ref, torch.load(at("2st.pt"), weights_only=True), ordered=False)

    def dcp_safetensors_save():
        dcp.save(state, storage_writer=dcp.FileSystemWriter(
            at("dcp_st"), serialization_format=SerializationFormat.SAFETENSORS))

    def dcp_reference():
        dcp.save(state, checkpoint_id=at("dcp_own"))
        dcp_to_torch_save(at("dcp_own"), at("ref.pt"))
        return torch.load(at("ref.pt"), weights_only=False)

    run("1", lambda: step1("1", {}))
    run("1 protocol 4", lambda: step1("p4", {"pickle_protocol": 4}))
    run("1 legacy", lambda: step1("legacy", {"_use_new_zipfile_serialization": False}))
    ref = outcome(dcp_reference)
    if isinstance(ref, str):  # an error text
        return fails, True, None
    run("2", step2)
    st_saved = None
    if SerializationFormat is not None:
        st_saved = outcome(dcp_safetensors_save) is None
        if st_saved:
            run("2 safetensors", step2_safetensors)
    if "1" not in fails:
        run("3", step3)
    return fails, False, st_saved


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckfmt", required=True, help="the ckfmt binary")
    ap.add_argument("--random", type=int, default=300, help="random states to check")
    ap.add_argument("--seed", type=int, default=1000, help="seed of the first random state")
    ap.add_argument("--keep-dir", help="work in (and keep) this directory")
    args = ap.parse_args()

    def convert(src, dst, *extra):
        r = subprocess.run([args.ckfmt, "convert", src, dst, "--no-fsync", "-q", *extra],
                           capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise RuntimeError(f"ckfmt convert {os.path.basename(src)} -> {os.path.basename(dst)}"
                               f" exited {r.returncode}: {r.stderr.strip()[:200]}")

    cases = targeted() + [(f"random{s}", s) for s in range(args.seed, args.seed + args.random)]
    counts = {"passed": 0, "failed": 0, "dcp-itself-failed": 0}
    st_counts = {"saved": 0, "not saved": 0}
    with tempfile.TemporaryDirectory() as tmp:
        for name, state in cases:
            work = os.path.join(args.keep_dir or tmp, name)
            os.makedirs(work, exist_ok=True)
            state = random_state(state) if isinstance(state, int) else state
            fails, own_failed, st_saved = check_case(state, work, convert)
            if st_saved is not None:
                st_counts["saved" if st_saved else "not saved"] += 1
            for step, lines in fails.items():
                for line in lines[:3]:
                    print(f"FAIL {name} step {step}: {line}", flush=True)
            counts["failed" if fails else "dcp-itself-failed" if own_failed else "passed"] += 1
    print(", ".join(f"{n} {what}" for what, n in counts.items()))
    if SerializationFormat is not None:
        print(f"DCP's safetensors serialization: {st_counts['saved']} states saved and "
              f"checked, {st_counts['not saved']} it could not save")
    return 1 if counts["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
