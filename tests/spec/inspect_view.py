"""The reader's view of a file as `ckfmt inspect --json` shows it
(INSPECT_JSON.md §2), key paths as the tools print them (FORMAT.md Appendix C),
and the differences between two such documents."""
import math
import re
import struct

import ckfmt_spec as spec


# --- the reader's view as `ckfmt inspect --json` shows it (INSPECT_JSON.md §2) ----

def shown(b):
    """A string of the file as inspect prints it (invalid UTF-8 replaced)."""
    return "" if b is None else b.decode("utf-8", errors="replace")


def key_text(path):
    """The textual key path of FORMAT.md Appendix C."""
    def component(c):
        if isinstance(c, int):
            return f"[{c}]"
        key = re.sub(r"([/\\[])", r"\\\1", shown(c))     # escape / \ [
        if key == "":
            return '""'
        return "\\" + key if key.startswith('"') else key
    return "/".join(map(component, path))


def dotted(path):
    """The dotted form of Appendix C, which convert uses for safetensors names."""
    return ".".join(str(c) if isinstance(c, int) else shown(c) for c in path)


def float_json(x):
    if math.isnan(x):
        return "nan"
    return ("inf" if x > 0 else "-inf") if math.isinf(x) else x


def region_json(region):
    if isinstance(region, spec.Box):
        return {"box": {"offsets": list(region.offsets), "lengths": list(region.lengths)}}
    return {"flat": {"start": region.start, "length": region.length}}


def chunk_json(c):
    return {"offset": c.offset, "stored_size": c.stored_size, "raw_size": c.raw_size,
            "checksum": f"{c.checksum:016x}", "codec": spec.CODEC_NAMES.get(c.codec, f"unknown({c.codec})")}


def entry_json(e):
    d = {"path": [c if isinstance(c, int) else shown(c) for c in e.path],
         "key": key_text(e.path), "kind": spec.KIND_NAMES[e.kind]}
    scalar = {spec.INT: lambda: e.int_value, spec.FLOAT: lambda: float_json(e.float_value),
              spec.BOOL: lambda: e.bool_value, spec.STRING: lambda: shown(e.string_value),
              spec.NONE: lambda: None}
    if e.kind in scalar:
        d["value"] = scalar[e.kind]()
    if e.kind not in (spec.TENSOR, spec.BYTES):
        return d
    chunks = [c for p in e.pieces or [] for c in p.chunks]
    if e.kind == spec.BYTES:
        d["content_type"] = shown(e.content_type)
    d.update(dtype=spec.DTYPES[e.dtype].name, shape=list(e.shape), partial=e.partial,
             raw_bytes=sum(c.raw_size for c in chunks),
             stored_bytes=sum(c.stored_size for c in chunks),
             pieces=[{"rank": p.rank, "region": region_json(p.region),
                      "chunks": [chunk_json(c) for c in p.chunks]} for p in e.pieces or []],
             saved_layout=[{"rank": s.rank, "region": region_json(s.region)}
                           for s in e.saved_layout or []])
    return d


def describe(ck):
    ix = ck.index
    entries = [entry_json(e) for e in ix.entries]
    data = [d for d in entries if "dtype" in d]
    return {
        "format": "ckfmt", "version": list(ck.version), "file_size": ck.size,
        "writer": {"name": shown(ix.writer_name), "version": shown(ix.writer_version)},
        "world_size": ix.world_size, "save_mode": shown(ix.save_mode),
        "metadata": {shown(k): shown(v) for k, v in ix.metadata},
        "entries": entries,
        "totals": {"entries": len(entries), "tensors": sum(d["kind"] == "tensor" for d in data),
                   "raw_bytes": sum(d["raw_bytes"] for d in data),
                   "stored_bytes": sum(d["stored_bytes"] for d in data),
                   "chunks": sum(len(p["chunks"]) for d in data for p in d["pieces"])}}


def diff(expected, actual, where="$"):
    """Differences between inspect's JSON and the reader's. Fields that inspect
    has and the reader does not are ignored (INSPECT_JSON.md §1: fields may be added)."""
    if isinstance(actual, dict) and isinstance(expected, dict):
        return [d for key, value in actual.items()
                for d in ([f"{where}.{key}: missing in inspect"] if key not in expected
                          else diff(expected[key], value, f"{where}.{key}"))]
    if isinstance(actual, list) and isinstance(expected, list):
        if len(actual) != len(expected):
            return [f"{where}: {len(expected)} items in inspect, {len(actual)} in the reader"]
        return [d for i, (x, y) in enumerate(zip(expected, actual))
                for d in diff(x, y, f"{where}[{i}]" + (f" ({y['key']})" if "key" in y else "")
                              if isinstance(y, dict) else f"{where}[{i}]")]
    same = type(expected) is type(actual) and (
        struct.pack("<d", expected) == struct.pack("<d", actual) if isinstance(actual, float)
        else expected == actual)        # bit-exact floats: -0.0 is not 0.0
    return [] if same else [f"{where}: inspect {expected!r}, reader {actual!r}"]


def with_ordered_metadata(doc):
    """Metadata is in file order (INSPECT_JSON.md §1): compare it as a list of pairs."""
    return dict(doc, metadata=list(doc.get("metadata", {}).items()))
