"""Chunk codecs: zstd frames (§5.3) and byte planes (§5.3.1)."""
import struct

import numpy as np
import zstandard

from .refusals import Corrupt, require


# --- zstd frames (§5.3) and byte planes (§5.3.1) --------------------------------

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
ZSTD_MAX_WINDOW = 1 << 27


def zstd_frame(b, rule):
    """(frame size, Window_Size, Dictionary_ID) of the frame starting b (RFC 8878 §3.1.1)."""
    require(len(b) >= 5 and b[:4] == ZSTD_MAGIC, rule, "not a regular zstd frame")
    descriptor = b[4]
    fcs_flag, single_segment = descriptor >> 6, descriptor >> 5 & 1
    has_checksum, did_flag = descriptor >> 2 & 1, descriptor & 3
    require(descriptor >> 3 & 1 == 0, rule, "zstd reserved bit set")
    pos = 5
    window = None
    if not single_segment:
        require(len(b) > pos, rule, "truncated zstd frame header")
        exponent, mantissa = b[pos] >> 3, b[pos] & 7
        window = (1 << (10 + exponent)) + (1 << (10 + exponent)) // 8 * mantissa
        pos += 1
    did_size = (0, 1, 2, 4)[did_flag]
    fcs_size = (single_segment, 2, 4, 8)[fcs_flag]
    require(len(b) >= pos + did_size + fcs_size, rule, "truncated zstd frame header")
    dictionary_id = int.from_bytes(b[pos:pos + did_size], "little")
    pos += did_size
    if single_segment:                 # Window_Size is Frame_Content_Size
        window = int.from_bytes(b[pos:pos + fcs_size], "little") + (256 if fcs_size == 2 else 0)
    pos += fcs_size
    while True:                        # blocks (§3.1.1.2)
        require(len(b) >= pos + 3, rule, "zstd frame ends early")
        header = int.from_bytes(b[pos:pos + 3], "little")
        block_type, block_size = header >> 1 & 3, header >> 3
        require(block_type != 3, rule, "reserved zstd block type")
        pos += 3 + (1 if block_type == 1 else block_size)
        require(pos <= len(b), rule, "zstd frame ends early")
        if header & 1:
            break
    pos += 4 * has_checksum
    require(pos <= len(b), rule, "zstd frame ends early")
    return pos, window, dictionary_id


def decode_zstd(b, raw_size, rule):
    """One regular frame, under every rule of §5.3, decoding to exactly raw_size bytes."""
    size, window, dictionary_id = zstd_frame(b, rule)
    require(window <= ZSTD_MAX_WINDOW, rule, f"zstd window of {window} bytes")
    require(dictionary_id == 0, rule, "zstd frame names a dictionary")
    require(size == len(b), rule, "bytes follow the zstd frame")
    try:
        reader = zstandard.ZstdDecompressor(max_window_size=ZSTD_MAX_WINDOW).stream_reader(
            bytes(b), read_across_frames=False)
        out = bytearray()
        while len(out) <= raw_size:     # never more than raw_size + 1 bytes (D4)
            part = reader.read(raw_size + 1 - len(out))
            if not part:
                break
            out += part
    except zstandard.ZstdError as ex:
        raise Corrupt(rule, f"zstd: {ex}") from None
    require(len(out) == raw_size, rule, f"zstd frame decodes to {len(out)} bytes, not {raw_size}")
    return bytes(out)


def decode_byteplanes(b, raw_size):
    """Codec 2: D5 layout checks, then D6 scatters the planes back."""
    require(len(b) >= 2, "D5", "byte-plane chunk too short")
    width = b[0]
    require(1 <= width <= 16 and b[1] == 0 and raw_size % width == 0, "D5",
            "bad byte-plane header")
    require(len(b) >= 2 + 5 * width, "D5", "byte-plane directory outside the chunk")
    n, pos = raw_size // width, 2 + 5 * width
    raw = np.empty((n, width), dtype=np.uint8)
    for p in range(width):
        mode, length = b[2 + 5 * p], struct.unpack_from("<I", b, 3 + 5 * p)[0]
        require(mode in (0, 1) and length <= len(b) - pos, "D5", f"plane {p}: bad descriptor")
        payload = b[pos:pos + length]
        pos += length
        if mode == 0:
            require(length == n, "D5", f"raw plane {p} holds {length} bytes, not {n}")
        else:
            payload = decode_zstd(payload, n, "D5")
        raw[:, p] = np.frombuffer(payload, dtype=np.uint8)
    require(pos == len(b), "D5", "bytes follow the last plane")
    return raw.tobytes()
