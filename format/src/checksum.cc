#include "ckfmt/checksum.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace ckfmt {

uint64_t Checksum(const void* data, size_t size) { return XXH3_64bits(data, size); }

}  // namespace ckfmt
