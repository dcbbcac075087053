/* A thin C ABI over the engine, for bindings (Python via ctypes, others).
 *
 * Tensors are passed as flat descriptors: a key path in the textual form of
 * spec/FORMAT.md Appendix C ("model/layers/[0]/weight"), a dtype id (the
 * on-disk ids, spec/FORMAT.md §4), a shape and a pointer to contiguous
 * row-major host memory that the caller owns (or, through the _device_
 * functions below, memory of a CUDA device).
 *
 * Every function returns 0 on success, else a ckfmt StatusCode value, and
 * then writes a NUL-terminated message into err (at most err_cap bytes; err
 * may be NULL). No C++ exception leaves these functions. A NULL path, a
 * NULL tensors with n > 0, a NULL shape with ndim > 0, NULL data for a
 * tensor that has bytes, an unknown dtype id, a key given twice or a key
 * that earlier keys are under ("model" after "model/w") is refused with
 * kInvalidArgument (1), naming the tensor's index and key.
 */
#ifndef CKFMT_C_API_H_
#define CKFMT_C_API_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ckfmt_tensor {
  const char* key;
  uint8_t dtype;
  uint32_t ndim;
  const uint64_t* shape;
  void* data;
} ckfmt_tensor;

/* Saves the tensors (parents are created as dicts) to path atomically.
 * codec: "none", "zstd" or "byteplane-zstd"; NULL means "none". */
int ckfmt_save_tensors(const char* path, const ckfmt_tensor* tensors, size_t n,
                       const char* codec, char* err, size_t err_cap);

/* Loads path into the given tensors in place. Every tensor must exist in the
 * file with the same dtype and shape; file entries not named are ignored. */
int ckfmt_load_tensors(const char* path, const ckfmt_tensor* tensors, size_t n,
                       int verify_checksums, char* err, size_t err_cap);

/* As ckfmt_save_tensors and ckfmt_load_tensors, for tensors that may sit
 * in GPU memory: devices[i] is -1 where tensors[i].data is host memory and
 * k >= 0 where it is memory of CUDA device k (a device pointer); devices
 * NULL means every tensor is on the host. The caller's own stream work on
 * the tensors must be finished. GPU data go device -> pinned staging ->
 * disk and back, with no pageable copy. Without CUDA support in this build
 * or without the GPU, a GPU tensor is refused with kInvalidArgument, naming
 * it and saying why, as is a device below -1. */
int ckfmt_save_device_tensors(const char* path, const ckfmt_tensor* tensors,
                              size_t n, const int32_t* devices, const char* codec,
                              char* err, size_t err_cap);
int ckfmt_load_device_tensors(const char* path, const ckfmt_tensor* tensors,
                              size_t n, const int32_t* devices, int verify_checksums,
                              char* err, size_t err_cap);

/* Fully verifies a file (as `ckfmt verify`); returns 0 if valid. */
int ckfmt_verify(const char* path, char* err, size_t err_cap);

/* Verifies the index and every checksum without decoding compressed chunks
 * (as `ckfmt verify --checksums-only`): finds any byte changed since the
 * save, at the disk's speed whatever the codec, but not a chunk that a
 * faulty writer stored undecodable under a matching checksum. */
int ckfmt_verify_checksums(const char* path, char* err, size_t err_cap);

#ifdef __cplusplus
}
#endif

#endif /* CKFMT_C_API_H_ */
