"""Compressed chunks with bits flipped and their checksums recomputed:
what only the codec rules (D4, D5) can refuse."""
import struct

import ckfmt_spec as spec
from index_mutations import reseal


def compressed_chunks(path):
    with spec.CheckpointFile(path) as ck:
        return [c for e in ck.index.entries for p in e.pieces or [] for c in p.chunks
                if c.codec in (1, 2)]


def chunk_mutations(path, rng, count):
    """(label, file bytes, chunk): `count` variants of the file, each with 1
    to 4 bits flipped in one compressed chunk's stored bytes, the chunk's
    checksum updated in the index and the index resealed."""
    original = path.read_bytes()
    chunks = compressed_chunks(path)
    if not chunks:
        return
    offset, length = struct.unpack_from("<QQ", original, len(original) - 64)
    for _ in range(count):
        c = rng.choice(chunks)
        variant = bytearray(original)
        flipped = sorted(c.offset + rng.randrange(c.stored_size) for _ in range(rng.choice((1, 1, 2, 4))))
        for pos in flipped:
            variant[pos] ^= 1 << rng.randrange(8)
        # The Chunk struct (§6.3) is found by its first 32 bytes; its checksum is at +24.
        at = bytes(original[offset:offset + length]).find(
            struct.pack("<QQQQ", c.offset, c.stored_size, c.raw_size, c.checksum))
        struct.pack_into("<Q", variant, offset + at + 24,
                         spec.xxh3(variant[c.offset:c.offset + c.stored_size]))
        reseal(variant)
        yield f"{path.name} chunk @{c.offset} bytes {flipped}", bytes(variant), c
