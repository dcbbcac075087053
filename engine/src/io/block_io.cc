#include "io/block_io.h"

#include "ckfmt/log.h"

namespace ckfmt {

std::string_view IoBackendName(IoBackend b) {
  switch (b) {
    case IoBackend::kAuto: return "auto";
    case IoBackend::kUring: return "io_uring";
    case IoBackend::kPread: return "pread";
  }
  return "unknown";
}

namespace {
BlockIoWrapper& Wrapper() {
  static BlockIoWrapper wrap;
  return wrap;
}
}  // namespace

void SetBlockIoWrapper(BlockIoWrapper wrap) { Wrapper() = std::move(wrap); }

std::unique_ptr<BlockIo> BlockIo::Create(const File& file, const IoOptions& options,
                                         const std::vector<AlignedBuffer>& buffers,
                                         size_t depth) {
  std::unique_ptr<BlockIo> io;
  if (depth == 0) depth = buffers.size();
  if (options.backend != IoBackend::kPread) io = MakeUringIo(file, buffers, depth);
  if (!io) io = MakePreadIo(file, buffers);
  Log(LogLevel::kInfo, file.path() + ": I/O through " + io->name());
  if (Wrapper()) io = Wrapper()(file, std::move(io));
  return io;
}

}  // namespace ckfmt
