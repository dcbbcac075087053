// IsVirtioDisk against a made-up sysfs tree laid out as Linux lays it out.
#include "io/block_device.h"

#include <gtest/gtest.h>
#include <sys/sysmacros.h>

#include <filesystem>
#include <string>

#include "util/temp_dir.h"

namespace {

namespace fs = std::filesystem;
using ckfmt::IsVirtioDisk;

class BlockDeviceTest : public ::testing::Test {
 protected:
  // sysfs/devices/<device_path> as a directory, and sysfs/dev/block/M:m
  // linking to it, as the kernel does.
  void AddDevice(unsigned maj, unsigned min, const std::string& device_path) {
    const fs::path target = root / "devices" / device_path;
    fs::create_directories(target);
    fs::create_directories(root / "dev" / "block");
    fs::create_symlink(target, root / "dev" / "block" / Node(maj, min));
  }
  // `holder` (M:m) is built on `slave` (a path under devices/).
  void AddSlave(unsigned maj, unsigned min, const std::string& slave) {
    const fs::path dir = fs::canonical(root / "dev" / "block" / Node(maj, min)) / "slaves";
    fs::create_directories(dir);
    fs::create_symlink(root / "devices" / slave, dir / fs::path(slave).filename());
  }
  bool Virtio(unsigned maj, unsigned min) const {
    return IsVirtioDisk(makedev(maj, min), root.string());
  }
  static std::string Node(unsigned maj, unsigned min) {
    return std::to_string(maj) + ":" + std::to_string(min);
  }

  ckfmt_test::ScopedTempDir dir;
  fs::path root = fs::path(dir.path()) / "sys";
};

TEST_F(BlockDeviceTest, VirtioDiskAndItsPartitions) {
  AddDevice(254, 0, "pci0000:00/0000:00:02.0/virtio1/block/vda");
  AddDevice(254, 1, "pci0000:00/0000:00:02.0/virtio1/block/vda/vda1");
  EXPECT_TRUE(Virtio(254, 0));
  EXPECT_TRUE(Virtio(254, 1));
}

TEST_F(BlockDeviceTest, NvmeAndVirtualDevicesAreNot) {
  AddDevice(259, 0, "pci0000:00/0000:00:04.0/nvme/nvme0/nvme0n1");
  AddDevice(7, 0, "virtual/block/loop0");
  EXPECT_FALSE(Virtio(259, 0));
  EXPECT_FALSE(Virtio(7, 0));
}

TEST_F(BlockDeviceTest, DeviceMapperOnAVirtioPartitionIs) {
  AddDevice(254, 1, "pci0000:00/0000:00:02.0/virtio1/block/vda/vda1");
  AddDevice(259, 0, "pci0000:00/0000:00:04.0/nvme/nvme0/nvme0n1");
  AddDevice(253, 0, "virtual/block/dm-0");
  AddDevice(253, 1, "virtual/block/dm-1");
  AddSlave(253, 0, "pci0000:00/0000:00:02.0/virtio1/block/vda/vda1");
  AddSlave(253, 1, "pci0000:00/0000:00:04.0/nvme/nvme0/nvme0n1");
  EXPECT_TRUE(Virtio(253, 0));
  EXPECT_FALSE(Virtio(253, 1));
}

TEST_F(BlockDeviceTest, UnknownDeviceOrNoSysfsIsNot) {
  EXPECT_FALSE(Virtio(8, 0));
  EXPECT_FALSE(IsVirtioDisk(makedev(254, 0), dir.File("no-such-sysfs")));
}

}  // namespace
