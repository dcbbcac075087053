"""What `ckfmt convert` writes, read back without torch or safetensors."""
import json
import pickletools
import struct
import zipfile
from pathlib import Path


def read_safetensors(path):
    """({name: (dtype, shape, bytes)}, __metadata__) of a .safetensors file."""
    data = Path(path).read_bytes()
    header_size = struct.unpack_from("<Q", data)[0]
    header = json.loads(data[8:8 + header_size])
    metadata = header.pop("__metadata__", {})
    base = 8 + header_size
    return {name: (h["dtype"], h["shape"], data[base + h["data_offsets"][0]:base + h["data_offsets"][1]])
            for name, h in header.items()}, metadata


def read_torch_blobs(path):
    """The bytes blobs of a torch.save zip: `ckfmt convert` writes each as
    _codecs.encode(str, 'latin1'), which pickletools reads without running
    anything. Returns them sorted."""
    with zipfile.ZipFile(path) as z:
        ops = [(op.name, arg) for op, arg, _ in pickletools.genops(
            z.read(next(n for n in z.namelist() if n.endswith("/data.pkl"))))]
    return sorted(ops[i + 1][1].encode("latin1") for i, (name, arg) in enumerate(ops[:-1])
                  if name == "GLOBAL" and arg == "_codecs encode" and isinstance(ops[i + 1][1], str))
