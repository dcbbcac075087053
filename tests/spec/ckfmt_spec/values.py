"""Python values of entries: tensors, blobs and strings."""
import numpy as np

from .index_model import DTYPES


# --- values -----------------------------------------------------------------------

class Tensor:
    def __init__(self, dtype, shape, data):
        self.dtype, self.shape, self.data = dtype, tuple(shape), data

    def numpy(self):
        np_type = DTYPES[self.dtype].numpy
        if np_type is None:
            raise TypeError(f"numpy has no {DTYPES[self.dtype].name}")
        return np.frombuffer(self.data, dtype=np_type).reshape(self.shape)

    def __repr__(self):
        return f"{type(self).__name__}({DTYPES[self.dtype].name}, {list(self.shape)})"


class PartialTensor(Tensor):
    """A partial entry's stored elements; .covered marks them (row-major,
    one bool per element). Uncovered elements are zero in .data."""

    def __init__(self, dtype, shape, data, covered):
        super().__init__(dtype, shape, data)
        self.covered = covered


class BytesBlob(bytes):
    """A Bytes entry's blob with its content_type."""

    def __new__(cls, data, content_type):
        blob = super().__new__(cls, data)
        blob.content_type = content_type
        return blob


def text(b):
    """Strings are bytes in the file (W5 is a writer rule): keep invalid UTF-8 distinct."""
    return b.decode("utf-8", errors="surrogateescape")
