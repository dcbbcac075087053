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
import json
import multiprocessing
import os
import queue
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


class ScratchDirTest(unittest.TestCase):
    """A fresh directory per test (self.dir), removed after it; self.path is
    state.ckfmt in it."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="ckfmt_binding_")
        self.path = os.path.join(self.dir, "state.ckfmt")

    def tearDown(self):
        shutil.rmtree(self.dir)


class BindingTest(ScratchDirTest):
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

    def test_the_cycle_collector_is_paused_during_a_call_and_left_as_it_was(self):
        import gc
        seen = []

        def layout(_key, _shape):  # called from inside the load
            seen.append(gc.isenabled())
            return None

        def calls():
            ckfmt.save(self.path, training_state())
            load_numpy(self.path, layout=layout)
            with self.assertRaises(TypeError):
                ckfmt.save(self.path, {"mixed": {1: "a", "b": 2}})
            with self.assertRaises(ckfmt.CkfmtError):
                load_numpy(os.path.join(self.dir, "absent.ckfmt"))
            with ckfmt.AsyncSaver() as saver:
                saver.prepare({"w": np.ones(4)})
                saver.save(self.path, {"w": np.ones(4)})
        was_enabled = gc.isenabled()
        try:
            for enabled in (True, False):
                with self.subTest(collector_enabled=enabled):
                    (gc.enable if enabled else gc.disable)()
                    seen.clear()
                    calls()
                    self.assertEqual(gc.isenabled(), enabled)
                    self.assertTrue(seen)
                    self.assertFalse(any(seen))
        finally:
            (gc.enable if was_enabled else gc.disable)()

    def test_the_cycle_collector_stays_paused_until_the_last_of_overlapping_calls_ends(self):
        import gc
        import threading
        ckfmt.save(self.path, training_state())
        first_in, second_in, first_done = (threading.Event() for _ in range(3))
        seen = []

        def first_layout(_key, _shape):  # the first call waits for the second to begin
            first_in.set()
            second_in.wait(timeout=30)
            return None

        def second_layout(_key, _shape):  # the second outlasts the first
            if not second_in.is_set():
                second_in.set()
                first_done.wait(timeout=30)
                seen.append(gc.isenabled())
            return None

        def second_call():
            first_in.wait(timeout=30)
            load_numpy(self.path, layout=second_layout)

        was_enabled = gc.isenabled()
        gc.enable()
        try:
            second = threading.Thread(target=second_call)
            second.start()
            load_numpy(self.path, layout=first_layout)
            first_done.set()
            second.join()
            self.assertEqual(seen, [False])  # the first call ending did not resume it
            self.assertTrue(gc.isenabled())  # the last one ending did
        finally:
            (gc.enable if was_enabled else gc.disable)()

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

    def test_a_layout_creates_what_the_caller_lacks_as_its_box(self):
        w = np.arange(24, dtype=np.float32).reshape(4, 6)
        ckfmt.save(self.path, {"w": w, "b": np.ones(3), "step": 3})
        asked = []

        def layout(key, global_shape):
            asked.append((key, global_shape))
            return ((2, 3), (2, 3)) if key == "w" else None
        back = load_numpy(self.path, layout=layout)
        self.assertEqual(sorted(asked), [("b", (3,)), ("w", (4, 6))])
        self.assertIsInstance(back["w"], ckfmt.Shard)
        self.assertEqual((back["w"].global_shape, back["w"].offsets), ((4, 6), (2, 3)))
        self.assertTrue(same(back["w"].tensor, w[2:4, 3:6].copy()))
        self.assertTrue(same(back["b"], np.ones(3)))

        with self.assertRaisesRegex(ValueError, "w: layout gave a box of 1 offsets and 2 "
                                                "lengths for a 2-d tensor"):
            load_numpy(self.path, layout=lambda k, s: ((0,), (1, 1)) if k == "w" else None)

        class Refused(Exception):
            pass

        def failing(key, global_shape):
            raise Refused(key)
        mine = {"b": np.zeros(3)}
        with self.assertRaises(Refused):
            load_numpy(self.path, mine, layout=failing)
        self.assertTrue(same(mine["b"], np.zeros(3)))  # nothing was read

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

    def test_inspect_gives_what_the_cli_prints(self):
        # A golden vector saved by 4 ranks: the document of `ckfmt inspect
        # --json`, pieces and saved layouts included; "file" is the path given.
        vectors = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "spec",
                               "vectors")
        with open(os.path.join(vectors, "sharded.inspect.json")) as f:
            want = json.load(f)
        got = ckfmt.inspect(os.path.join(vectors, "sharded.ckfmt"))
        self.assertEqual(got["file"], os.path.join(vectors, "sharded.ckfmt"))
        got["file"] = want["file"]
        self.assertEqual(got, want)
        self.assertEqual((got["world_size"], got["save_mode"]), (4, "parallel"))
        # A prefix as a sequence of keys and indices, or as a key path.
        for prefix in (["optim", "state", 0], "optim/state/[0]"):
            part = ckfmt.inspect(os.path.join(vectors, "sharded.ckfmt"), prefix=prefix)
            self.assertEqual(part["prefix"], ["optim", "state", 0])
            self.assertTrue(all(e["key"].startswith("optim/state/[0]") for e in part["entries"]))
            self.assertEqual(part["totals"]["entries"], len(part["entries"]))
        # A state saved here: stored sizes and chunks, the codec of each.
        ckfmt.save(self.path, {"w": np.arange(4096, dtype=np.float32)}, codec="zstd")
        (w,) = ckfmt.inspect(self.path)["entries"]
        self.assertEqual((w["key"], w["shape"], w["raw_bytes"]), ("w", [4096], 16384))
        self.assertLess(w["stored_bytes"], 16384)
        self.assertEqual({c["codec"] for p in w["pieces"] for c in p["chunks"]}, {"zstd"})
        with open(self.path, "r+b") as f:  # a damaged footer: refused, naming the file
            f.seek(-20, os.SEEK_END)
            f.write(b"\x5a")
        with self.assertRaises(ckfmt.CkfmtError) as e:
            ckfmt.inspect(self.path)
        self.assertIn(self.path, str(e.exception))

    def test_keys_that_need_escaping(self):
        state = {"a/b": {"[0]": 1, "": 2, '"q': 3, "back\\slash": 4}, "list": [[5], {"x": 6}]}
        ckfmt.save(self.path, state)
        self.assertEqual(load_numpy(self.path), state)


class QueueComm:
    """A transport between the processes of a test: an inbox queue per rank
    (a put never blocks). A rank that fails or leaves tells every inbox, so
    that a rank waiting for it fails instead of waiting forever."""

    def __init__(self, rank, inboxes, fail_at=-1):
        self.rank, self.size, self.inboxes = rank, len(inboxes), inboxes
        self.stash = collections.defaultdict(collections.deque)
        self.gone, self.calls, self.fail_at = set(), 0, fail_at

    def _op(self):
        self.calls += 1
        if self.calls - 1 == self.fail_at:
            self.leave()
            raise ConnectionError("rank %d: the link went down" % self.rank)

    def _put(self, dst, tag, data):
        self.inboxes[dst].put((self.rank, tag, bytes(data)))

    def _take(self, src, tag, into):
        box = self.stash[(src, tag)]
        while not box:
            if src in self.gone:
                raise ConnectionError("rank %d is gone" % src)
            frm, t, data = self.inboxes[self.rank].get(timeout=60)
            if t is None:
                self.gone.add(frm)
            else:
                self.stash[(frm, t)].append(data)
        data = box.popleft()
        if len(data) != len(into):
            raise ValueError("expected %d bytes, got %d" % (len(into), len(data)))
        into[:] = data

    def all_gather(self, send, recv):
        self._op()
        n = len(send)
        for r in range(self.size):
            self._put(r, "gather", send)
        for r in range(self.size):
            self._take(r, "gather", recv[r * n:(r + 1) * n])

    def broadcast(self, buf, root):
        self._op()
        if self.rank == root:
            for r in range(self.size):
                if r != root:
                    self._put(r, "bcast", buf)
        else:
            self._take(root, "bcast", buf)

    def send(self, buf, dst, tag):
        self._op()
        self._put(dst, tag, buf)

    def recv(self, buf, src, tag):
        self._op()
        self._take(src, tag, buf)

    def leave(self):
        for r in range(self.size):
            self.inboxes[r].put((self.rank, None, None))


W = np.arange(24, dtype=np.float32).reshape(4, 6) - 7.5
M = np.linspace(0, 1e-3, 10, dtype=np.float32)
M_SPLIT = [0, 4, 7, 10]  # rank r holds M[M_SPLIT[r]:M_SPLIT[r + 1]]


def rank_state(rank, tensor=np.asarray):
    """Rank r's part of a model sharded over three ranks: rows of w (ranks 0
    and 1; rank 2 holds none), a flat range of the optimizer's m, the
    replicated rest, and (rank 1 only) a data-loader position."""
    lo, hi = M_SPLIT[rank], M_SPLIT[rank + 1]
    state = {"model": {},
             "optim": {"state": {0: {"m": ckfmt.Shard(tensor(M[lo:hi]), M.shape, flat_start=lo),
                                     "step": 3}},
                       "param_groups": [{"lr": 0.1, "betas": (0.9, 0.99)}]},
             "epoch": 2}
    if rank < 2:
        state["model"]["w"] = ckfmt.Shard(tensor(W[2 * rank:2 * rank + 2]), W.shape,
                                          offsets=(2 * rank, 0))
    if rank == 1:
        state["loader"] = {"seen": 17}
    return state


def save_rank(rank, inboxes, results, path, kwargs, fail_at):
    comm = QueueComm(rank, inboxes, fail_at)
    try:
        ckfmt.save(path, rank_state(rank), comm=comm, **kwargs)
        results.put((rank, "OK", "", ""))
    except ckfmt.CkfmtError as e:
        results.put((rank, e.code, str(e), repr(e.__cause__)))
    finally:
        comm.leave()


SPAWN = multiprocessing.get_context("spawn")  # fresh processes: no library state forked


def spawn_ranks(target, args_of_rank, ranks=3):
    """Runs target(*args_of_rank(rank, results)) in `ranks` processes;
    returns what they put on `results`, sorted, or None if one did not."""
    results = SPAWN.Queue()
    procs = [SPAWN.Process(target=target, args=args_of_rank(r, results)) for r in range(ranks)]
    for p in procs:
        p.start()
    try:
        got = sorted(results.get(timeout=120) for _ in procs)
    except queue.Empty:
        got = None
    for p in procs:
        p.join(30)
    return got


class DistTest(ScratchDirTest):
    """Three processes save one file through a transport of the test's own."""

    def save_all(self, fail_at=(-1, -1, -1), **kwargs):
        inboxes = [SPAWN.Queue() for _ in range(3)]
        got = spawn_ranks(save_rank, lambda r, results: (r, inboxes, results, self.path, kwargs,
                                                         fail_at[r]))
        self.assertIsNotNone(got, "a rank did not finish")
        return got

    def test_every_ranks_part_makes_one_file(self):
        for mode, codec in (("flattened", "none"), ("parallel", "byteplane-zstd")):
            with self.subTest(mode=mode):
                got = self.save_all(mode=mode, codec=codec, metadata={"job": "dist"})
                self.assertEqual([g[1] for g in got], ["OK"] * 3, got)
                back = load_numpy(self.path)
                self.assertTrue(same(back["model"]["w"], W))
                self.assertTrue(same(back["optim"]["state"][0]["m"], M))
                self.assertEqual(back["optim"]["state"][0]["step"], 3)
                self.assertEqual(back["optim"]["param_groups"][0]["betas"], (0.9, 0.99))
                self.assertEqual((back["epoch"], back["loader"]), (2, {"seen": 17}))
                self.assertEqual(ckfmt.describe(self.path)[1]["job"], "dist")
                info = ckfmt.inspect(self.path)  # the file says how it was made
                self.assertEqual((info["save_mode"], info["world_size"]), (mode, 3))
                # model/w, held by ranks 0 and 1: their pieces (parallel), or
                # one gathered piece that records how it was sharded.
                w = next(e for e in info["entries"] if e["key"] == "model/w")
                pieces = [p["rank"] for p in w["pieces"]]
                shards = [s["rank"] for s in w["saved_layout"]]
                self.assertEqual((pieces, shards),
                                 ([0, 1], []) if mode == "parallel" else ([0], [0, 1]))
                # A rank of another layout loads its own part.
                mine = {"model": {"w": ckfmt.Shard(np.zeros((4, 3), np.float32), W.shape,
                                                   offsets=(0, 3))}}
                load_numpy(self.path, mine, unexpected="ignore")
                self.assertTrue(same(mine["model"]["w"].tensor, W[:, 3:]))

    def test_a_failing_transport_fails_every_rank_and_keeps_the_previous_file(self):
        self.assertEqual([g[1] for g in self.save_all()], ["OK"] * 3)
        with open(self.path, "rb") as f:
            good = f.read()
        got = self.save_all(fail_at=(-1, 3, -1))
        self.assertTrue(all(g[1] == "Aborted" for g in got), got)
        self.assertIn("failed in the caller's transport", got[1][2])
        self.assertIn("the link went down", got[1][3])
        with open(self.path, "rb") as f:
            self.assertEqual(f.read(), good)
        self.assertEqual(os.listdir(self.dir), ["state.ckfmt"])


def torch_save_rank(rank, init, path, results, device, mode):
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=3)
    try:
        comm = ckfmt.TorchComm()
        # The transport itself: rank order, roots and tags.
        got = bytearray(6)
        comm.all_gather(memoryview(bytearray([rank, 7])), memoryview(got))
        assert got == bytearray([0, 7, 1, 7, 2, 7]), got
        buf = bytearray([rank] * 3)
        comm.broadcast(memoryview(buf), 1)
        assert buf == bytearray([1] * 3), buf
        mine, theirs = bytearray([10 + rank]), bytearray(1)
        for step in (0, 1) if rank % 2 == 0 else (1, 0):  # a ring, sends and receives paired
            if step == 0:
                comm.send(memoryview(mine), (rank + 1) % 3, 5)
            else:
                comm.recv(memoryview(theirs), (rank + 2) % 3, 5)
        assert theirs[0] == 10 + (rank + 2) % 3, theirs
        if device == "cpu":
            # A small budget: rank 0 gathers bucket by bucket, through gloo sends.
            ckfmt.save(path, rank_state(rank, torch.from_numpy), comm=comm, mode=mode,
                       memory_budget=64)
        else:  # GPU shards: sent through host memory (flattened), or written by each rank
            ckfmt.save(path, rank_state(rank, lambda a: torch.from_numpy(a).to(device)),
                       comm=comm, mode=mode, codec="byteplane-zstd", memory_budget=64)
        results.put((rank, "OK"))
    except Exception as e:
        results.put((rank, repr(e)))
    finally:
        dist.destroy_process_group()


def dtensor_rank(rank, init, path, results):
    """Saves DTensors laid out one way and loads them laid out another."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=3)
    try:
        mesh = init_device_mesh("cpu", (3,))
        w, m = torch.from_numpy(W), torch.from_numpy(M)
        state = {"model": {"w": distribute_tensor(w, mesh, [Shard(1)]),  # 2 columns each
                           "b": distribute_tensor(w[0], mesh, [Replicate()])},
                 "optim": {"m": distribute_tensor(m, mesh, [Shard(0)])}}  # 4, 4 and 2
        ckfmt.save(path, state, comm=ckfmt.TorchComm())
        dist.barrier()
        back = {"model": {"w": distribute_tensor(torch.zeros(4, 6), mesh, [Shard(0)])},
                "optim": {"m": distribute_tensor(torch.zeros(10), mesh, [Replicate()])}}
        ckfmt.load(path, back, unexpected="ignore")
        assert torch.equal(back["model"]["w"].full_tensor(), w)
        assert torch.equal(back["optim"]["m"].to_local(), m)
        # An AdamW over DTensor parameters resumes from a fresh optimizer:
        # its moments come back as DTensors laid out like their parameters.
        def make(seed):
            torch.manual_seed(seed)
            params = [torch.nn.Parameter(distribute_tensor(torch.randn(6, 4), mesh, [Shard(0)])),
                      torch.nn.Parameter(distribute_tensor(torch.randn(5), mesh, [Replicate()]))]
            return params, torch.optim.AdamW(params, lr=0.1)

        def step(params, opt):
            opt.zero_grad()
            sum((p * p).sum() for p in params).backward()
            opt.step()
        params, opt = make(0)
        step(params, opt)
        opt_path = path + ".optim"
        ckfmt.save(opt_path, {"params": {str(i): p for i, p in enumerate(params)},
                              "optim": opt.state_dict()}, comm=ckfmt.TorchComm())
        params2, opt2 = make(1)
        state = {"params": {str(i): p for i, p in enumerate(params2)},
                 "optim": opt2.state_dict()}
        with torch.no_grad():
            ckfmt.load(opt_path, state, layout=ckfmt.optimizer_layout(opt2))
        for i, p in enumerate(params2):
            made = state["optim"]["state"][i]["exp_avg"]
            assert isinstance(made, DTensor) and made.placements == p.placements, (i, made)
            assert torch.equal(made.to_local(), opt.state[params[i]]["exp_avg"].to_local())
        opt2.load_state_dict(state["optim"])
        step(params, opt)
        step(params2, opt2)
        for a, b in zip(params, params2):
            assert torch.equal(a.to_local().view(torch.int32), b.to_local().view(torch.int32))
        try:  # pending sums are not values: refused on every rank before anything is sent
            ckfmt.save(path, {"p": DTensor.from_local(torch.ones(2), mesh, [Partial()])},
                       comm=ckfmt.TorchComm())
            raise AssertionError("a Partial DTensor was saved")
        except TypeError as e:
            assert "p: a DTensor with a Partial placement" in str(e), e
        results.put((rank, "OK"))
    except Exception as e:
        results.put((rank, repr(e)))
    finally:
        dist.destroy_process_group()


@unittest.skipIf(torch is None, "torch is not installed")
class TorchTest(ScratchDirTest):
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

    def run_ranks(self, target, *args):
        """Runs target(rank, init, path, results, *args) in three processes."""
        init = "file://" + os.path.join(self.dir, "rendezvous_%d" % len(os.listdir(self.dir)))
        got = spawn_ranks(target, lambda r, results: (r, init, self.path, results) + args)
        self.assertEqual(got, [(0, "OK"), (1, "OK"), (2, "OK")])

    def save_with_gloo(self, device, mode):
        self.run_ranks(torch_save_rank, device, mode)
        back = ckfmt.load(self.path)
        self.assertTrue(torch.equal(back["model"]["w"], torch.from_numpy(W)))
        self.assertTrue(torch.equal(back["optim"]["state"][0]["m"], torch.from_numpy(M)))
        self.assertEqual(back["loader"], {"seen": 17})

    def test_dtensors_save_as_their_shards_and_load_into_another_layout(self):
        self.run_ranks(dtensor_rank)
        back = ckfmt.load(self.path)
        self.assertTrue(torch.equal(back["model"]["w"], torch.from_numpy(W)))
        self.assertTrue(torch.equal(back["model"]["b"], torch.from_numpy(W[0])))
        self.assertTrue(torch.equal(back["optim"]["m"], torch.from_numpy(M)))

    def resume_on_a_mesh(self, device, backend):
        """One rank: an AdamW over a DTensor parameter on a `device` mesh
        gets its moments back as DTensors there, created on that device."""
        import torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import DTensor, distribute_tensor
        from torch.distributed.tensor import Shard as Rows
        dist.init_process_group(backend, init_method="file://" + os.path.join(self.dir, "pg"),
                                rank=0, world_size=1)
        try:
            mesh = init_device_mesh(device, (1,))

            def make(values):
                p = torch.nn.Parameter(distribute_tensor(values.to(device), mesh, [Rows(0)]))
                return p, torch.optim.AdamW([p], lr=0.1)
            p, opt = make(torch.randn(6, 4))
            (p * p).sum().backward()
            opt.step()
            ckfmt.save(self.path, {"p": p, "optim": opt.state_dict()})
            p2, opt2 = make(torch.zeros(6, 4))
            state = {"p": p2, "optim": opt2.state_dict()}
            if device == "cuda":  # moments for a GPU mesh, created in host memory: refused
                with self.assertRaisesRegex(ValueError, "its mesh is on cuda"):
                    ckfmt.load(self.path, state, layout=ckfmt.optimizer_layout(opt2))
                self.assertEqual(state["optim"]["state"], {})  # nothing was read
            with torch.no_grad():
                ckfmt.load(self.path, state, layout=ckfmt.optimizer_layout(opt2),
                           device="cuda:0" if device == "cuda" else None)
            made = state["optim"]["state"][0]["exp_avg"]
            self.assertIsInstance(made, DTensor)
            self.assertEqual(made.to_local().device.type, device)
            self.assertTrue(torch.equal(made.to_local(), opt.state[p]["exp_avg"].to_local()))
            self.assertTrue(torch.equal(p2.to_local(), p.to_local()))
        finally:
            dist.destroy_process_group()

    def test_a_cpu_mesh_gets_its_optimizer_state_back_as_dtensors(self):
        self.resume_on_a_mesh("cpu", "gloo")

    @unittest.skipIf(torch is None or not torch.cuda.is_available(), "no GPU")
    def test_a_gpu_mesh_gets_its_optimizer_state_created_on_the_gpu(self):
        self.resume_on_a_mesh("cuda", "nccl")

    def test_placements_that_hold_no_box_are_refused(self):
        from torch.distributed.tensor import Partial
        from torch.distributed.tensor.placement_types import _StridedShard
        from ckfmt._flatten import _dtensor_box
        for p, words in ((Partial(), "Partial placement"),
                         (_StridedShard(0, split_factor=2), "strided shard placement")):
            with self.assertRaisesRegex(TypeError, "m/w: a DTensor with a " + words):
                _dtensor_box("m/w", (4,), None, [p])

    def test_ranks_of_a_gloo_group_save_one_file(self):
        self.save_with_gloo("cpu", "flattened")

    @unittest.skipIf(torch is None or not torch.cuda.is_available(), "no GPU")
    def test_ranks_save_their_gpu_shards_in_parallel(self):
        self.save_with_gloo("cuda:0", "parallel")

    @unittest.skipIf(torch is None or not torch.cuda.is_available(), "no GPU")
    def test_rank_0_gathers_gpu_shards_sent_through_host_memory(self):
        self.save_with_gloo("cuda:0", "flattened")

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
