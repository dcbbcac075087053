"""Resealed variants of a file's index: bit flips and absent fields."""
import struct

import ckfmt_spec as spec


def reseal(b):
    """Recompute index_checksum and footer_checksum after editing the index."""
    footer = len(b) - 64
    offset, length = struct.unpack_from("<QQ", b, footer)
    struct.pack_into("<Q", b, footer + 16, spec.xxh3(b[offset:offset + length]))
    struct.pack_into("<Q", b, footer + 48, spec.xxh3(b[footer:footer + 48]))


def index_mutations(path, rng, flips):
    """(label, resealed file bytes): `flips` random single-bit flips of the
    index, then every vtable slot zeroed in turn (one field made absent)."""
    original = path.read_bytes()
    offset, length = struct.unpack_from("<QQ", original, len(original) - 64)
    edits = [(f"index byte {pos} bit {bit}", pos, bytes([original[offset + pos] ^ 1 << bit]))
             for pos in sorted(rng.sample(range(length), min(length, flips)))
             for bit in [rng.randrange(8)]]
    vtables = spec.index_vtables(original[offset:offset + length])
    edits += [(f"vtable at {vt}: field {(slot - vt - 4) // 2} absent", slot, bytes(2))
              for vt, size in sorted(vtables.items()) for slot in range(vt + 4, vt + size, 2)
              if any(original[offset + slot:offset + slot + 2])]
    for label, pos, new in edits:
        variant = bytearray(original)
        variant[offset + pos:offset + pos + len(new)] = new
        reseal(variant)
        yield f"{path.name} {label}", variant
