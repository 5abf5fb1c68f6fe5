// The RocksDB peer's emulated pmem latency (cargo feature `rocksdb`; see `slow_pmem.rs`).
//
// `tierkv bench --pmem-latency R,P` slows the engines' pmem pools: R nanoseconds more for
// every 64-byte line read and P more for every persist (DESIGN §4, `media::pmem::latency`).
// The peer's "pmem" is a directory of files on the same tmpfs, which RocksDB reads and
// syncs through its `FileSystem`. This file wraps that `FileSystem` so the files under the
// pmem directory pay the same: R per line of every read (positioned, multi, asynchronous
// and sequential reads, counted over the 64-byte lines the bytes returned span) and P per
// `Sync`/`Fsync`/`RangeSync` of a file written there (RocksDB syncs the WAL once per synced
// write, as an engine persists its log once per put). Files elsewhere (the manifest in the
// data directory, tables on the flash path) are not slowed.
//
// RocksDB learns the wrapped `Env` through its options string (`env=<id>`), which looks
// the id up in its object registry; `tierkv_slow_pmem_env` registers one `Env` per distinct
// (directory, latency) and returns its number. The `Env`s live as long as the process
// (RocksDB's registry hands out such "static" objects without owning them); a bench opens
// a handful.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "rocksdb/env.h"
#include "rocksdb/file_system.h"
#include "rocksdb/utilities/object_registry.h"

namespace {

using ROCKSDB_NAMESPACE::Env;
using ROCKSDB_NAMESPACE::FileOptions;
using ROCKSDB_NAMESPACE::FileSystem;
using ROCKSDB_NAMESPACE::FileSystemWrapper;
using ROCKSDB_NAMESPACE::FSRandomAccessFile;
using ROCKSDB_NAMESPACE::FSRandomAccessFileOwnerWrapper;
using ROCKSDB_NAMESPACE::FSReadRequest;
using ROCKSDB_NAMESPACE::FSSequentialFile;
using ROCKSDB_NAMESPACE::FSSequentialFileOwnerWrapper;
using ROCKSDB_NAMESPACE::FSWritableFile;
using ROCKSDB_NAMESPACE::FSWritableFileOwnerWrapper;
using ROCKSDB_NAMESPACE::IODebugContext;
using ROCKSDB_NAMESPACE::IOHandleDeleter;
using ROCKSDB_NAMESPACE::IOOptions;
using ROCKSDB_NAMESPACE::IOStatus;
using ROCKSDB_NAMESPACE::ObjectLibrary;
using ROCKSDB_NAMESPACE::Slice;

constexpr uint64_t kLine = 64;

// What one `Env`'s files were charged, for the peer's counters.
struct Charged {
  std::atomic<uint64_t> lines{0};
  std::atomic<uint64_t> syncs{0};
};

struct Latency {
  uint32_t read_ns_per_line;
  uint32_t persist_ns;
  Charged* charged;  // lives as long as the process, as the `Env` does
};

// Busy-waits `ns` nanoseconds, as the pools' emulator does (a sleep would give the core
// away, which real media does not).
void Delay(uint64_t ns) {
  if (ns == 0) {
    return;
  }
  const auto until =
      std::chrono::steady_clock::now() + std::chrono::nanoseconds(ns);
  while (std::chrono::steady_clock::now() < until) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
}

// The 64-byte lines that `len` bytes at `offset` span.
uint64_t Lines(uint64_t offset, uint64_t len) {
  if (len == 0) {
    return 0;
  }
  return (offset + len + kLine - 1) / kLine - offset / kLine;
}

void ChargeRead(const Latency& l, uint64_t offset, uint64_t len) {
  const uint64_t lines = Lines(offset, len);
  l.charged->lines.fetch_add(lines, std::memory_order_relaxed);
  Delay(lines * l.read_ns_per_line);
}

void ChargeSync(const Latency& l) {
  l.charged->syncs.fetch_add(1, std::memory_order_relaxed);
  Delay(l.persist_ns);
}

class SlowRandomAccessFile : public FSRandomAccessFileOwnerWrapper {
 public:
  SlowRandomAccessFile(std::unique_ptr<FSRandomAccessFile>&& t, Latency l)
      : FSRandomAccessFileOwnerWrapper(std::move(t)), latency_(l) {}

  IOStatus Read(uint64_t offset, size_t n, const IOOptions& options,
                Slice* result, char* scratch,
                IODebugContext* dbg) const override {
    IOStatus s = target()->Read(offset, n, options, result, scratch, dbg);
    if (s.ok()) {
      ChargeRead(latency_, offset, result->size());
    }
    return s;
  }

  IOStatus MultiRead(FSReadRequest* reqs, size_t num_reqs,
                     const IOOptions& options, IODebugContext* dbg) override {
    IOStatus s = target()->MultiRead(reqs, num_reqs, options, dbg);
    if (s.ok()) {
      for (size_t i = 0; i < num_reqs; i++) {
        if (reqs[i].status.ok()) {
          ChargeRead(latency_, reqs[i].offset, reqs[i].result.size());
        }
      }
    }
    return s;
  }

  // Asynchronous reads complete synchronously through `Read` (the interface's own
  // default), so they pay the same.
  IOStatus ReadAsync(FSReadRequest& req, const IOOptions& opts,
                     std::function<void(FSReadRequest&, void*)> cb,
                     void* cb_arg, void** io_handle, IOHandleDeleter* del_fn,
                     IODebugContext* dbg) override {
    return FSRandomAccessFile::ReadAsync(req, opts, std::move(cb), cb_arg,
                                         io_handle, del_fn, dbg);
  }

  bool SubmitReadAsync(FSReadRequest& req, const IOOptions& opts,
                       std::function<void(FSReadRequest&)> cb,
                       IODebugContext* dbg) override {
    return FSRandomAccessFile::SubmitReadAsync(req, opts, std::move(cb), dbg);
  }

 private:
  Latency latency_;
};

class SlowSequentialFile : public FSSequentialFileOwnerWrapper {
 public:
  SlowSequentialFile(std::unique_ptr<FSSequentialFile>&& t, Latency l)
      : FSSequentialFileOwnerWrapper(std::move(t)), latency_(l) {}

  IOStatus Read(size_t n, const IOOptions& options, Slice* result,
                char* scratch, IODebugContext* dbg) override {
    IOStatus s = target()->Read(n, options, result, scratch, dbg);
    if (s.ok()) {
      ChargeRead(latency_, position_, result->size());
      position_ += result->size();
    }
    return s;
  }

  IOStatus Skip(uint64_t n) override {
    IOStatus s = target()->Skip(n);
    if (s.ok()) {
      position_ += n;
    }
    return s;
  }

  IOStatus PositionedRead(uint64_t offset, size_t n, const IOOptions& options,
                          Slice* result, char* scratch,
                          IODebugContext* dbg) override {
    IOStatus s =
        target()->PositionedRead(offset, n, options, result, scratch, dbg);
    if (s.ok()) {
      ChargeRead(latency_, offset, result->size());
    }
    return s;
  }

 private:
  Latency latency_;
  uint64_t position_ = 0;
};

class SlowWritableFile : public FSWritableFileOwnerWrapper {
 public:
  SlowWritableFile(std::unique_ptr<FSWritableFile>&& t, Latency l)
      : FSWritableFileOwnerWrapper(std::move(t)), latency_(l) {}

  IOStatus Sync(const IOOptions& options, IODebugContext* dbg) override {
    IOStatus s = target()->Sync(options, dbg);
    ChargeSync(latency_);
    return s;
  }

  IOStatus Fsync(const IOOptions& options, IODebugContext* dbg) override {
    IOStatus s = target()->Fsync(options, dbg);
    ChargeSync(latency_);
    return s;
  }

  IOStatus RangeSync(uint64_t offset, uint64_t nbytes,
                     const IOOptions& options, IODebugContext* dbg) override {
    IOStatus s = target()->RangeSync(offset, nbytes, options, dbg);
    ChargeSync(latency_);
    return s;
  }

 private:
  Latency latency_;
};

// Wraps the files under `dir`; every other call goes to the default file system.
class SlowPmemFileSystem : public FileSystemWrapper {
 public:
  SlowPmemFileSystem(std::string dir, Latency l)
      : FileSystemWrapper(FileSystem::Default()),
        dir_(std::move(dir)),
        latency_(l) {}

  static const char* kClassName() { return "TierkvSlowPmemFileSystem"; }
  const char* Name() const override { return kClassName(); }

  IOStatus NewSequentialFile(const std::string& f, const FileOptions& o,
                             std::unique_ptr<FSSequentialFile>* r,
                             IODebugContext* dbg) override {
    IOStatus s = target()->NewSequentialFile(f, o, r, dbg);
    if (s.ok() && Slowed(f)) {
      r->reset(new SlowSequentialFile(std::move(*r), latency_));
    }
    return s;
  }

  IOStatus NewRandomAccessFile(const std::string& f, const FileOptions& o,
                               std::unique_ptr<FSRandomAccessFile>* r,
                               IODebugContext* dbg) override {
    IOStatus s = target()->NewRandomAccessFile(f, o, r, dbg);
    if (s.ok() && Slowed(f)) {
      r->reset(new SlowRandomAccessFile(std::move(*r), latency_));
    }
    return s;
  }

  IOStatus NewWritableFile(const std::string& f, const FileOptions& o,
                           std::unique_ptr<FSWritableFile>* r,
                           IODebugContext* dbg) override {
    return Wrap(f, target()->NewWritableFile(f, o, r, dbg), r);
  }

  IOStatus ReopenWritableFile(const std::string& f, const FileOptions& o,
                              std::unique_ptr<FSWritableFile>* r,
                              IODebugContext* dbg) override {
    return Wrap(f, target()->ReopenWritableFile(f, o, r, dbg), r);
  }

  IOStatus ReuseWritableFile(const std::string& f, const std::string& old,
                             const FileOptions& o,
                             std::unique_ptr<FSWritableFile>* r,
                             IODebugContext* dbg) override {
    return Wrap(f, target()->ReuseWritableFile(f, old, o, r, dbg), r);
  }

 private:
  // Whether `f` lies under the pmem directory.
  bool Slowed(const std::string& f) const {
    return f.size() > dir_.size() && f.compare(0, dir_.size(), dir_) == 0 &&
           (dir_.back() == '/' || f[dir_.size()] == '/');
  }

  IOStatus Wrap(const std::string& f, IOStatus s,
                std::unique_ptr<FSWritableFile>* r) const {
    if (s.ok() && Slowed(f)) {
      r->reset(new SlowWritableFile(std::move(*r), latency_));
    }
    return s;
  }

  std::string dir_;
  Latency latency_;
};

struct Registered {
  std::string dir;
  Latency latency;
  Env* env;
};

std::mutex registry_mutex;
std::vector<Registered> registered;

}  // namespace

// Registers (once per distinct `dir` and latency) an `Env` whose files under `dir` pay the
// latency, and returns its number `n`: the options string `env=tierkv-slow-pmem-<n>` selects
// it. Returns -1 if `dir` is null or empty.
extern "C" int tierkv_slow_pmem_env(const char* dir, uint32_t read_ns_per_line,
                                    uint32_t persist_ns) {
  if (dir == nullptr || dir[0] == '\0') {
    return -1;
  }
  std::string d(dir);
  std::lock_guard<std::mutex> lock(registry_mutex);
  for (size_t i = 0; i < registered.size(); i++) {
    const Registered& r = registered[i];
    if (r.dir == d && r.latency.read_ns_per_line == read_ns_per_line &&
        r.latency.persist_ns == persist_ns) {
      return static_cast<int>(i);
    }
  }
  Latency l{read_ns_per_line, persist_ns, new Charged()};
  std::shared_ptr<FileSystem> fs = std::make_shared<SlowPmemFileSystem>(d, l);
  Env* env = ROCKSDB_NAMESPACE::NewCompositeEnv(fs).release();
  int n = static_cast<int>(registered.size());
  registered.push_back(Registered{d, l, env});
  ObjectLibrary::Default()->AddFactory<Env>(
      "tierkv-slow-pmem-" + std::to_string(n),
      [env](const std::string& /*uri*/, std::unique_ptr<Env>* /*guard*/,
            std::string* /*errmsg*/) { return env; });
  return n;
}

// The 64-byte lines read and the syncs that `Env` number `n` charged so far; false if
// there is no such `Env`.
extern "C" bool tierkv_slow_pmem_charged(int n, uint64_t* lines,
                                         uint64_t* syncs) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  if (n < 0 || static_cast<size_t>(n) >= registered.size()) {
    return false;
  }
  const Charged* c = registered[n].latency.charged;
  *lines = c->lines.load(std::memory_order_relaxed);
  *syncs = c->syncs.load(std::memory_order_relaxed);
  return true;
}
