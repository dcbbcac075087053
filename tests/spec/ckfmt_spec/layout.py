"""The format's block size, magic numbers and limits, and its checksum (§5.1)."""
import xxhash

BLOCK = 4096                                   # §1.2
HEADER_MAGIC = b"\x89CKF\r\n\x1a\n"            # §3.1
FOOTER_MAGIC = b"\x89CKFEND\n"                 # §3.2
U64_MAX = (1 << 64) - 1
MAX_CHUNK_RAW = 1 << 30                        # C1
T3_BUDGET = 1 << 26                            # §6.6 Coverage, §12


def xxh3(data):
    """XXH3-64, seed 0 (§5.1)."""
    return xxhash.xxh3_64_intdigest(bytes(data))


def align_up(n):
    return -(-n // BLOCK) * BLOCK
