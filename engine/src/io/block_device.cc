#include "io/block_device.h"

#include <sys/sysmacros.h>

#include <filesystem>
#include <system_error>

namespace ckfmt {
namespace {

namespace fs = std::filesystem;

// sysfs places a disk and its partitions under the device that drives it:
// .../virtio1/block/vda[/vda1].
bool UnderVirtio(const fs::path& p) {
  std::error_code ec;
  const fs::path real = fs::canonical(p, ec);
  if (ec) return false;
  for (const fs::path& part : real) {
    if (part.native().rfind("virtio", 0) == 0) return true;
  }
  return false;
}

}  // namespace

bool IsVirtioDisk(dev_t dev, const std::string& sysfs_root) {
  const fs::path node = fs::path(sysfs_root) / "dev" / "block" /
                        (std::to_string(major(dev)) + ":" + std::to_string(minor(dev)));
  if (UnderVirtio(node)) return true;
  // dm and md devices list what they are made of under slaves/.
  std::error_code ec;
  for (fs::directory_iterator it(node / "slaves", ec), end; !ec && it != end; it.increment(ec)) {
    if (UnderVirtio(it->path())) return true;
  }
  return false;
}

}  // namespace ckfmt
