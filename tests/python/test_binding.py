"""The Python binding (tools/python/ckfmt) over libckfmt.so.

With numpy (CI installs Debian's python3-numpy): every kind of value
round-trips; the caller's arrays are filled in place and what it lacks is
created; int keys, tuples and OrderedDicts come back; policies, refusals
and a failed save that keeps the previous file. With torch as well (the
bench venv has it): an AdamW run resumed from a fresh optimizer steps
bitwise as the original, and `ckfmt convert` of a binding's file gives
torch.load its int keys back. Without numpy the test is skipped (exit 77).

    CKFMT_LIB=build/engine/libckfmt.so CKFMT_TOOL=build/tools/ckfmt \\
        python3 tests/python/test_binding.py
"""

import collections
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools",
                                "python"))
try:
    import numpy as np
except ImportError:
    print("test_binding: numpy is not installed; skipped")
    sys.exit(77)
try:
    import torch
except ImportError:
    torch = None

import ckfmt  # noqa: E402


def same(a, b):
    """Equal values, containers of the same types, arrays bitwise."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a.keys()) == list(b.keys()) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    if torch is not None and isinstance(a, torch.Tensor):
        def raw(t):  # bitwise: NaNs and -0.0 compare as stored
            return t.detach().cpu().contiguous().reshape(-1).view(torch.uint8)
        return a.dtype == b.dtype and a.shape == b.shape and a.device == b.device and \
            torch.equal(raw(a), raw(b))
    return a == b


def training_state():
    rng = np.random.default_rng(7)
    return {
        "model": {"layers.0.weight": rng.standard_normal((4, 3)).astype(np.float32),
                  "layers.0.bias": np.arange(4, dtype=np.int64),
                  "empty": np.zeros((0, 5), dtype=np.float16)},
        "optim": {"state": {0: {"step": 3, "exp_avg": rng.standard_normal(12) * 1e-3},
                            1: {"step": 3, "exp_avg": np.full(4, 1e-4)}},
                  "param_groups": [{"lr": 3e-4, "betas": (0.9, 0.999), "params": [0, 1],
                                    "amsgrad": False, "foreach": None}]},
        "loader": collections.OrderedDict(epoch=2, seen=b"\x00\x01\xff", name="shard-0 \u00e9"),
        "rng": rng.integers(0, 255, 64, dtype=np.uint8),
        "flags": [True, 0.5, -(1 << 63), [], {}],
    }


def load_numpy(*args, **kwargs):
    """ckfmt.load creating numpy arrays, torch imported or not."""
    return ckfmt.load(*args, tensor_type="numpy", **kwargs)


class BindingTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="ckfmt_binding_")
        self.path = os.path.join(self.dir, "state.ckfmt")

    def tearDown(self):
        shutil.rmtree(self.dir)

    def test_every_kind_round_trips(self):
        for codec in ("none", "zstd", "byteplane-zstd"):
            with self.subTest(codec=codec):
                state = training_state()
                ckfmt.save(self.path, state, codec=codec, metadata={"run": "7"})
                ckfmt.verify(self.path)
                ckfmt.verify(self.path, checksums_only=True)
                back = load_numpy(self.path)
                self.assertTrue(same(back, state), back)

    def test_the_callers_arrays_are_filled_and_what_it_lacks_created(self):
        state = training_state()
        ckfmt.save(self.path, state)
        w = np.zeros((4, 3), np.float32)
        mine = {"model": {"layers.0.weight": w}, "optim": {"state": {}, "param_groups": []},
                "note": "kept"}
        back = load_numpy(self.path, mine, missing="ignore")
        self.assertIs(back, mine)
        self.assertIs(back["model"]["layers.0.weight"], w)  # in place
        self.assertTrue(same(w, state["model"]["layers.0.weight"]))
        self.assertTrue(same(back["optim"], state["optim"]))  # created, int keys included
        self.assertEqual(back["note"], "kept")
        with self.assertRaises(ckfmt.CkfmtError) as e:
            load_numpy(self.path, {"note": "kept"})
        self.assertEqual(e.exception.code, "MissingKeys")
        self.assertIn("note", str(e.exception))

    def test_a_non_contiguous_destination_is_filled(self):
        state = {"w": np.arange(12, dtype=np.float32).reshape(3, 4)}
        ckfmt.save(self.path, state)
        big = np.zeros((4, 3), np.float32)
        dest = big.T  # (3, 4), not C-contiguous
        load_numpy(self.path, {"w": dest})
        self.assertTrue(same(np.ascontiguousarray(dest), state["w"]))

    def test_policies_and_prefixes(self):
        ckfmt.save(self.path, training_state())
        w = np.zeros((4, 3), np.float32)
        with self.assertRaises(ckfmt.CkfmtError) as e:
            load_numpy(self.path, {"model": {"layers.0.weight": w}}, unexpected="error")
        self.assertEqual(e.exception.code, "UnexpectedKeys")
        back = load_numpy(self.path, {"model": {"layers.0.weight": w}}, unexpected="ignore")
        self.assertEqual(list(back.keys()), ["model"])
        self.assertEqual(list(back["model"].keys()), ["layers.0.weight"])
        back = load_numpy(self.path, prefixes=["optim/param_groups", ["loader", "epoch"]])
        groups = training_state()["optim"]["param_groups"]
        self.assertEqual(back, {"optim": {"param_groups": groups}, "loader": {"epoch": 2}})

    def test_bad_arguments_are_refused_before_anything_is_read(self):
        ckfmt.save(self.path, {"w": np.ones(2)})
        w = np.zeros(2)
        for kwargs in ({"unexpected": "drop"}, {"missing": "warn"}, {"device": "tpu:0"},
                       {"device": "cuda:0"}):
            with self.subTest(**kwargs):
                with self.assertRaises(ValueError):
                    load_numpy(self.path, {"w": w}, **kwargs)
        self.assertTrue(same(w, np.zeros(2)))
        with self.assertRaises(TypeError):
            load_numpy(self.path, [w])
        with self.assertRaises(ckfmt.CkfmtError) as e:
            load_numpy(os.path.join(self.dir, "absent.ckfmt"))
        self.assertIn("absent.ckfmt", str(e.exception))

    def test_mismatches_name_the_key(self):
        ckfmt.save(self.path, training_state())
        with self.assertRaises(ckfmt.CkfmtError) as e:
            load_numpy(self.path, {"model": {"layers.0.weight": np.zeros((3, 4), np.float32)}})
        self.assertEqual(e.exception.code, "Mismatch")
        self.assertIn("model/layers.0.weight", str(e.exception))
        with self.assertRaises(ckfmt.CkfmtError) as e:
            load_numpy(self.path, {"model": {"layers.0.weight": np.zeros((4, 3), np.float64)}})
        self.assertEqual(e.exception.code, "Mismatch")

    def test_pickled_objects_need_allow_pickle(self):
        state = {"w": np.ones(3), "sampler": {"seen": {1, 2, 3}}, "step": 9}
        ckfmt.save(self.path, state)
        w = np.zeros(3)
        mine = {"w": w, "step": 0}
        with self.assertRaises(ckfmt.CkfmtError) as e:
            load_numpy(self.path, mine)
        self.assertIn('sampler/seen holds bytes of content type "pickle"', str(e.exception))
        self.assertIn("allow_pickle=True", str(e.exception))
        self.assertEqual(mine, {"w": w, "step": 0})
        self.assertTrue(same(w, np.zeros(3)))  # refused before anything was read
        back = load_numpy(self.path, {"w": w}, unexpected="ignore")  # not handed over: fine
        self.assertTrue(same(back["w"], np.ones(3)))
        back = load_numpy(self.path, mine, allow_pickle=True)
        self.assertEqual(back["sampler"], {"seen": {1, 2, 3}})
        self.assertEqual(back["step"], 9)

    def test_a_failed_save_keeps_the_previous_file(self):
        ckfmt.save(self.path, training_state())
        with open(self.path, "rb") as f:
            good = f.read()
        for bad, error in [({"big": 1 << 64}, OverflowError),
                           ({"mixed": {1: "a", "b": 2}}, TypeError),
                           ({"key": {(1, 2): 3}}, TypeError),
                           ({"w": np.zeros(2, dtype=np.float128)}, TypeError)]:
            with self.subTest(bad=str(bad)[:30]):
                with self.assertRaises(error):
                    ckfmt.save(self.path, bad)
        with self.assertRaises(ckfmt.CkfmtError) as e:
            ckfmt.save(self.path, {"w": np.zeros(2)}, codec="lz4")
        self.assertEqual(e.exception.code, "InvalidArgument")
        with open(self.path, "rb") as f:
            self.assertEqual(f.read(), good)

    def test_an_async_save_holds_the_snapshot(self):
        state = training_state()
        w = state["model"]["layers.0.weight"]
        saved = w.copy()
        with ckfmt.AsyncSaver() as saver:
            saver.prepare(state)
            saver.save(self.path, state, codec="zstd", metadata={"run": "7"})
            w[...] = 0  # training goes on at once
            saver.wait()
            self.assertFalse(saver.busy)
            self.assertGreater(saver.last_blocked_seconds, 0)
        back = load_numpy(self.path)
        self.assertTrue(same(back["model"]["layers.0.weight"], saved))
        state["model"]["layers.0.weight"] = saved
        self.assertTrue(same(back, state))

    def test_an_async_failure_is_raised_once_and_leaves_no_file(self):
        bad = os.path.join(self.dir, "no", "such", "x.ckfmt")
        saver = ckfmt.AsyncSaver()
        saver.save(bad, {"w": np.ones(4)})
        with self.assertRaises(ckfmt.CkfmtError) as e:
            saver.wait()
        self.assertIn("no/such", str(e.exception))
        self.assertFalse(os.path.exists(bad))
        saver.save(self.path, {"w": np.ones(4)})
        saver.wait()
        saver.close()
        with self.assertRaises(ValueError):
            saver.wait()
        self.assertTrue(same(load_numpy(self.path)["w"], np.ones(4)))

    def test_shards_load_their_part(self):
        w = np.arange(24, dtype=np.float32).reshape(4, 6)
        ckfmt.save(self.path, {"w": w, "step": 3})
        # Two tensor parallel ranks, columns split; an FSDP rank's flat range.
        halves = [np.zeros((4, 3), np.float32) for _ in range(2)]
        for rank, half in enumerate(halves):
            back = load_numpy(self.path, {"w": ckfmt.Shard(half, (4, 6), offsets=(0, 3 * rank))})
            self.assertEqual(back["step"], 3)
            self.assertIsInstance(back["w"], ckfmt.Shard)
        self.assertTrue(same(np.concatenate(halves, axis=1), w))
        flat = np.zeros(10, np.float32)
        load_numpy(self.path, {"w": ckfmt.Shard(flat, (4, 6), flat_start=7)})
        self.assertTrue(same(flat, w.reshape(-1)[7:17]))
        # A lone shard saves as that part, and loads back.
        ckfmt.save(self.path, {"w": ckfmt.Shard(halves[1], (4, 6), offsets=(0, 3))})
        again = np.zeros((4, 3), np.float32)
        load_numpy(self.path, {"w": ckfmt.Shard(again, (4, 6), offsets=(0, 3))})
        self.assertTrue(same(again, halves[1]))
        with self.assertRaises(ckfmt.CkfmtError) as e:
            load_numpy(self.path, {"w": ckfmt.Shard(again, (4, 6), offsets=(1, 4))})
        self.assertEqual(e.exception.code, "InvalidArgument")
        with self.assertRaises(ValueError):
            ckfmt.Shard(again, (4, 6))

    def test_describe_lists_the_index_without_reading_data(self):
        state = training_state()
        ckfmt.save(self.path, state, metadata={"run": "7"})
        entries, metadata = ckfmt.describe(self.path)
        self.assertEqual(metadata["run"], "7")
        self.assertIn("convert.torch.int_key_dicts", metadata)
        by_key = {e.key: e for e in entries}
        self.assertEqual([e.key for e in entries][:4],
                         ["model", "model/layers.0.weight", "model/layers.0.bias", "model/empty"])
        w = by_key["model/layers.0.weight"]
        self.assertEqual((w.kind, w.dtype, w.shape, w.nbytes), ("tensor", "float32", (4, 3), 48))
        self.assertEqual(by_key["optim/state/0/step"].value, 3)
        self.assertEqual(by_key["optim/param_groups/[0]/lr"].value, 3e-4)
        self.assertIs(by_key["optim/param_groups/[0]/amsgrad"].value, False)
        self.assertEqual(by_key["loader/name"].value, "shard-0 \u00e9")
        seen = by_key["loader/seen"]
        self.assertEqual((seen.kind, seen.nbytes, seen.content_type), ("bytes", 3, "raw"))
        self.assertEqual(by_key["optim/param_groups/[0]/foreach"].kind, "none")
        self.assertEqual(by_key["flags"].kind, "list")

    def test_keys_that_need_escaping(self):
        state = {"a/b": {"[0]": 1, "": 2, '"q': 3, "back\\slash": 4}, "list": [[5], {"x": 6}]}
        ckfmt.save(self.path, state)
        self.assertEqual(load_numpy(self.path), state)


@unittest.skipIf(torch is None, "torch is not installed")
class TorchTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="ckfmt_binding_torch_")
        self.path = os.path.join(self.dir, "state.ckfmt")

    def tearDown(self):
        shutil.rmtree(self.dir)

    def make(self, seed, device="cpu"):
        torch.manual_seed(seed)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                    torch.nn.Linear(16, 4)).to(torch.bfloat16).to(device)
        return model, torch.optim.AdamW(model.parameters(), lr=1e-2)

    def step(self, model, opt, x):
        opt.zero_grad()
        model(x).float().square().mean().backward()
        opt.step()

    def test_a_fresh_optimizer_resumes_bitwise(self):
        model, opt = self.make(0)
        x = torch.randn(32, 8, dtype=torch.bfloat16)
        for _ in range(3):
            self.step(model, opt, x)
        rng = torch.get_rng_state()
        ckfmt.save(self.path, {"model": model.state_dict(), "optim": opt.state_dict(),
                               "rng": rng, "step": 3}, codec="byteplane-zstd")
        # A new process would build these: other weights, no optimizer state.
        model2, opt2 = self.make(1)
        state = {"model": model2.state_dict(), "optim": opt2.state_dict()}
        self.assertEqual(state["optim"]["state"], {})
        ckfmt.load(self.path, state)
        opt2.load_state_dict(state["optim"])
        self.assertEqual(state["step"], 3)
        self.assertTrue(torch.equal(state["rng"], rng))
        for a, b in zip(model.parameters(), model2.parameters()):
            self.assertTrue(torch.equal(a, b))  # filled in place: the parameters themselves
        self.step(model, opt, x)
        self.step(model2, opt2, x)
        for a, b in zip(model.parameters(), model2.parameters()):
            self.assertTrue(torch.equal(a.view(torch.int16), b.view(torch.int16)))

    def test_training_goes_on_during_an_async_save(self):
        model, opt = self.make(0)
        x = torch.randn(16, 8, dtype=torch.bfloat16)
        self.step(model, opt, x)
        before = {k: v.clone() for k, v in model.state_dict().items()}
        with ckfmt.AsyncSaver() as saver:
            saver.save(self.path, {"model": model.state_dict(), "optim": opt.state_dict()})
            self.step(model, opt, x)  # changes the tensors the save was given
            saver.wait()
        model2, opt2 = self.make(1)
        state = ckfmt.load(self.path, {"model": model2.state_dict()})
        for k, v in before.items():
            self.assertTrue(torch.equal(model2.state_dict()[k], v), k)
        self.assertEqual(sorted(state["optim"]["state"].keys()), [0, 1, 2, 3])

    def test_what_ckfmt_cannot_hold_is_refused_naming_the_key(self):
        for t, words in [(torch.zeros(3, 3).to_sparse(), "sparse_coo tensor on cpu"),
                         (torch.zeros(3, device="meta"), "strided tensor on meta")]:
            with self.subTest(words=words):
                with self.assertRaises(TypeError) as e:
                    ckfmt.save(self.path, {"m": {"t": t}})
                self.assertIn("m/t: a " + words, str(e.exception))
        self.assertFalse(os.path.exists(self.path))

    def test_convert_gives_torch_load_its_int_keys(self):
        tool = os.environ.get("CKFMT_TOOL")
        if not tool:
            self.skipTest("CKFMT_TOOL is not set")
        model, opt = self.make(0)
        self.step(model, opt, torch.randn(4, 8, dtype=torch.bfloat16))
        ckfmt.save(self.path, {"optim": opt.state_dict()})
        out = os.path.join(self.dir, "state.pt")
        subprocess.run([tool, "convert", self.path, out, "--to", "torch"], check=True,
                       stdout=subprocess.DEVNULL)
        back = torch.load(out, weights_only=True)
        self.assertEqual(sorted(back["optim"]["state"].keys()), [0, 1, 2, 3])
        self.assertIsInstance(back["optim"]["param_groups"][0]["betas"], tuple)

    @unittest.skipIf(torch is None or not torch.cuda.is_available(), "no GPU")
    def test_gpu_tensors_round_trip_and_are_created_on_the_gpu(self):
        state = {"w": torch.randn(1000, device="cuda").to(torch.bfloat16), "n": 1}
        ckfmt.save(self.path, state)
        back = ckfmt.load(self.path, device="cuda:0")
        self.assertEqual(back["w"].device.type, "cuda")
        self.assertTrue(torch.equal(back["w"], state["w"]))
        dest = torch.zeros(1000, dtype=torch.bfloat16, device="cuda")
        ckfmt.load(self.path, {"w": dest, "n": 0})
        self.assertTrue(torch.equal(dest, state["w"]))


    @unittest.skipIf(torch is None or not torch.cuda.is_available(), "no GPU")
    def test_a_gpu_run_resumes_bitwise_with_its_moments_created_on_the_gpu(self):
        model, opt = self.make(0, "cuda")
        x = torch.randn(32, 8, dtype=torch.bfloat16, device="cuda")
        for _ in range(3):
            self.step(model, opt, x)
        params = [p.detach().clone() for p in model.parameters()]
        moments = [opt.state[p]["exp_avg"].clone() for p in model.parameters()]
        with ckfmt.AsyncSaver() as saver:
            saver.save(self.path, {"model": model.state_dict(), "optim": opt.state_dict()},
                       codec="byteplane-zstd")
            with torch.no_grad():  # the GPU goes on at once; the file keeps the snapshot
                for p in model.parameters():
                    p.add_(1)
            saver.wait()
        with torch.no_grad():
            for p, saved in zip(model.parameters(), params):
                p.copy_(saved)
        model2, opt2 = self.make(1, "cuda")
        state = {"model": model2.state_dict(), "optim": opt2.state_dict()}
        ckfmt.load(self.path, state, device="cuda:0")
        for i, want in enumerate(moments):
            made = state["optim"]["state"][i]["exp_avg"]
            self.assertEqual(made.device.type, "cuda")
            self.assertTrue(torch.equal(made, want))
        for a, b in zip(params, model2.parameters()):
            self.assertTrue(torch.equal(a, b))
        opt2.load_state_dict(state["optim"])
        self.step(model, opt, x)
        self.step(model2, opt2, x)
        for a, b in zip(model.parameters(), model2.parameters()):
            self.assertTrue(torch.equal(a.view(torch.int16), b.view(torch.int16)))

if __name__ == "__main__":
    unittest.main()
