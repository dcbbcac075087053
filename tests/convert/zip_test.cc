// The zip reader and writer: ZIP64, alignment, CRC checks on data.
#include <gtest/gtest.h>

#include <vector>

#include "convert_test_util.h"
#include "crc32.h"
#include "file_io.h"
#include "zip_reader.h"
#include "zip_writer.h"

namespace ckfmt::convert::testing {
namespace {

// zip's CRC-32: the standard check value, and running updates over any
// split equal one pass (the readers feed it piece by piece).
TEST(Zip, Crc32MatchesTheStandardAndUpdatesInPieces) {
  EXPECT_EQ(Crc32(0, "123456789", 9), 0xCBF43926u);
  EXPECT_EQ(Crc32(0, "", 0), 0u);
  std::vector<uint8_t> data((20 << 20) + 7);
  uint32_t x = 1;
  for (auto& b : data) b = uint8_t((x = x * 1664525u + 1013904223u) >> 24);
  const uint32_t whole = Crc32(0, data.data(), data.size());
  for (size_t cut : {size_t{1}, size_t{4095}, size_t{16} << 20, data.size() - 1}) {
    uint32_t c = Crc32(0, data.data(), cut);
    EXPECT_EQ(Crc32(c, data.data() + cut, data.size() - cut), whole) << "cut at " << cut;
  }
  data[12345] ^= 1;
  EXPECT_NE(Crc32(0, data.data(), data.size()), whole);
}

TEST(Zip, WriterReaderRoundTripAlignedAndZip64) {
  std::string dir = MakeTempDir("zip");
  for (bool z64 : {false, true}) {
    std::string p = dir + (z64 ? "/z64.zip" : "/z.zip");
    {
      auto out = OutputFile::Create(p);
      ASSERT_TRUE(out.ok());
      ZipWriter w(out->get());
      w.set_force_zip64(z64);
      ASSERT_TRUE(w.AddRecord("a/data.pkl", "hello").ok());
      ASSERT_TRUE(w.AddRecord("a/data/0", std::string(1000, 'x')).ok());
      ASSERT_TRUE(w.AddRecord("a/empty", "").ok());
      ASSERT_TRUE(w.Finish().ok());
      ASSERT_TRUE((*out)->Commit(false).ok());
    }
    auto f = InputFile::Open(p);
    ASSERT_TRUE(f.ok());
    auto z = ZipArchive::Open(*f);
    ASSERT_TRUE(z.ok()) << z.status().ToString();
    ASSERT_EQ((*z)->records().size(), 3u);
    const ZipRecord* r = (*z)->Find("a/data/0");
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(r->data_offset % 64, 0u);
    EXPECT_EQ(r->size, 1000u);
    auto all = (*z)->ReadAll(*r, 1 << 20);
    ASSERT_TRUE(all.ok());
    EXPECT_EQ(*all, std::string(1000, 'x'));
    EXPECT_EQ((*z)->ReadAll(*(*z)->Find("a/empty"), 10).value(), "");
  }
}

TEST(Zip, CorruptedStorageBytesFailTheCrc) {
  std::string dir = MakeTempDir("zipcrc");
  std::string z = ReadFile(Fixture("views.pt"));
  // Flip one byte inside the first storage record's data.
  auto f = InputFile::Open(Fixture("views.pt"));
  auto arch = ZipArchive::Open(*f);
  ASSERT_TRUE(arch.ok());
  const ZipRecord* r = (*arch)->Find("views/data/0");
  ASSERT_NE(r, nullptr);
  z[r->data_offset + 5] ^= 0x40;
  std::string p = dir + "/bad.pt";
  WriteFile(p, z);
  ConvertOptions o;
  o.src = p;
  o.dst = dir + "/out.ckfmt";
  o.fsync = false;
  auto res = convert::Run(o);
  ASSERT_FALSE(res.ok());
  EXPECT_NE(res.status().message().find("CRC-32"), std::string::npos) << res.status().ToString();
  EXPECT_NE(res.status().message().find("views/data/0"), std::string::npos);
  // Without the check the (wrong) data converts.
  o.verify_zip_crc = false;
  EXPECT_TRUE(convert::Run(o).ok());
}

TEST(Zip, NotAZip) {
  std::string dir = MakeTempDir("notzip");
  WriteFile(dir + "/x", "PK\x03\x04 but nothing else: no central directory, no end record");
  auto f = InputFile::Open(dir + "/x");
  ASSERT_TRUE(f.ok());
  auto z = ZipArchive::Open(*f);
  ASSERT_FALSE(z.ok());
  EXPECT_NE(z.status().message().find("end-of-central-directory"), std::string::npos)
      << z.status().ToString();
}

TEST(InputFile, RegionInMemoryReadsLikeTheFile) {
  std::string dir = MakeTempDir("region");
  std::string bytes;
  for (int i = 0; i < 1000; ++i) bytes += char('a' + i % 26);
  WriteFile(dir + "/f", bytes);
  auto f = InputFile::Open(dir + "/f");
  ASSERT_TRUE(f.ok());
  auto r = InputFile::WithRegionInMemory(*f, 100, 200, "item");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  WriteFile(dir + "/f", std::string(1000, 'z'));  // same size: the region is what was read
  auto read = [&](uint64_t off, uint64_t n) {
    std::string out(n, '\0');
    Status s = (*r)->ReadAt(off, out.data(), n, "test");
    return s.ok() ? out : "error: " + s.ToString();
  };
  EXPECT_EQ(read(100, 200), bytes.substr(100, 200));  // all from memory
  EXPECT_EQ(read(150, 10), bytes.substr(150, 10));
  EXPECT_EQ(read(300, 0), "");
  EXPECT_EQ(read(0, 10), std::string(10, 'z'));       // outside: the file
  EXPECT_EQ(read(290, 20), std::string(20, 'z'));     // across the end: the file
  EXPECT_NE(read(995, 10).find("truncated"), std::string::npos);
  // Beyond the file: refused before reading, as the file itself would.
  EXPECT_FALSE(InputFile::WithRegionInMemory(*f, 900, 200, "item").ok());
}

}  // namespace
}  // namespace ckfmt::convert::testing
