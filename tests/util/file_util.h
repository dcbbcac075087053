// Small file helpers for tests: whole-file read/write, byte flips, truncation,
// FIFOs.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <future>
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

// Makes a FIFO at `path`, failing the test if it cannot.
void MakeFifo(const std::string& path);

// Runs `open` (a call given the path of the FIFO `fifo`, among others) and
// returns its result. If it has not returned within 10 s, as a plain read
// open of a FIFO waits for a writer, the test fails and a writer is opened
// to release it: a failure, not a hung test.
template <typename Open>
auto WithinSeconds(const std::string& fifo, Open open) {
  auto result = std::async(std::launch::async, open);
  if (result.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    ADD_FAILURE() << "opening " << fifo << " waited for a writer";
    const int writer = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    result.wait();
    if (writer >= 0) ::close(writer);
  }
  return result.get();
}

}  // namespace ckfmt_test
