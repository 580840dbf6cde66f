// SPDX-License-Identifier: BSD-3-Clause
// Helpers shared by the wire tests: a recording sink, a virtual clock, RoCEv2 datagram
// builders, a pcap reader and temporary directories.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <string>
#include <vector>

#include "wire/wire.h"

namespace rnicdv::sim::test {

inline constexpr uint32_t ipv4(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
  return uint32_t{a} << 24 | uint32_t{b} << 16 | uint32_t{c} << 8 | d;
}

// The same as an address.
inline constexpr IpAddress v4(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
  return IpAddress::v4(ipv4(a, b, c, d));
}

class VirtualClock final : public Clock {
 public:
  uint64_t now_ns() const override { return now_.load(std::memory_order_relaxed); }
  void advance(uint64_t ns) { now_.fetch_add(ns, std::memory_order_relaxed); }
  void set(uint64_t ns) { now_.store(ns, std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> now_{1'000'000'000};
};

struct Received {
  Endpoint src, dst;
  std::vector<uint8_t> bytes;
};

class RecordingSink final : public WireSink {
 public:
  void on_datagram(const Endpoint& src, const Endpoint& dst, const uint8_t* data,
                   size_t len) override {
    std::lock_guard lock(mutex_);
    received_.push_back(Received{src, dst, std::vector<uint8_t>(data, data + len)});
  }
  std::vector<Received> take() {
    std::lock_guard lock(mutex_);
    return std::move(received_);
  }
  size_t count() {
    std::lock_guard lock(mutex_);
    return received_.size();
  }

 private:
  std::mutex mutex_;
  std::vector<Received> received_;
};

inline void put16(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}
inline void put24(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v >> 16);
  put16(p + 1, v);
}
inline void put32(uint8_t* p, uint32_t v) {
  put16(p, v >> 16);
  put16(p + 2, v);
}
inline void put64(uint8_t* p, uint64_t v) {
  put32(p, static_cast<uint32_t>(v >> 32));
  put32(p + 4, static_cast<uint32_t>(v));
}
inline uint32_t get16(const uint8_t* p) {
  return uint32_t{p[0]} << 8 | p[1];
}
inline uint32_t get24(const uint8_t* p) {
  return uint32_t{p[0]} << 16 | get16(p + 1);
}
inline uint32_t get32(const uint8_t* p) {
  return get16(p) << 16 | get16(p + 2);
}

// IBA 9.2: BTH. Pad count is derived from the payload so the datagram ends 4-byte aligned.
inline std::vector<uint8_t> bth(uint8_t opcode, uint32_t dest_qp, uint32_t psn, size_t payload_len,
                                bool ack_req = false) {
  std::vector<uint8_t> b(12, 0);
  const uint8_t pad = static_cast<uint8_t>((4 - (payload_len & 3)) & 3);
  b[0] = opcode;
  b[1] = static_cast<uint8_t>(pad << 4);
  put16(&b[2], 0xFFFF);  // default P_Key
  put24(&b[5], dest_qp);
  b[8] = ack_req ? 0x80 : 0;
  put24(&b[9], psn);
  return b;
}

// A complete datagram: BTH, extension headers, payload, pad.
inline std::vector<uint8_t> datagram(uint8_t opcode, uint32_t dest_qp, uint32_t psn,
                                     const std::vector<uint8_t>& ext,
                                     const std::vector<uint8_t>& payload) {
  std::vector<uint8_t> d = bth(opcode, dest_qp, psn, payload.size(), true);
  d.insert(d.end(), ext.begin(), ext.end());
  d.insert(d.end(), payload.begin(), payload.end());
  d.resize(d.size() + ((4 - (payload.size() & 3)) & 3), 0);
  return d;
}

inline std::vector<uint8_t> reth(uint64_t va, uint32_t rkey, uint32_t dma_len) {
  std::vector<uint8_t> r(16);
  put64(&r[0], va);
  put32(&r[8], rkey);
  put32(&r[12], dma_len);
  return r;
}

inline std::vector<uint8_t> aeth(uint8_t syndrome, uint32_t msn) {
  std::vector<uint8_t> a(4);
  a[0] = syndrome;
  put24(&a[1], msn);
  return a;
}

// A payload-only datagram tagged with (stream, index) in the first payload bytes, for order
// and identity checks.
inline std::vector<uint8_t> tagged_datagram(uint32_t stream, uint32_t index, size_t payload = 64) {
  std::vector<uint8_t> p(payload < 8 ? 8 : payload);
  put32(&p[0], stream);
  put32(&p[4], index);
  for (size_t i = 8; i < p.size(); ++i) p[i] = static_cast<uint8_t>(i * 7 + index);
  return datagram(0x04, 0x11, index & 0xFFFFFF, {}, p);
}
inline uint32_t tag_stream(const std::vector<uint8_t>& d) {
  return get32(&d[12]);
}
inline uint32_t tag_index(const std::vector<uint8_t>& d) {
  return get32(&d[16]);
}

struct PcapRecord {
  uint64_t ts_ns;
  std::vector<uint8_t> bytes;
};

struct PcapFile {
  uint32_t magic = 0, linktype = 0, snaplen = 0;
  uint16_t version_major = 0, version_minor = 0;
  std::vector<PcapRecord> records;
  bool truncated = false;
};

// Reads a host-order nanosecond or microsecond pcap.
inline PcapFile read_pcap(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<uint8_t> all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  PcapFile f;
  if (all.size() < 24) {
    f.truncated = true;
    return f;
  }
  auto u32 = [&](size_t off) {
    uint32_t v;
    std::memcpy(&v, &all[off], 4);
    return v;
  };
  auto u16 = [&](size_t off) {
    uint16_t v;
    std::memcpy(&v, &all[off], 2);
    return v;
  };
  f.magic = u32(0);
  f.version_major = u16(4);
  f.version_minor = u16(6);
  f.snaplen = u32(16);
  f.linktype = u32(20);
  const uint64_t frac_ns = f.magic == 0xA1B23C4Du ? 1 : 1000;
  size_t off = 24;
  while (off < all.size()) {
    if (all.size() - off < 16) {
      f.truncated = true;
      break;
    }
    const uint32_t incl = u32(off + 8);
    if (all.size() - off - 16 < incl) {
      f.truncated = true;
      break;
    }
    PcapRecord r;
    r.ts_ns = uint64_t{u32(off)} * 1'000'000'000u + uint64_t{u32(off + 4)} * frac_ns;
    r.bytes.assign(all.begin() + static_cast<long>(off + 16),
                   all.begin() + static_cast<long>(off + 16 + incl));
    f.records.push_back(std::move(r));
    off += 16 + incl;
  }
  return f;
}

// For the zlib ICRC oracles: the UDP header of a datagram src -> dst, `udp_len` bytes long,
// with its checksum masked to all ones (IBA A17.3.3), appended to `buf`.
inline void append_masked_udp_header(std::vector<uint8_t>& buf, const Endpoint& src,
                                     const Endpoint& dst, size_t udp_len) {
  const uint8_t udp[8] = {uint8_t(src.port >> 8), uint8_t(src.port), uint8_t(dst.port >> 8),
                          uint8_t(dst.port),      uint8_t(udp_len >> 8), uint8_t(udp_len),
                          0xFF,                   0xFF};
  buf.insert(buf.end(), udp, udp + 8);
}

// Polls `local` until `sink` holds `want` datagrams or ~10 s passed (loopback delivery is
// immediate; the bound only guards against a hang on a loaded machine). Then polls a little
// longer, so that a datagram delivered twice would be seen.
inline void poll_until(Wire& wire, const Endpoint& local, RecordingSink& sink, size_t want) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (sink.count() < want && std::chrono::steady_clock::now() < deadline) {
    if (wire.poll(local, 64) == 0 && wire.wait_fd(local) >= 0) {
      pollfd p{wire.wait_fd(local), POLLIN, 0};
      ::poll(&p, 1, 10);
    }
  }
  for (int i = 0; i < 5; ++i) {
    wire.poll(local, 64);
    if (wire.wait_fd(local) >= 0) {
      pollfd p{wire.wait_fd(local), POLLIN, 0};
      ::poll(&p, 1, 2);
    }
  }
}

// A fresh directory under $TMPDIR (or /tmp), removed with its contents on destruction.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/rnicdv-wire-XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (::mkdtemp(buf.data()) != nullptr) path_ = buf.data();
  }
  ~TempDir() {
    if (!path_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(path_, ec);
    }
  }
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// A UDP port that is free on 127.0.0.2 .. 127.0.0.9 right now, so tests running in parallel
// (and a system that uses 4791) do not collide. Falls back to a pid-derived port.
inline uint16_t free_udp_port() {
  for (int attempt = 0; attempt < 64; ++attempt) {
    const int probe = ::socket(AF_INET, SOCK_DGRAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(ipv4(127, 0, 0, 2));
    socklen_t len = sizeof(sa);
    if (probe < 0) break;
    uint16_t port = 0;
    if (::bind(probe, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0 &&
        ::getsockname(probe, reinterpret_cast<sockaddr*>(&sa), &len) == 0)
      port = ntohs(sa.sin_port);
    ::close(probe);
    if (port == 0) continue;
    bool all_free = true;
    for (uint8_t host = 3; host <= 9 && all_free; ++host) {
      const int s = ::socket(AF_INET, SOCK_DGRAM, 0);
      sockaddr_in other{};
      other.sin_family = AF_INET;
      other.sin_addr.s_addr = htonl(ipv4(127, 0, 0, host));
      other.sin_port = htons(port);
      all_free = ::bind(s, reinterpret_cast<sockaddr*>(&other), sizeof(other)) == 0;
      ::close(s);
    }
    if (all_free) return port;
  }
  return static_cast<uint16_t>(20000 + ::getpid() % 20000);
}

}  // namespace rnicdv::sim::test
