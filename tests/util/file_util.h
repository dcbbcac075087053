// Small file helpers for tests: whole-file read/write, byte flips, truncation.
#pragma once

#include <cstdint>
#include <string>

namespace ckfmt_test {

std::string ReadFileBytes(const std::string& path);
void WriteFileBytes(const std::string& path, const std::string& bytes);
uint64_t FileSize(const std::string& path);
bool FileExists(const std::string& path);
// Sets the file's access and modification times to `seconds` ago.
void SetModifiedSecondsAgo(const std::string& path, int seconds);
// XORs the byte at `offset` with `mask` (in place, via pwrite).
void XorByte(const std::string& path, uint64_t offset, uint8_t mask = 0xff);
uint8_t ReadByte(const std::string& path, uint64_t offset);
void TruncateFile(const std::string& path, uint64_t size);
// Writes back and drops the file's cached pages, so that a load reads it
// from the disk (ckfmt reads a mostly cached file through the page cache).
void DropFileCache(const std::string& path);

}  // namespace ckfmt_test
