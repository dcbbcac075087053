#!/usr/bin/python3
"""Conformance check: the ckfmt_spec reader (written from spec/FORMAT.md
alone) against the golden vectors, the invalid vectors and the ckfmt CLI.

    python3 tests/spec/conformance.py --vectors spec/vectors --ckfmt build/tools/ckfmt \
        [--main-job build/tools/ckfmt-main-job]
        [--dist-main-job build/tools/ckfmt-dist-main-job --mpirun mpirun] [--work DIR]

Groups of checks, one summary line each (README.md has the details):
reader regions (the reader's own §7 arithmetic), valid vectors (against
NAME.inspect.json, `ckfmt convert` and vectors/README.md), invalid vectors
(spec/vectors/invalid/invalid.json), index mutations (resealed bit flips and
absent fields, reader against `ckfmt inspect`), chunk mutations (flipped bits
in compressed chunks, reader against `ckfmt verify`), engine files (--main-job,
--dist-main-job).

Exit status: 0 all checks pass, 1 some failed (listed at the end),
77 (CTest's skip) when numpy, xxhash or zstandard cannot be imported.
"""
import argparse
import importlib
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

SKIP = 77
for module in ("numpy", "xxhash", "zstandard"):     # what ckfmt_spec needs
    try:
        importlib.import_module(module)
    except ImportError:
        print(f"SKIPPED: python module {module} not importable "
              "(Debian: apt install python3-numpy python3-xxhash python3-zstandard)")
        sys.exit(SKIP)

import numpy as np  # noqa: E402
sys.dont_write_bytecode = True      # leave no __pycache__ in the source tree
sys.path.insert(0, str(Path(__file__).resolve().parent))
import ckfmt_spec as spec  # noqa: E402
from convert_outputs import read_safetensors, read_torch_blobs  # noqa: E402
from chunk_mutations import chunk_mutations  # noqa: E402
from index_mutations import index_mutations  # noqa: E402
from inspect_view import describe, diff, dotted, key_text, with_ordered_metadata  # noqa: E402
from reader_regions import check_reader_regions  # noqa: E402
from vector_values import SHARDED_COVERED, element_values, expected_tensors, same_value  # noqa: E402

MAIN_JOB_CODECS = ("none", "zstd", "byteplane-zstd")
# Chunk codecs a file saved with each --codec may hold: the writer stores a chunk
# that zstd does not shrink uncompressed, and 1-byte dtypes with zstd (§5.3.1).
MAIN_JOB_CODEC_IDS = {"none": {0}, "zstd": {0, 1}, "byteplane-zstd": {0, 1, 2}}
MAX_DIFFS_PER_FILE = 10


class Report:
    def __init__(self):
        self.failures = []

    def fail(self, group, message):
        self.failures.append(f"[{group}] {message}")

    @staticmethod
    def line(text):
        print(text, flush=True)


def cited_rule(message):
    """The FORMAT.md rule a ckfmt error message cites ("... [FORMAT.md C3]"), or None."""
    found = re.findall(r"\[FORMAT\.md (\w+)\]", message)
    return found[-1] if found else None


def run(cmd, timeout=120):
    return subprocess.run([str(c) for c in cmd], capture_output=True, timeout=timeout,
                          text=True, errors="replace")


def outcome_of(exc):
    """How a refusal reads in this driver's messages, e.g. 'corrupt F2'."""
    if isinstance(exc, spec.Refusal):
        return f"{exc.refusal} {exc.rule}"
    return f"CRASH {type(exc).__name__}: {exc} @ {traceback.extract_tb(exc.__traceback__)[-1].lineno}"


def compare_with_inspect(ck, inspect_doc, group, label, report):
    differences = diff(with_ordered_metadata(inspect_doc), with_ordered_metadata(describe(ck)))
    for d in differences[:MAX_DIFFS_PER_FILE]:
        report.fail(group, f"{label}: {d}")


# --- decoded data against `ckfmt convert` to safetensors ------------------------

def value_at(tree, path):
    for c in path:
        tree = tree[c if isinstance(c, int) else spec.text(c)]
    return tree


def compare_with_convert(ck, tree, ckfmt, work, group, label, report):
    """Every whole tensor with a safetensors dtype must come out of `ckfmt convert`
    with the same dtype, shape and bytes. Returns how many did."""
    out = work / (Path(label).stem + ".safetensors")
    res = run([ckfmt, "convert", ck.path, out])
    if res.returncode != 0:
        report.fail(group, f"{label}: ckfmt convert exit {res.returncode}: {res.stderr.strip()[-300:]}")
        return 0
    tensors, metadata = read_safetensors(out)
    if metadata != ck.metadata:
        report.fail(group, f"{label}: safetensors metadata {metadata} != file metadata {ck.metadata}")
    wanted = {}
    for e in ck.index.entries:
        if e.kind == spec.TENSOR and not e.partial and spec.DTYPES[e.dtype].safetensors:
            wanted.setdefault(dotted(e.path), []).append(e)
    for name in tensors.keys() - wanted.keys():
        report.fail(group, f"{label}: convert wrote {name!r}, which is no whole tensor of the file")
    same = 0
    for name, entries in wanted.items():
        if len(entries) > 1:
            continue                    # the dotted form is ambiguous (Appendix C)
        e = entries[0]
        if name not in tensors:
            report.fail(group, f"{label}: {name!r} is missing from convert's safetensors")
            continue
        st_dtype, st_shape, st_bytes = tensors[name]
        mine = (spec.DTYPES[e.dtype].safetensors, list(e.shape), value_at(tree, e.path).data)
        if (st_dtype, st_shape, st_bytes) != mine:
            report.fail(group, f"{label}: {name!r}: convert gives {st_dtype} {st_shape} "
                               f"{len(st_bytes)} B, reader {mine[0]} {mine[1]} {len(mine[2])} B"
                               + (", bytes differ" if len(st_bytes) == len(mine[2]) else ""))
        else:
            same += 1
    return same


def compare_blobs_with_convert(ck, tree, ckfmt, work, group, label, report):
    """Bytes blobs are not in safetensors; `ckfmt convert` to torch.save writes
    them as _codecs.encode(str, 'latin1') (read_torch_blobs). convert drops
    pickle blobs, so those are compared by size only (with inspect, above).
    Returns how many blobs matched."""
    blobs = [value_at(tree, e.path) for e in ck.index.entries
             if e.kind == spec.BYTES and not e.partial]
    wanted = sorted(bytes(b) for b in blobs if b.content_type != "pickle")
    if not wanted:
        return 0
    out = work / (Path(label).stem + ".pt")
    res = run([ckfmt, "convert", ck.path, out])
    if res.returncode != 0:
        report.fail(group, f"{label}: ckfmt convert to torch exit {res.returncode}: {res.stderr.strip()[-300:]}")
        return 0
    written = read_torch_blobs(out)
    if written != wanted:
        report.fail(group, f"{label}: blobs from convert to torch ({[len(b) for b in written]} bytes) "
                           f"differ from the reader's ({[len(b) for b in wanted]} bytes)")
        return 0
    return len(wanted)


# --- values the vectors README describes -----------------------------------------

def check_expected(tree, ck, name, group, report):
    """The README's values in dtypes.ckfmt and sharded.ckfmt; returns elements checked."""
    expected = expected_tensors(name)
    entries = {key_text(e.path): e for e in ck.index.entries}
    checked = 0
    for key, (dtype, shape, values) in expected.items():
        if key not in entries:
            report.fail(group, f"{name}: no entry {key}")
            continue
        tensor = value_at(tree, entries[key].path)
        if (spec.DTYPES[tensor.dtype].name, list(tensor.shape)) != (dtype, shape):
            report.fail(group, f"{name}: {key} is {tensor!r}, expected {dtype} {shape}")
            continue
        actual = element_values(tensor)
        covered = SHARDED_COVERED.get(key)
        if covered is not None:
            mask = list(np.flatnonzero(tensor.covered))
            if mask != covered:
                report.fail(group, f"{name}: {key} covers {mask}, expected {covered}")
            values, actual = [values[g] for g in covered], [actual[g] for g in covered]
        if len(values) != len(actual) or not all(map(same_value, values, actual)):
            report.fail(group, f"{name}: {key} holds {actual}, expected {values}")
        checked += len(values)
    return checked


# --- a. valid vectors ---------------------------------------------------------------

def check_valid_vectors(args, work, report):
    group = "valid"
    files = sorted(args.vectors.glob("*.ckfmt"))
    if not files:
        report.fail(group, f"no *.ckfmt in {args.vectors}")
    entries = tensors = same = blobs = values = 0
    for path in files:
        name = path.stem
        try:
            with spec.CheckpointFile(path) as ck:
                golden = json.loads(path.with_suffix(".inspect.json").read_text())
                compare_with_inspect(ck, golden, group, path.name, report)
                tree = ck.load(allow_partial=True)
                check_t4(ck, group, path.name, report)
                same += compare_with_convert(ck, tree, args.ckfmt, work, group, path.name, report)
                blobs += compare_blobs_with_convert(ck, tree, args.ckfmt, work, group, path.name, report)
                values += check_expected(tree, ck, name, group, report)
                entries += len(ck.index.entries)
                tensors += sum(e.kind == spec.TENSOR for e in ck.index.entries)
        except Exception as ex:         # a refusal of a valid vector is a failure too
            report.fail(group, f"{path.name}: {outcome_of(ex)}")
    return (f"valid vectors: {len(files)} files, {entries} entries, {tensors} tensors; "
            f"byte-identical to ckfmt convert: {same} tensors, {blobs} non-pickle blobs; "
            f"{values} element values as vectors/README.md describes")


def check_t4(ck, group, label, report):
    """T4: a whole load fails if a partial entry leaves elements uncovered."""
    gaps = any(e.partial and sum(spec.elements(p.region) for p in e.pieces or []) < math.prod(e.shape)
               for e in ck.index.entries)
    if not gaps:
        return
    try:
        ck.load()
        report.fail(group, f"{label}: load() of uncovered partial entries did not fail (T4)")
    except spec.Uncovered as ex:
        if ex.rule != "T4":
            report.fail(group, f"{label}: load() refused with {ex.rule}, expected T4")


# --- b. invalid vectors ---------------------------------------------------------------

def check_invalid_vectors(args, work, report):
    group = "invalid"
    manifest = args.vectors / "invalid" / "invalid.json"
    if not manifest.exists():
        return f"invalid vectors: none ({manifest} does not exist)"
    items = json.loads(manifest.read_text())["vectors"]
    passed, rules = 0, set()
    for item in items:
        label = item.get("file", "?")
        if not manifest_item_ok(item):
            report.fail(group, f"{label}: malformed manifest entry {item}")
            continue
        failures = len(report.failures)
        expected = f"{item['refusal']} {item['rule']} at {item['stage']}"
        got = invalid_outcome(manifest.parent / item["file"], item)
        if got != expected:
            report.fail(group, f"{label}: expected {expected}; reader: {got}  ({item.get('what', '')})")
        for problem in cli_disagreement(args.ckfmt, manifest.parent / item["file"], item):
            report.fail(group, f"{label}: {problem}")
        passed += len(report.failures) == failures
        rules.add(item["rule"])
    return (f"invalid vectors: {len(items)} files covering {len(rules)} rules "
            f"({' '.join(sorted(rules))}); {passed} refused by the reader as listed, "
            f"and by the CLI alike")


def manifest_item_ok(item):
    return (isinstance(item.get("file"), str) and isinstance(item.get("rule"), str)
            and item.get("refusal") in ("corrupt", "unsupported")
            and item.get("stage") in ("open", "read")
            and (item["stage"] == "open" or isinstance(item.get("entry"), list)))


def invalid_outcome(path, item):
    try:
        ck = spec.CheckpointFile(path)
    except Exception as ex:
        return f"{outcome_of(ex)} at open"
    with ck:
        if item["stage"] == "open":
            return "opened"
        wanted = tuple(c.encode() if isinstance(c, str) else c for c in item["entry"])
        entry = next((e for e in ck.index.entries if e.path == wanted), None)
        if entry is None or entry.kind not in (spec.TENSOR, spec.BYTES):
            return f"opened, but has no data entry at {item.get('entry')}"
        try:
            ck.read_covered(entry)      # reads every chunk of the entry
            return "opened and read"
        except Exception as ex:
            return f"{outcome_of(ex)} at read"


def cli_disagreement(ckfmt, path, item):
    """The CLI should refuse the same way: inspect fails at open iff stage is
    open (and otherwise describes the file as the reader does), and verify
    reports a problem of the same kind (INSPECT_JSON.md)."""
    inspect = run([ckfmt, "inspect", "--json", path])
    if (inspect.returncode != 0) != (item["stage"] == "open"):
        yield f"ckfmt inspect exit {inspect.returncode} for a stage-{item['stage']} refusal"
    elif inspect.returncode != 0 and cited_rule(inspect.stderr) != item["rule"]:
        yield f"ckfmt inspect cites {cited_rule(inspect.stderr)}, not {item['rule']}"
    elif inspect.returncode == 0:
        try:
            ck = spec.CheckpointFile(path)
        except spec.Refusal:
            ck = None                   # reported with the reader's outcome
        if ck is not None:
            with ck:
                theirs = with_ordered_metadata(json.loads(inspect.stdout))
                yield from diff(theirs, with_ordered_metadata(describe(ck)))[:MAX_DIFFS_PER_FILE]
    verify = run([ckfmt, "verify", "--json", path])
    code = {"corrupt": "Corruption", "unsupported": "Unsupported"}[item["refusal"]]
    try:
        problems = json.loads(verify.stdout)["files"][0]["problems"]
    except (ValueError, KeyError, IndexError):
        problems = [{"code": f"no JSON (exit {verify.returncode})"}]
    found = [(p["code"], p.get("rule")) for p in problems]
    if (code, item["rule"]) not in found:
        yield f"ckfmt verify reports {found}, expected a {code} problem citing {item['rule']}"


# --- c. resealed index bit flips against `ckfmt inspect` -------------------------------

def reader_verdict(path):
    """'opens' or the refusal; data is read too, so decoders meet hostile indexes."""
    try:
        with spec.CheckpointFile(path) as ck:
            try:
                ck.load(allow_partial=True)
            except spec.Refusal:
                pass                    # the index opened; its data may be refused
            return "opens", describe(ck)
    except Exception as ex:
        return outcome_of(ex), None


def check_index_mutations(args, work, report):
    group = "index mutations"
    rng = random.Random(args.seed)
    variants = opened = agreed = 0
    scratch = work / "mutations"
    scratch.mkdir(exist_ok=True)
    with ThreadPoolExecutor(max_workers=2) as pool:   # the CLI runs while the reader does
        for path in sorted(args.vectors.glob("*.ckfmt")):
            for label, variant in index_mutations(path, rng, args.flips):
                out = scratch / f"variant{variants}.ckfmt"
                out.write_bytes(variant)
                cli = pool.submit(run, [args.ckfmt, "inspect", "--json", out])
                verdict, mine = reader_verdict(out)
                cli = cli.result()
                out.unlink()
                variants += 1
                opened += mine is not None
                problems = list(mutation_disagreement(verdict, mine, cli))
                for problem in problems:
                    report.fail(group, f"{label}: {problem}")
                agreed += not problems
    return (f"index mutations (resealed; seed {args.seed}, {args.flips} bit flips per vector, "
            f"every vtable slot zeroed): {variants} variants, {opened} open in the reader; "
            f"reader and ckfmt inspect agree on {agreed}")


def mutation_disagreement(verdict, mine, cli):
    stderr = cli.stderr.strip()[-200:]
    if verdict.startswith("CRASH"):
        yield f"reader {verdict}"
    if cli.returncode not in (0, 1):
        yield f"ckfmt inspect exit {cli.returncode}: {stderr}"
    elif (mine is None) != (cli.returncode == 1):
        yield f"reader {verdict}, ckfmt inspect exit {cli.returncode} {stderr}"
    elif mine is None and cited_rule(cli.stderr) != verdict.split()[-1]:
        # Both check in FORMAT.md's order, so both meet the same rule first.
        yield f"both refuse, the reader for {verdict}, ckfmt inspect for {cited_rule(cli.stderr)}: {stderr}"
    elif mine is not None:
        theirs = with_ordered_metadata(json.loads(cli.stdout))
        yield from (f"both open, but {d}" for d in diff(theirs, with_ordered_metadata(mine))[:3])


# --- c2. resealed chunk bit flips against `ckfmt verify` --------------------------------

def chunk_verdict(path, chunk):
    """'decodes' or the refusal of reading the entries that hold `chunk`."""
    try:
        with spec.CheckpointFile(path) as ck:
            for e in ck.index.entries:
                if any(c.offset == chunk.offset for p in e.pieces or [] for c in p.chunks):
                    ck.read_entry(e)
        return "decodes"
    except Exception as ex:
        return outcome_of(ex)


def verify_rules(stdout):
    """The rules that `ckfmt verify --json`'s problems cite."""
    try:
        return [p.get("rule") for f in json.loads(stdout)["files"] for p in f["problems"]]
    except (ValueError, KeyError, TypeError):
        return []


def check_chunk_mutations(args, work, report):
    group = "chunk mutations"
    rng = random.Random(args.seed)
    variants = refused = agreed = 0
    out = work / "chunk-variant.ckfmt"
    for path in sorted(args.vectors.glob("*.ckfmt")):
        for label, variant, chunk in chunk_mutations(path, rng, args.chunk_flips):
            out.write_bytes(variant)
            mine = chunk_verdict(out, chunk)
            cli = run([args.ckfmt, "verify", "--json", out])
            variants += 1
            refused += mine != "decodes"
            if mine.startswith("CRASH") or cli.returncode not in (0, 1):
                report.fail(group, f"{label}: reader {mine}, ckfmt verify exit {cli.returncode}")
            elif (mine == "decodes") != (cli.returncode == 0):
                report.fail(group, f"{label}: reader {mine}, ckfmt verify exit {cli.returncode}: "
                                   f"{cli.stdout.strip()[-200:]}")
            elif mine != "decodes" and mine.split()[-1] not in verify_rules(cli.stdout):
                report.fail(group, f"{label}: reader {mine}, ckfmt verify cites "
                                   f"{verify_rules(cli.stdout)}")
            else:
                agreed += 1
    out.unlink(missing_ok=True)
    return (f"chunk mutations (compressed chunks, checksums recomputed; {args.chunk_flips} per vector "
            f"with any): {variants} variants, {refused} refused by the reader (D4, D5); reader and "
            f"ckfmt verify agree on {agreed}, refusals on the rule")


# --- d. files the engine writes -----------------------------------------------------------

def check_engine_file(path, label, args, report, group, totals):
    """One file an engine job kept: the reader against ckfmt inspect and
    ckfmt convert. Returns the set of chunk codec ids it holds."""
    totals["size"] += path.stat().st_size
    try:
        with spec.CheckpointFile(path) as ck:
            inspect = run([args.ckfmt, "inspect", "--json", path])
            if inspect.returncode != 0:
                report.fail(group, f"{label}: ckfmt inspect exit {inspect.returncode}")
                return set()
            compare_with_inspect(ck, json.loads(inspect.stdout), group, label, report)
            tree = ck.load()
            totals["tensors"] += compare_with_convert(ck, tree, args.ckfmt, path.parent, group, label, report)
            totals["blobs"] += compare_blobs_with_convert(ck, tree, args.ckfmt, path.parent, group,
                                                          label, report)
            totals["entries"] += len(ck.index.entries)
            totals["save_modes"].add((ck.index.save_mode or b"").decode(errors="replace"))
            return {c.codec for e in ck.index.entries for p in e.pieces or [] for c in p.chunks}
    except Exception as ex:
        report.fail(group, f"{label}: {outcome_of(ex)}")
        return set()


def kept_files(res, out_dir, expected, group, label, report):
    """The .ckfmt files a job kept in out_dir, when it succeeded and kept `expected` of them."""
    if res.returncode != 0:
        report.fail(group, f"{label}: exit {res.returncode}: {res.stdout.strip()[-300:]}")
        return []
    kept = sorted(out_dir.glob("*.ckfmt"))
    if len(kept) != expected:
        report.fail(group, f"{label}: expected {expected} kept .ckfmt, found {kept}")
        return []
    return kept


def check_main_job(args, work, report):
    group = "main job"
    totals = dict(size=0, entries=0, tensors=0, blobs=0, save_modes=set())
    jobs = []
    for codec in MAIN_JOB_CODECS:
        out_dir = work / "main-job" / codec
        shutil.rmtree(out_dir, ignore_errors=True)     # what an earlier run left in --work
        res = run([args.main_job, "--dir", out_dir, "--size-mb", args.size_mb, "--codec", codec, "--keep"],
                  timeout=300)
        kept = kept_files(res, out_dir, 1, group, f"ckfmt-main-job --codec {codec}", report)
        said = re.findall(r"kept (\S+\.ckfmt)", res.stdout)
        if kept and said and Path(said[-1]).resolve() != kept[0].resolve():
            report.fail(group, f"{codec}: kept {kept[0]}, output says {said[-1]}")
            continue
        for path in kept:
            codecs = check_engine_file(path, f"{codec} file", args, report, group, totals)
            if codecs and (not codecs <= MAIN_JOB_CODEC_IDS[codec] or max(MAIN_JOB_CODEC_IDS[codec]) not in codecs):
                report.fail(group, f"{codec}: chunk codecs {sorted(codecs)}")
        jobs.append(f"--codec {codec}")
    if args.dist_main_job and args.mpirun:
        # 4 ranks save FSDP1-style flat ranges and FSDP2-style uneven row
        # chunks, each layout into a flattened and a parallel file.
        out_dir = work / "dist-main-job"
        shutil.rmtree(out_dir, ignore_errors=True)
        out_dir.mkdir(parents=True)
        res = run([args.mpirun, "--allow-run-as-root", "--oversubscribe", "-np", 4, args.dist_main_job,
                   "--params-mb", 2, "--dir", out_dir, "--keep"], timeout=300)
        for path in kept_files(res, out_dir, 4, group, "ckfmt-dist-main-job", report):
            check_engine_file(path, f"dist {path.name}", args, report, group, totals)
        jobs.append("4-rank dist")
    return (f"engine files ({', '.join(jobs)}; save modes {', '.join(sorted(totals['save_modes']))}): "
            f"{totals['size'] / 2**20:.0f} MiB, {totals['entries']} entries; byte-identical to ckfmt convert: "
            f"{totals['tensors']} tensors, {totals['blobs']} non-pickle blobs")


# --- main ---------------------------------------------------------------------------------

def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vectors", type=Path, required=True, help="spec/vectors")
    parser.add_argument("--ckfmt", type=Path, required=True, help="the ckfmt CLI")
    parser.add_argument("--main-job", type=Path, help="ckfmt-main-job: also check engine-written files")
    parser.add_argument("--dist-main-job", type=Path,
                        help="ckfmt-dist-main-job, with --mpirun: also check a 4-rank job's files")
    parser.add_argument("--mpirun", type=Path, help="mpirun, for --dist-main-job")
    parser.add_argument("--work", type=Path, help="scratch directory (default: a temporary one)")
    parser.add_argument("--flips", type=int, default=600, help="index bit flips per vector")
    parser.add_argument("--chunk-flips", type=int, default=150,
                        help="compressed-chunk variants per vector that has such chunks")
    parser.add_argument("--seed", type=int, default=20240601, help="seed of the bit-flip samples")
    parser.add_argument("--size-mb", type=int, default=4, help="ckfmt-main-job --size-mb")
    args = parser.parse_args()
    for tool in [args.ckfmt] + [t for t in (args.main_job, args.dist_main_job, args.mpirun) if t]:
        if not os.access(tool, os.X_OK):
            print(f"FAIL: {tool} is not an executable")
            return 1
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="ckfmt-conformance-"))
    work.mkdir(parents=True, exist_ok=True)
    report = Report()
    groups = [check_reader_regions, check_valid_vectors, check_invalid_vectors, check_index_mutations,
              check_chunk_mutations]
    if args.main_job:
        groups.append(check_main_job)
    started = time.monotonic()
    try:
        for check in groups:
            group_started = time.monotonic()
            try:
                summary = check(args, work, report)
            except Exception:           # a broken manifest, a hung tool, a bug here
                summary = f"{check.__name__}: stopped early"
                report.fail(check.__name__, traceback.format_exc().strip())
            report.line(f"{summary}  [{time.monotonic() - group_started:.1f} s]")
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    report.line(f"total time: {time.monotonic() - started:.1f} s")
    if report.failures:
        report.line(f"\n{len(report.failures)} FAILURES:")
        for f in report.failures:
            report.line("  " + f)
        return 1
    report.line("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
