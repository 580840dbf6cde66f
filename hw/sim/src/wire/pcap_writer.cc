// SPDX-License-Identifier: BSD-3-Clause
#include "wire/pcap_writer.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace rnicdv::sim {
namespace {

// Host byte order throughout: readers detect it from the magic number.
struct PcapFileHeader {
  uint32_t magic;
  uint16_t version_major, version_minor;
  int32_t thiszone;
  uint32_t sigfigs;
  uint32_t snaplen;
  uint32_t linktype;
};
static_assert(sizeof(PcapFileHeader) == 24);

struct PcapRecordHeader {
  uint32_t ts_sec;
  uint32_t ts_nsec;
  uint32_t incl_len;
  uint32_t orig_len;
};
static_assert(sizeof(PcapRecordHeader) == 16);

// Writes all of iov[0..count) or fails; retries after EINTR and short writes.
bool write_fully(int fd, iovec* iov, int count) {
  while (count > 0) {
    const ssize_t n = ::writev(fd, iov, count);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    size_t done = static_cast<size_t>(n);
    while (count > 0 && done >= iov->iov_len) {
      done -= iov->iov_len;
      ++iov;
      --count;
    }
    if (count > 0) {
      iov->iov_base = static_cast<uint8_t*>(iov->iov_base) + done;
      iov->iov_len -= done;
    }
  }
  return true;
}

}  // namespace

std::string PcapWriter::expand_path(const std::string& path_template) {
  const std::string pid = std::to_string(::getpid());
  std::string path;
  path.reserve(path_template.size() + pid.size());
  for (size_t i = 0; i < path_template.size(); ++i) {
    if (path_template[i] == '%' && i + 1 < path_template.size() && path_template[i + 1] == 'p') {
      path += pid;
      ++i;
    } else {
      path += path_template[i];
    }
  }
  return path;
}

std::string PcapWriter::per_process_path(const std::string& path) {
  const std::string pid = std::to_string(::getpid());
  const size_t slash = path.rfind('/');
  const size_t dot = path.rfind('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash) ||
      dot == (slash == std::string::npos ? 0 : slash + 1))
    return path + "." + pid;
  return path.substr(0, dot) + "." + pid + path.substr(dot);
}

namespace {

// Opens `path` for writing and, for a regular file, takes an exclusive advisory lock on it,
// then empties it. The
// file is truncated only once the lock is held, so a process that finds it taken leaves the
// writer's file untouched. 0 (fd in *out), EWOULDBLOCK when another process holds the lock,
// or the errno of the failure.
int open_locked(const std::string& path, int* out) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return errno;
  struct stat st;
  if (::fstat(fd, &st) == 0 && !S_ISREG(st.st_mode)) {
    *out = fd;  // /dev/null, a FIFO: nothing to share or to empty
    return 0;
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd);
    return err == EWOULDBLOCK ? EWOULDBLOCK : err;
  }
  if (::ftruncate(fd, 0) != 0) {
    const int err = errno;
    ::close(fd);
    return err;
  }
  *out = fd;
  return 0;
}

}  // namespace

Result<std::unique_ptr<PcapWriter>> PcapWriter::open(const std::string& path_template) {
  if (path_template.empty()) return Status::error(Errc::invalid_argument, "pcap: open: empty path");
  std::string path = expand_path(path_template);
  int fd = -1;
  int err = open_locked(path, &fd);
  if (err == EWOULDBLOCK) {
    // Another live process captures into this path (two processes given one RNICDV_PCAP):
    // writing on would interleave two captures into one corrupt file.
    const std::string own = per_process_path(path);
    std::fprintf(stderr, "rnicdv: pcap %s is being written by another process; this one writes %s\n",
                 path.c_str(), own.c_str());
    path = own;
    err = open_locked(path, &fd);
  }
  if (err != 0) {
    return Status::error(err == EACCES || err == EPERM ? Errc::access_denied : Errc::io_error,
                         "pcap %s: open for writing: %s", path.c_str(), std::strerror(err));
  }
  PcapFileHeader header{};
  header.magic = kMagicNanoseconds;
  header.version_major = kVersionMajor;
  header.version_minor = kVersionMinor;
  header.snaplen = kSnapLen;
  header.linktype = kLinktypeEthernet;
  iovec iov{&header, sizeof(header)};
  if (!write_fully(fd, &iov, 1)) {
    err = errno;
    ::close(fd);
    return Status::error(Errc::io_error, "pcap %s: write file header: %s", path.c_str(),
                         std::strerror(err));
  }
  return std::unique_ptr<PcapWriter>(new PcapWriter(fd, std::move(path)));
}

PcapWriter::~PcapWriter() {
  ::close(fd_);
}

void PcapWriter::write(uint64_t timestamp_ns, const iovec* parts, int count) noexcept {
  if (count < 0 || count > kMaxParts) [[unlikely]] {
    write_errors_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  PcapRecordHeader record{};
  record.ts_sec = static_cast<uint32_t>(timestamp_ns / 1'000'000'000u);
  record.ts_nsec = static_cast<uint32_t>(timestamp_ns % 1'000'000'000u);
  size_t frame_len = 0;
  iovec iov[kMaxParts + 1];
  iov[0] = {&record, sizeof(record)};
  for (int i = 0; i < count; ++i) {
    iov[i + 1] = parts[i];
    frame_len += parts[i].iov_len;
  }
  record.incl_len = record.orig_len = static_cast<uint32_t>(frame_len);
  if (frame_len > kSnapLen) [[unlikely]] {
    write_errors_.fetch_add(1, std::memory_order_relaxed);
    return;
  }

  std::lock_guard lock(mutex_);
  if (failed_) return;
  if (!write_fully(fd_, iov, count + 1)) [[unlikely]] {
    // A partial record would corrupt everything after it; stop instead.
    failed_ = true;
    write_errors_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  records_written_.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace rnicdv::sim
