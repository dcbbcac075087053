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

/* ---- Whole training states: every kind of value, and what the caller lacks.
 *
 * A ckfmt_entry describes one value of a state dict at a key path. Its kind
 * is one of spec/FORMAT.md's entry kinds (CKFMT_KIND_*), and only the
 * fields of that kind are read:
 *   TENSOR   dtype, shape (ndim, shape), data, device (-1: host memory,
 *            k >= 0: memory of CUDA device k)
 *   INT      int_value;  BOOL  int_value (0 false, else true)
 *   FLOAT    float_value
 *   STRING   bytes, size (UTF-8, no terminator needed)
 *   BYTES    bytes, size, content_type (e.g. "pickle", "json"; NULL: "")
 *   NONE, DICT, LIST  nothing: DICT and LIST are empty containers that
 *            later entries may fill.
 * A TENSOR with global_ndim > 0 is a shard: part of a global tensor of
 * shape global_shape[0, global_ndim). With offsets, the box starting there
 * whose lengths are the tensor's shape (ndim == global_ndim); with offsets
 * NULL, the global tensor's elements [flat_start, flat_start + the tensor's
 * element count) in row-major order (a flat parameter's range, as FSDP
 * keeps them). A load fills a shard with its part of the file's tensor,
 * however the file was sharded; a save of a lone shard stores a partial
 * entry. global_ndim 0: the whole tensor (the other three fields unread).
 * Parents that no entry names are created as the key path says: a dict
 * for a key component, a list for an index component ("[0]"), whose
 * elements must then come in order. A container must come before the
 * entries under it; a key given twice, or one that earlier entries are
 * under, is refused (kInvalidArgument), naming the entry's index and key. */
#define CKFMT_KIND_TENSOR 1
#define CKFMT_KIND_BYTES 2
#define CKFMT_KIND_INT 3
#define CKFMT_KIND_FLOAT 4
#define CKFMT_KIND_BOOL 5
#define CKFMT_KIND_STRING 6
#define CKFMT_KIND_NONE 7
#define CKFMT_KIND_DICT 8
#define CKFMT_KIND_LIST 9

typedef struct ckfmt_entry {
  const char* key;
  uint8_t kind;
  uint8_t dtype;
  int32_t device;
  uint32_t ndim;
  const uint64_t* shape;
  void* data;
  int64_t int_value;
  double float_value;
  const void* bytes;
  uint64_t size;
  const char* content_type;
  uint32_t global_ndim;
  const uint64_t* global_shape;
  const uint64_t* offsets;
  uint64_t flat_start;
} ckfmt_entry;

/* User metadata: a string -> string map stored in the file's index. */
typedef struct ckfmt_metadata {
  const char* key;
  const char* value;
} ckfmt_metadata;

/* Saves the entries, and the metadata (n_metadata pairs, keys unique), to
 * path atomically: a failed save leaves what was at path as it was.
 * codec: as ckfmt_save_tensors. */
int ckfmt_save_entries(const char* path, const ckfmt_entry* entries, size_t n,
                       const ckfmt_metadata* metadata, size_t n_metadata,
                       const char* codec, char* err, size_t err_cap);

/* Asynchronous saves: the call returns once the entries are copied into
 * snapshot memory (GPU tensors device -> pinned host memory), and the file
 * is written on a thread of the saver's. A failed background save never
 * leaves a partial file at its path; its error is returned once, by the
 * next ckfmt_async_save_entries (which then starts nothing) or
 * ckfmt_async_wait. A saver is used by one thread at a time. */
typedef struct ckfmt_async_saver ckfmt_async_saver;

typedef struct ckfmt_async_options {
  int wait_if_busy;        /* nonzero: a save while one is writing waits for it;
                              0: it fails at once with kAborted */
  uint32_t copy_threads;   /* threads for the snapshot copy; 0: every core */
  uint64_t snapshot_bytes; /* most snapshot memory; 0: no limit. A larger state
                              has its leading entries written before the call
                              returns, from the caller's memory */
} ckfmt_async_options;

/* Makes a saver (options NULL: wait if busy, every core, no limit) into
 * *out; free it with ckfmt_async_saver_free. */
int ckfmt_async_saver_new(const ckfmt_async_options* options, ckfmt_async_saver** out,
                          char* err, size_t err_cap);
/* Waits for an in-flight save (its error, if any, is logged), then frees. */
void ckfmt_async_saver_free(ckfmt_async_saver* saver);
/* Snapshots the entries (as ckfmt_save_entries takes them) and starts
 * writing them to path; the caller may change its tensors once this
 * returns. A path naming a directory is refused at once. */
int ckfmt_async_save_entries(ckfmt_async_saver* saver, const char* path,
                             const ckfmt_entry* entries, size_t n,
                             const ckfmt_metadata* metadata, size_t n_metadata,
                             const char* codec, char* err, size_t err_cap);
/* Optional, at start-up: sets up (faults in, pins) the snapshot memory a
 * save of these entries will use, so that the first save is a copy only. */
int ckfmt_async_prepare_entries(ckfmt_async_saver* saver, const ckfmt_entry* entries,
                                size_t n, char* err, size_t err_cap);
/* Waits for the in-flight save and returns its result; with nothing in
 * flight, the last save's result, or an error if nothing was saved. */
int ckfmt_async_wait(ckfmt_async_saver* saver, char* err, size_t err_cap);
/* 1 while a save is writing, else 0. */
int ckfmt_async_busy(const ckfmt_async_saver* saver);
/* Seconds the last ckfmt_async_save_entries blocked its caller. */
double ckfmt_async_last_blocked_seconds(const ckfmt_async_saver* saver);

/* ---- Saves spread over the ranks of a job, through the caller's transport.
 *
 * A ckfmt_comm makes the collectives of a distributed save out of four
 * operations on host memory that the caller's transport provides (a
 * PyTorch process group, MPI, sockets). Each returns 0 on success, nonzero
 * on failure; ckfmt calls them from the thread that called
 * ckfmt_dist_save_entries, every rank the same operations in the same
 * order. ckfmt cannot bound how long one waits: the transport's own
 * timeout applies, and an operation that fails leaves the communicator
 * unusable (later calls fail at once, kAborted). */
typedef struct ckfmt_comm_ops {
  void* ctx;  /* passed to every operation */
  int rank;   /* this process's rank, in [0, size) */
  int size;   /* ranks in the job */
  /* recv receives size * bytes bytes: every rank's `bytes`, in rank order. */
  int (*all_gather)(void* ctx, const void* send, uint64_t bytes, void* recv);
  /* data's `bytes` bytes on rank root are copied into data on every rank. */
  int (*broadcast)(void* ctx, void* data, uint64_t bytes, int root);
  /* Point to point, matched by (peer, tag); a send may return once its
   * data is handed over or once it is received. Tags lie in [0, 32768). */
  int (*send)(void* ctx, const void* data, uint64_t bytes, int dst, int tag);
  int (*recv)(void* ctx, void* data, uint64_t bytes, int src, int tag);
} ckfmt_comm_ops;

typedef struct ckfmt_comm ckfmt_comm;

/* Makes a communicator of *ops (copied) into *out; free it with
 * ckfmt_comm_free. NULL operations and a rank outside [0, size) are
 * refused (kInvalidArgument). */
int ckfmt_comm_new(const ckfmt_comm_ops* ops, ckfmt_comm** out, char* err, size_t err_cap);
void ckfmt_comm_free(ckfmt_comm* comm);

#define CKFMT_DIST_FLATTENED 0 /* rank 0 gathers the data and writes the file */
#define CKFMT_DIST_PARALLEL 1  /* every rank writes its own part into it */

typedef struct ckfmt_dist_options {
  int mode;               /* CKFMT_DIST_*. FLATTENED sends GPU tensors
                             through pinned host memory (one bucket);
                             PARALLEL needs a file system every rank
                             shares */
  uint64_t memory_budget; /* FLATTENED: most gathered bytes rank 0 holds at
                             once; 0: 512 MiB */
  int check_contents;     /* nonzero: entries that several ranks hold whole
                             must agree on their contents too (XXH3), not
                             only on kind, dtype and shape */
} ckfmt_dist_options;

/* Collective: saves the union of every rank's entries to path (the same on
 * every rank), as one file. A shard entry (global_ndim > 0, see
 * ckfmt_entry) is this rank's part of a tensor; the ranks' parts must
 * cover it exactly once (identical parts, as replicated shards, are written
 * once). Other entries are replicated: written once, from the lowest rank
 * holding them. metadata and codec as ckfmt_save_entries; options NULL:
 * flattened, defaults. Every rank returns the same result: if one fails,
 * all do, naming the failing ranks, and nothing appears at path (what was
 * there stays). */
int ckfmt_dist_save_entries(ckfmt_comm* comm, const char* path, const ckfmt_entry* entries,
                            size_t n, const ckfmt_metadata* metadata, size_t n_metadata,
                            const char* codec, const ckfmt_dist_options* options, char* err,
                            size_t err_cap);

/* Memory for a tensor that the caller lacks: `entry` holds its key, dtype,
 * shape and the device it belongs on (ckfmt_load_options.reconstruct_device).
 * Returns memory on that device for the whole tensor, contiguous and
 * row-major, which the load fills and the caller owns; NULL fails the load
 * (kAborted), except for a tensor without elements, which needs no memory. Called on the thread that called ckfmt_load_entries, before
 * any data is read. */
typedef void* (*ckfmt_alloc_fn)(void* ctx, const ckfmt_entry* entry);
/* One value of the loaded state (see ckfmt_load_entries); pointers in
 * `entry` are valid during the call only, except tensor data from alloc.
 * A nonzero return stops the calls and fails the load (kAborted). */
typedef int (*ckfmt_entry_fn)(void* ctx, const ckfmt_entry* entry);
typedef int (*ckfmt_metadata_fn)(void* ctx, const char* key, const char* value);
/* This rank's part of a tensor the caller lacks, for a load that creates
 * it as a shard: `entry` holds the key and the global shape (ndim, shape).
 * Returns 0 for the whole tensor, or 1 with a box written to offsets and
 * lengths (ndim values each, inside the global shape); anything else fails
 * the load (kAborted) before any data is read. Called on the thread that
 * called ckfmt_load_entries, before alloc. */
typedef int (*ckfmt_layout_fn)(void* ctx, const ckfmt_entry* entry, uint64_t* offsets,
                               uint64_t* lengths);

#define CKFMT_UNEXPECTED_RECONSTRUCT 0 /* create what the caller lacks */
#define CKFMT_UNEXPECTED_IGNORE 1      /* leave it in the file */
#define CKFMT_UNEXPECTED_ERROR 2       /* refuse (kUnexpectedKeys), listing it all */
#define CKFMT_MISSING_ERROR 0          /* refuse (kMissingKeys), listing it all */
#define CKFMT_MISSING_IGNORE 1         /* leave the caller's entries as they are */

typedef struct ckfmt_load_options {
  int verify_checksums;       /* nonzero: check every chunk read */
  int unexpected;             /* CKFMT_UNEXPECTED_* */
  int missing;                /* CKFMT_MISSING_* */
  int32_t reconstruct_device; /* where created tensors go: -1 host, k CUDA device k */
  const char* const* prefixes; /* load only entries under these key paths; */
  size_t n_prefixes;           /* none: everything */
  ckfmt_alloc_fn alloc;        /* NULL: host memory of ckfmt's, valid during on_entry */
  void* alloc_ctx;
  ckfmt_entry_fn on_entry; /* may be NULL */
  void* entry_ctx;
  ckfmt_metadata_fn on_metadata; /* may be NULL */
  void* metadata_ctx;
  /* Non-NULL: a bytes entry of this content type that the load would hand
   * over (e.g. "pickle", which a binding should not unpickle unasked) fails
   * the load with kAborted, naming it, before any data is read. */
  const char* refuse_content_type;
  /* Non-NULL: tensors created for the caller are the shards it says
   * (alloc gets the box's lengths as the shape; on_entry gets the tensor
   * as a shard: global_ndim, global_shape, offsets). NULL: whole tensors. */
  ckfmt_layout_fn layout;
  void* layout_ctx;
} ckfmt_load_options;

/* Loads path into what the caller has, and hands over what it lacks.
 * `entries` are the caller's: tensors are filled in place (the file's dtype
 * and shape, else kMismatch); other kinds declare that the caller holds a
 * value of that kind there. Entries the file has and the caller lacks are
 * created (tensors in memory from alloc), ignored or refused, per
 * `unexpected`; the caller's entries the file lacks per `missing`.
 * options NULL: verify, reconstruct on the host, missing is an error.
 *
 * First on_metadata gets the file's metadata, pair by pair. Then, after all
 * data is read, on_entry gets, in pre-order (a container before what it
 * holds; in a dict, the keys the caller passed first, in its order, then
 * the created ones in the file's), every value loaded from the file that
 * is not a tensor the caller passed: created tensors, every scalar, string
 * and bytes value (the caller's included: theirs is the file's value), and
 * every container holding a loaded value. Setting each at its key path
 * rebuilds the loaded state around the caller's tensors.
 *
 * A refusal found before data is read (kinds, dtypes, shapes, policies,
 * memory) changes no tensor. A failure while reading may leave tensors
 * filled in place holding any mix of old and new bytes. */
int ckfmt_load_entries(const char* path, const ckfmt_entry* entries, size_t n,
                       const ckfmt_load_options* options, char* err, size_t err_cap);

/* What path holds, without reading its data: on_metadata gets the file's
 * metadata pair by pair (may be NULL), then on_entry every entry of its
 * index in the file's order (pre-order, a container before what it holds):
 * tensors with their dtype, (global) shape and size in bytes, data NULL;
 * ints, floats, bools and strings with their values; bytes with their size
 * and content type, bytes NULL; None and containers. The index is verified first, as
 * for a load. A nonzero return from a callback stops (kAborted). */
int ckfmt_list_entries(const char* path, ckfmt_entry_fn on_entry, void* entry_ctx,
                       ckfmt_metadata_fn on_metadata, void* metadata_ctx, char* err,
                       size_t err_cap);

/* What path holds, as the JSON document `ckfmt inspect --json` prints
 * (spec/INSPECT_JSON.md): format version, writer, world size and save mode,
 * metadata, every entry with its pieces (rank, region, chunks with codec,
 * sizes and checksum), partial flag and saved layout, and totals. The index
 * is verified first, as for a load; no data is read. "file" in it is path.
 * prefix: NULL for every entry, or a key path as keys are written
 * ("optim/state/[0]") for the entries at or below it. on_json gets the
 * document once: len bytes of UTF-8, valid during the call; a nonzero
 * return is kAborted. */
typedef int (*ckfmt_text_fn)(void* ctx, const char* text, size_t len);
int ckfmt_describe_json(const char* path, const char* prefix, ckfmt_text_fn on_json, void* ctx,
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
