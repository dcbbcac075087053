"""`python3 tests/spec/ckfmt_spec FILE` (or `python3 -m ckfmt_spec FILE` from
tests/spec): print a file's version, metadata and state dict."""
import pprint
import sys
from pathlib import Path

sys.dont_write_bytecode = True      # leave no __pycache__ in the source tree
if __package__:
    from . import CheckpointFile
else:   # run as a directory: import the package from tests/spec, not its modules bare
    sys.path[0] = str(Path(__file__).resolve().parent.parent)
    from ckfmt_spec import CheckpointFile

with CheckpointFile(sys.argv[1]) as ck:
    print(f"ckfmt {ck.version}, world size {ck.index.world_size}, metadata {ck.metadata}")
    pprint.pprint(ck.load(allow_partial=True))
