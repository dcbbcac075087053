#include "io/buffer_cache.h"

#include <cstdlib>
#include <mutex>
#include <utility>
#include <vector>

#include "ckfmt/io_options.h"

namespace ckfmt {
namespace {

struct Cache {
  std::mutex mu;
  std::vector<std::pair<uint8_t*, size_t>> kept;  // newest last
  size_t bytes = 0;
};

Cache& TheCache() {
  static Cache* c = new Cache;  // never destroyed: buffers may be freed during exit
  return *c;
}

}  // namespace

uint8_t* TakeCachedBuffer(size_t size) {
  Cache& c = TheCache();
  std::lock_guard<std::mutex> lock(c.mu);
  for (size_t i = c.kept.size(); i-- > 0;) {
    if (c.kept[i].second != size) continue;
    uint8_t* p = c.kept[i].first;
    c.kept.erase(c.kept.begin() + i);
    c.bytes -= size;
    return p;
  }
  return nullptr;
}

void GiveCachedBuffer(uint8_t* p, size_t size) {
  Cache& c = TheCache();
  std::vector<uint8_t*> drop;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    if (size > kBufferCacheBytes) {
      drop.push_back(p);
    } else {
      // The oldest go first: the newest match the options in use now.
      while (c.bytes + size > kBufferCacheBytes) {
        drop.push_back(c.kept.front().first);
        c.bytes -= c.kept.front().second;
        c.kept.erase(c.kept.begin());
      }
      c.kept.emplace_back(p, size);
      c.bytes += size;
    }
  }
  for (uint8_t* q : drop) std::free(q);
}

void ReleaseStagingCache() {
  Cache& c = TheCache();
  std::vector<std::pair<uint8_t*, size_t>> drop;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    drop.swap(c.kept);
    c.bytes = 0;
  }
  for (auto& [p, size] : drop) std::free(p);
}

}  // namespace ckfmt
