// What sits under a file, where it changes how reads should be issued.
#pragma once

#include <sys/types.h>

#include <string>

namespace ckfmt {

// Whether `dev` (a file's st_dev) is a virtio disk, a partition of one, or
// a device-mapper / md device built directly on one, as sysfs under
// `sysfs_root` describes it. False where sysfs says nothing: no sysfs, or
// a file system whose st_dev names no block device (btrfs and overlayfs
// give anonymous ones), so files there are read as on any other disk.
//
// Why it matters: an O_DIRECT read hands the disk one segment per
// physically contiguous run of the destination's pages, and a virtio
// disk's host may serve each segment on its own (see
// ReadOptions::host_reads).
bool IsVirtioDisk(dev_t dev, const std::string& sysfs_root = "/sys");

}  // namespace ckfmt
