"""The element values spec/vectors/README.md describes, and the decoding of
elements (bfloat16 and float8 included) to compare them."""
import math

import numpy as np

import ckfmt_spec as spec


# --- values the vectors README describes -----------------------------------------

def element_values(tensor):
    """Element values, row-major; bfloat16 and float8 decoded here, by §4."""
    name = spec.DTYPES[tensor.dtype].name
    raw = np.frombuffer(tensor.data, dtype=np.uint8)
    if name == "bfloat16":          # §4: the upper 16 bits of a binary32
        return list((raw.view("<u2").astype(np.uint32) << 16).view("<f4").astype(float))
    if name == "float8_e4m3fn":
        return [minifloat(b, 4, 3, 7, ieee=False) for b in raw]
    if name == "float8_e5m2":
        return [minifloat(b, 5, 2, 15, ieee=True) for b in raw]
    return list(tensor.numpy().reshape(-1).tolist())


def minifloat(byte, exp_bits, man_bits, bias, ieee):
    """One OCP FP8 element (§4): E5M2 has IEEE infinities; E4M3FN only S.1111.111 NaN."""
    sign = -1.0 if byte >> (exp_bits + man_bits) else 1.0
    exp, man = byte >> man_bits & (1 << exp_bits) - 1, byte & (1 << man_bits) - 1
    top = (1 << exp_bits) - 1
    if ieee and exp == top:
        return sign * math.inf if man == 0 else math.nan
    if not ieee and exp == top and man == (1 << man_bits) - 1:
        return math.nan
    if exp == 0:
        return sign * man * 2.0 ** (1 - bias - man_bits)
    return sign * (1 + man / (1 << man_bits)) * 2.0 ** (exp - bias)


def same_value(x, y):
    """Integers exactly (uint64 does not fit a double); floats bit for bit but any NaN."""
    if isinstance(x, int) and isinstance(y, int):
        return x == y
    x, y = complex(x), complex(y)
    return all((math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
               for a, b in ((x.real, y.real), (x.imag, y.imag)))


inf, nan = math.inf, math.nan
# dtypes.ckfmt, dtypes/NAME: [2, 3] tensors (vectors/README.md), row-major.
DTYPES_VALUES = {
    "float64": [0, 1, -2, 0.5, 1e300, -1e-300],
    "float32": [0, 1, -2, 0.5, 3.4028234663852886e38, inf],
    "float16": [0, 1, -2, 0.5, 65504, inf],
    "bfloat16": [0, 1, -2, 0.5, 3.140625, inf],
    "float8_e4m3fn": [0, 1, -2, 0.5, 448, nan],
    "float8_e5m2": [0, 1, -2, 0.5, 57344, inf],
    "int64": [0, 1, -1, -2**63, 2**63 - 1, 42],
    "int32": [0, 1, -1, -2**31, 2**31 - 1, 42],
    "int16": [0, 1, -1, -2**15, 2**15 - 1, 42],
    "int8": [0, 1, -1, -2**7, 2**7 - 1, 42],
    "uint8": [0, 1, 2, 2**8 - 2, 2**8 - 1, 42],
    "uint16": [0, 1, 2, 2**16 - 2, 2**16 - 1, 42],
    "uint32": [0, 1, 2, 2**32 - 2, 2**32 - 1, 42],
    "uint64": [0, 1, 2, 2**64 - 2, 2**64 - 1, 42],
    "bool": [0, 1, 1, 0, 1, 0],
    "complex64": [0, 1, 1j, -1 - 1j, 0.5 + 2j, complex(inf, -inf)],
    "complex128": [0, 1, 1j, -1 - 1j, 0.5 + 2j, complex(1e300, -1e-300)],
}
SHAPES_VALUES = {"scalar_0d": ("float32", [], [1.5]), "zero_size": ("float32", [0], []),
                 "zero_size_2d": ("int64", [3, 0], []), "rank5": ("uint8", [1, 2, 1, 3, 1], [1, 2, 3, 4, 5, 6])}
# sharded.ckfmt: each value is a function of the element's flat index g.
SHARDED_VALUES = {
    "model/w": ("float32", [8, 6], lambda g: g),
    "model/flat": ("bfloat16", [5, 7], lambda g: g - 17),
    "model/uneven": ("int32", [5, 3], lambda g: -g),
    "model/assembled": ("float32", [4, 4], lambda g: g / 4),
    "optim/state/[0]/exp_avg": ("float32", [10], lambda g: g + 0.5),
}
SHARDED_COVERED = {"optim/state/[0]/exp_avg": [0, 1, 2, 6, 7, 8, 9]}


def expected_tensors(name):
    """{key path: (dtype, shape, row-major values)} the README gives for vector `name`."""
    expected = {}
    if name == "dtypes":
        expected = {f"dtypes/{k}": (k, [2, 3], v) for k, v in DTYPES_VALUES.items()}
        expected.update({f"shapes/{k}": v for k, v in SHAPES_VALUES.items()})
    elif name == "sharded":
        expected = {k: (t, s, [f(g) for g in range(math.prod(s))]) for k, (t, s, f) in SHARDED_VALUES.items()}
    return expected
