// SPDX-License-Identifier: BSD-3-Clause
#include "endpoint.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>

#include "rnicdv/sim/dpdk.h"
#include "rnicdv/sim/sim.h"

namespace rnicperf {

using rnicdv::Errc;
using rnicdv::Result;
using rnicdv::Status;
namespace hw = rnicdv::hw;

namespace {

constexpr size_t kPage = 4096;

hw::Mtu mtu_code(uint32_t bytes) {
  switch (bytes) {
    case 256:
      return hw::Mtu::mtu256;
    case 512:
      return hw::Mtu::mtu512;
    case 2048:
      return hw::Mtu::mtu2048;
    case 4096:
      return hw::Mtu::mtu4096;
    default:
      return hw::Mtu::mtu1024;
  }
}

// perftest's latency-test inline defaults (220 for WRITE, 236 for SEND); 0 for bandwidth.
uint32_t default_inline(const Options& o) {
  if (o.test.kind == Kind::bandwidth) return 0;
  if (o.test.verb == Verb::write) return 220;
  if (o.test.verb == Verb::send) return o.ud ? 188 : 236;  // perftest DEF_INLINE_SEND_UD / _RC
  return 0;
}

uint32_t random_psn() {
  // Per thread: a --loopback run's two ends create their QPs at once.
  thread_local std::mt19937 gen{std::random_device{}()};
  return gen() & 0xffffff;
}

// --mmap: the file the buffers are mapped from, open while they are.
class BufferFile {
 public:
  BufferFile() = default;
  BufferFile(const BufferFile&) = delete;
  BufferFile& operator=(const BufferFile&) = delete;
  ~BufferFile() {
    if (fd_ >= 0) ::close(fd_);
  }

  // Opens `path` read-write (perftest's init_mmap) and checks that a regular file holds
  // `regions` regions of `stride` bytes from `offset` (a device file is taken as it is).
  Status open(const std::string& path, uint64_t offset, uint32_t regions, size_t stride) {
    path_ = path;
    fd_ = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd_ < 0)
      return Status::error(Errc::invalid_argument, "--mmap '%s': Unable to open: %s",
                           path.c_str(), std::strerror(errno));
    struct stat st{};
    if (::fstat(fd_, &st) != 0)
      return Status::error(Errc::io_error, "--mmap '%s': cannot stat: %s", path.c_str(),
                           std::strerror(errno));
    const uint64_t needed = offset + uint64_t{regions} * stride;
    if (S_ISREG(st.st_mode) && static_cast<uint64_t>(st.st_size) < needed)
      return Status::error(Errc::invalid_argument,
                           "--mmap '%s': %lld bytes, too small for %u QP buffers of %zu bytes "
                           "from offset %llu (needs %llu bytes)",
                           path.c_str(), static_cast<long long>(st.st_size), regions, stride,
                           static_cast<unsigned long long>(offset),
                           static_cast<unsigned long long>(needed));
    return Status::ok();
  }

  // `bytes` of the file from `at`, shared (perftest maps it MAP_SHARED).
  Result<uint8_t*> map(uint64_t at, size_t bytes) const {
    void* mem = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd_,
                       static_cast<off_t>(at));
    if (mem == MAP_FAILED)
      return Status::error(Errc::no_resources, "--mmap '%s': Unable to mmap %zu bytes at %llu: %s",
                           path_.c_str(), bytes, static_cast<unsigned long long>(at),
                           std::strerror(errno));
    return static_cast<uint8_t*>(mem);
  }

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace

namespace {

// The device: on the run's own fabric when it has one (--wire, --loopback), else by name.
Result<rnicdv::Device> open_device(const EndpointConfig& config) {
  if (!config.fabric) return rnicdv::Device::open(config.device_name);
  rnicdv::sim::DeviceConfig device;
  if (config.sim_ports != 0) device.ports = config.sim_ports;
  return rnicdv::sim::open_device(config.device_name, config.fabric, &device)
      .and_then(&rnicdv::Device::wrap);
}

}  // namespace

int TestEndpoint::poll_cq(rnicdv::CompletionQueue& cq, rnicdv::Completion* wc, int max) {
  if (!channel_) return cq.poll(wc, max);
  // -e: as perftest's ctx_notify_events before each poll, sleep until one of the endpoint's
  // CQs raises its event, acknowledge it, arm that CQ again, then poll. Both CQs are armed when
  // created, and an arm that finds completions already written fires at once, so no
  // completion waits for a later one. The wait lasts at most kEventSliceMs, so the caller's
  // stall guard still runs.
  Result<rnicdv::CqEvent> ev = channel_->wait_event(kEventSliceMs);
  if (ev) {
    rnicdv::CompletionQueue& fired = ev->context == 0 ? *send_cq_ : *recv_cq_;
    fired.ack_events(1);
    ++events_taken_;
    if (fired.request_notify() != Errc::ok) return -1;
  }
  return cq.poll(wc, max);
}

Result<std::unique_ptr<TestEndpoint>> TestEndpoint::open(const EndpointConfig& config) {
  std::unique_ptr<TestEndpoint> ep(new TestEndpoint);
  RNICDV_ASSIGN_OR_RETURN(ep->dev_, open_device(config));
  ep->dpdk_memory_ = config.dpdk_memory;
  return ep;
}

TestEndpoint::~TestEndpoint() {
  // QPs and MRs go before the memory they describe; an XRC SRQ and domain after their QPs.
  qps_.clear();
  xrc_srq_.reset();
  xrcd_.reset();
  for (auto& r : regions_) {
    r.mr.reset();
    if (r.base && r.dpdk_heap) rnicdv::sim::dpdk_free(r.base);
    else if (r.base) ::munmap(r.base, r.bytes);
  }
}

bool TestEndpoint::is_sim() const {
  return dev_->info().kind == "sim";
}

uint32_t TestEndpoint::mtu_bytes(const Options& o) const {
  const auto& caps = dev_->info().caps;
  uint32_t active = hw::mtu_bytes(caps.active_mtu);
  if (o.mtu == 0) return active;
  return std::min(o.mtu, hw::mtu_bytes(caps.max_mtu));
}

Status TestEndpoint::open_xrc(uint32_t srq_depth, rnicdv::CompletionQueue& srq_cq) {
  Result<rnicdv::XrcDomain> domain = dev_->open_xrc_domain();
  if (!domain) return domain.status().prepend("-c XRC: opening the XRC domain");
  xrcd_.emplace(std::move(domain.value()));
  // perftest's ctx_xrc_srq_create: one SRQ of single-SGE receives.
  Result<rnicdv::SharedReceiveQueue> srq = dev_->create_xrc_srq(*xrcd_, *pd_, srq_cq, srq_depth, 1);
  if (!srq) return srq.status().prepend("-c XRC: creating the XRC SRQ");
  xrc_srq_.emplace(std::move(srq.value()));
  return Status::ok();
}

Result<rnicdv::QueuePair> TestEndpoint::create_xrc_qp(size_t i, const rnicdv::QpConfig& config) {
  if (i < initiators_) {
    rnicdv::QpConfig initiator = config;
    initiator.type = hw::QpType::xrc_send;  // no receive queue: recv_cq is ignored
    Result<rnicdv::QueuePair> qp = dev_->create_qp(*pd_, *send_cq_, *recv_cq_, initiator);
    if (!qp) return qp.status().prepend("-c XRC: creating initiator QP " + std::to_string(i));
    return qp;
  }
  Result<rnicdv::QueuePair> qp = dev_->create_xrc_target(*xrcd_);
  if (!qp) return qp.status().prepend("-c XRC: creating target QP " + std::to_string(i));
  return qp;
}

Status TestEndpoint::create(const Options& o, uint64_t max_size, bool receives,
                            uint32_t extra_recvs, bool posts_operations) {
  const auto& info = dev_->info();
  const auto& caps = info.caps;
  qp_timeout_ = o.qp_timeout;
  ud_ = o.ud;
  uc_ = o.uc;
  xrc_ = o.xrc;
  // perftest doubles num_of_qps for XRC in latency tests and with -b: the first half
  // XRC_SEND, the second XRC_RECV. A one-way bandwidth test's posting side has initiators
  // only, the other side targets only.
  xrc_pairs_ = xrc_ && (o.test.kind == Kind::latency || o.bidirectional);
  const uint32_t nqps = xrc_pairs_ ? 2 * o.num_qps : o.num_qps;
  initiators_ = !xrc_ ? nqps : (xrc_pairs_ || posts_operations) ? o.num_qps : 0;
  lanes_ = initiators_;
  recv_queues_ = xrc_ ? 1 : nqps;
  sl_ = o.sl;
  traffic_class_ = o.resolved_traffic_class();
  hop_limit_ = o.resolved_hop_limit();
  retry_count_ = o.retry_count;
  flow_labels_ = o.flow_labels;
  dual_port_ = o.dual_port;
  first_port_ = o.ib_port;
  RNICDV_TRY(check_gids(o));

  if (o.inline_size >= 0) {
    if (caps.max_inline_data && static_cast<uint32_t>(o.inline_size) > caps.max_inline_data)
      return Status::error(Errc::invalid_argument, "-I %d: above %s's maximum inline data %u",
                           o.inline_size, info.name.c_str(), caps.max_inline_data);
    inline_size_ = static_cast<uint32_t>(o.inline_size);
  } else {
    inline_size_ = std::min(default_inline(o), caps.max_inline_data);
  }
  if (caps.max_msg_size && max_size > caps.max_msg_size)
    return Status::error(Errc::invalid_argument, "message size %llu above %s's maximum %u",
                         static_cast<unsigned long long>(max_size), info.name.c_str(),
                         caps.max_msg_size);
  out_reads_ = std::min<uint32_t>(16, std::max<uint32_t>(1, caps.max_qp_init_rd_atom));

  RNICDV_ASSIGN_OR_RETURN(pd_, dev_->alloc_pd());

  const uint32_t sq_depth = std::max<uint32_t>(o.tx_depth, o.early_post * 2) + 1;
  // perftest: the receive queue holds rx-depth receives, or fewer when fewer will come.
  rx_depth_ = 0;
  if (receives)
    rx_depth_ = o.duration_s ? o.rx_depth
                             : static_cast<uint32_t>(std::min<uint64_t>(o.rx_depth, o.iterations));
  const uint32_t rq_depth = std::max<uint32_t>(rx_depth_, 1) + extra_recvs;
  if (caps.max_qp_wr && (sq_depth > caps.max_qp_wr || rq_depth > caps.max_qp_wr))
    return Status::error(Errc::invalid_argument, "queue depth %u above %s's maximum %u",
                         std::max(sq_depth, rq_depth), info.name.c_str(), caps.max_qp_wr);

  if (o.use_event) {
    RNICDV_ASSIGN_OR_RETURN(channel_, dev_->create_completion_channel());
  }
  // With -e both CQs raise their events on one channel, named by context 0 (send), 1 (recv).
  RNICDV_ASSIGN_OR_RETURN(send_cq_, channel_ ? dev_->create_cq(sq_depth * o.num_qps, *channel_, 0)
                                             : dev_->create_cq(sq_depth * o.num_qps));
  RNICDV_ASSIGN_OR_RETURN(recv_cq_, channel_ ? dev_->create_cq(rq_depth * o.num_qps, *channel_, 1)
                                             : dev_->create_cq(rq_depth * o.num_qps));
  if (channel_) {
    for (rnicdv::CompletionQueue* cq : {&*send_cq_, &*recv_cq_})
      if (Errc e = cq->request_notify(); e != Errc::ok)
        return Status::error(e, "-e: cannot arm a completion queue for its first event");
  }
  // -c XRC: the SRQ holds what the receive queue would; as perftest's, its receives complete
  // on the receive CQ in SEND tests and on the send CQ otherwise (where none are posted).
  if (xrc_) RNICDV_TRY(open_xrc(rq_depth, o.test.verb == Verb::send ? *recv_cq_ : *send_cq_));

  // UD: a receive holds the 40-byte GRH before the message.
  const uint64_t recv_bytes = max_size + (ud_ ? kUdGrhBytes : 0);
  half_ = std::max<size_t>(kPage, (recv_bytes + kPage - 1) & ~(kPage - 1));
  // --mmap: QP i's region at --mmap-offset + i * stride of the file, in whole pages.
  BufferFile file;
  const size_t page = static_cast<size_t>(std::max(::sysconf(_SC_PAGESIZE), 1L));
  const size_t stride = (2 * half_ + page - 1) / page * page;
  if (!o.mmap_file.empty()) {
    RNICDV_TRY(file.open(o.mmap_file, o.mmap_offset, nqps, stride));
    mmap_file_ = o.mmap_file;
    mmap_offset_ = o.mmap_offset;
  }
  const uint32_t access = hw::access::local_write | hw::access::remote_write |
                          hw::access::remote_read | hw::access::remote_atomic;
  // -O (perftest's ctx_modify_qp_to_init and set_up_connection): the first half of the QPs on
  // -i's port, the second half on port 2; with XRC pairs the first half of the initiators and
  // of the targets, so that each QP meets a peer QP on the same port.
  const size_t port_group = xrc_pairs_ ? nqps / 2 : nqps;
  qp_ports_.clear();
  second_port_targets_.clear();
  for (uint32_t i = 0; i < nqps; ++i)
    qp_ports_.push_back(static_cast<uint8_t>(
        dual_port_ && i % port_group >= port_group / 2 ? kSecondPort : o.ib_port));
  for (uint32_t i = 0; i < nqps; ++i) {
    rnicdv::QpConfig config;
    config.caps.max_send_wr = sq_depth;
    config.caps.max_recv_wr = rq_depth;
    config.caps.max_send_sge = 1;
    config.caps.max_recv_sge = 1;
    config.caps.max_inline_data = inline_size_;
    // One thread posts, polls and moves the QP: no locks on the fast path.
    config.threading = rnicdv::Threading::single;
    config.early_post = rnicdv::EarlyPost::automatic;
    config.type = ud_ ? hw::QpType::ud : uc_ ? hw::QpType::uc : hw::QpType::rc;
    RNICDV_ASSIGN_OR_RETURN(
        rnicdv::QueuePair qp,
        xrc_ ? create_xrc_qp(i, config) : dev_->create_qp(*pd_, *send_cq_, *recv_cq_, config));
    qps_.push_back(std::move(qp));
    hw::QpAttr init;
    init.state = hw::QpState::init;
    // UC is written to and sent to, never read from (perftest gives it remote write only).
    init.access_flags = uc_ ? hw::access::remote_write
                            : hw::access::remote_write | hw::access::remote_read |
                                  hw::access::remote_atomic;
    init.pkey_index = o.pkey_index;
    init.port_num = qp_ports_[i];
    init.qkey = kUdQkey;
    // A UD QP takes a Q_Key where an RC one takes its remote access (IBA 10.3.1).
    const uint32_t init_mask =
        hw::qp_attr::state | hw::qp_attr::port |
        (ud_ ? hw::qp_attr::qkey : hw::qp_attr::access_flags);
    if (Status s = qps_.back().modify(init, init_mask); !s)
      return o.pkey_index ? s.prepend("--pkey_index") : s;
    if (xrc_ && i >= initiators_ && on_second_port(i))
      second_port_targets_.push_back(qps_.back().qpn());
    init_attr_ = init;
    init_mask_ = init_mask;
    // HW and PP rate limiters: the device paces the QP from the start (an XRC target sends
    // nothing but responses: only initiators are paced).
    if (const uint32_t kbps = o.device_rate_kbps(); kbps != 0 && i < initiators_) {
      const bool pp = o.rate_limit_type == Options::RateLimitType::pp;
      RNICDV_TRY(qps_.back()
                     .set_rate_limit(kbps, pp ? o.burst_size : 0,
                                     static_cast<uint16_t>(pp ? o.typical_pkt_size : 0))
                     .prepend("--rate_limit"));
    }

    Region r;
    r.bytes = 2 * half_;
    if (!o.mmap_file.empty()) {
      r.bytes = stride;
      RNICDV_ASSIGN_OR_RETURN(r.base, file.map(o.mmap_offset + uint64_t{i} * stride, r.bytes));
      // perftest's line for each buffer it maps.
      char line[96];
      std::snprintf(line, sizeof line, "allocated mmap buffer of size %zu at %p\n", r.bytes,
                    static_cast<void*>(r.base));
      mmap_notes_ += line;
    } else if (dpdk_memory_) {
      auto mem = rnicdv::sim::dpdk_alloc(r.bytes, kPage);
      if (!mem) return mem.status().prepend("--dpdk-mem");
      r.base = static_cast<uint8_t*>(mem.value());
      r.dpdk_heap = true;
    } else if (o.use_hugepages) {
      constexpr size_t kHuge = size_t{2} << 20;
      r.bytes = (r.bytes + kHuge - 1) / kHuge * kHuge;
      void* mem = ::mmap(nullptr, r.bytes, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | (21 << MAP_HUGE_SHIFT), -1, 0);
      if (mem == MAP_FAILED)
        return Status::error(Errc::no_resources,
                             "--use_hugepages: cannot map %zu bytes of 2 MiB huge pages: %s "
                             "(reserve some: sysctl vm.nr_hugepages=N)",
                             r.bytes, std::strerror(errno));
      r.base = static_cast<uint8_t*>(mem);
      hugepages_ = true;
    } else {
      void* mem =
          ::mmap(nullptr, r.bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (mem == MAP_FAILED)
        return Status::error(Errc::no_resources, "cannot allocate %zu bytes of buffers", r.bytes);
      r.base = static_cast<uint8_t*>(mem);
    }
    auto mr = pd_->reg_mr(r.base, r.bytes, access);
    if (!mr) {
      if (r.dpdk_heap)
        rnicdv::sim::dpdk_free(r.base);
      else
        ::munmap(r.base, r.bytes);
      return mr.status();
    }
    r.mr.emplace(std::move(mr.value()));
    r.psn = random_psn();
    regions_.push_back(std::move(r));
  }

  recvs_posted_.assign(recv_queues_, 0);
  recvs_done_.assign(recv_queues_, 0);
  if (receives) {
    recv_size_ = std::max<uint64_t>(recv_bytes, 1);
    // --recv_post_list: every receive queue's list of receives, built once (options.cc keeps
    // the list within the RX depth).
    recv_list_ = std::clamp<uint32_t>(o.recv_post_list, 1, std::max<uint32_t>(rx_depth_, 1));
    recv_sges_.clear();
    recv_wrs_.clear();
    recv_sges_.reserve(recv_queues_ * recv_list_);
    recv_wrs_.reserve(recv_queues_ * recv_list_);
    for (size_t r = 0; r < recv_queues_; ++r)
      for (uint32_t k = 0; k < recv_list_; ++k)
        recv_sges_.push_back(
            regions_[recv_region(r)].mr->sge(half_, static_cast<uint32_t>(recv_size_)));
    for (size_t r = 0; r < recv_queues_; ++r)
      for (uint32_t k = 0; k < recv_list_; ++k) {
        rnicdv::RecvWr wr;
        wr.wr_id = r;
        wr.sg_list = &recv_sges_[r * recv_list_ + k];
        wr.num_sge = 1;
        recv_wrs_.push_back(wr);
      }
    RNICDV_TRY(refill_receives());
    // Early-posted sends' extra receives, beyond the RX depth.
    for (size_t r = 0; r < recv_queues_; ++r)
      for (uint32_t k = 0; k < extra_recvs; ++k)
        if (Errc e = post_recv(r); e != Errc::ok) return recv_queue_error(r, e);
  }
  return Status::ok();
}

rnicdv::Errc TestEndpoint::post_recv(size_t r) noexcept {
  rnicdv::Sge sge = regions_[recv_region(r)].mr->sge(half_, static_cast<uint32_t>(recv_size_));
  rnicdv::RecvWr wr;
  wr.wr_id = r;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  const Errc e = xrc_ ? xrc_srq_->post_recv(wr) : qps_[r].post_recv(wr);
  ++recv_post_calls_;
  if (e == Errc::ok) ++recvs_posted_[r];
  return e;
}

rnicdv::Errc TestEndpoint::post_recv_list(size_t r) noexcept {
  size_t bad = recv_list_;
  const std::span<const rnicdv::RecvWr> list(&recv_wrs_[r * recv_list_], recv_list_);
  const Errc e = xrc_ ? xrc_srq_->post_recv(list, &bad) : qps_[r].post_recv(list, &bad);
  ++recv_post_calls_;
  // The WRs before the bad one were posted (libibverbs' bad_wr rule).
  recvs_posted_[r] += e == Errc::ok ? recv_list_ : std::min<size_t>(bad, recv_list_);
  return e;
}

Status TestEndpoint::recv_queue_error(size_t r, Errc e) const {
  if (xrc_)
    return Status::error(e, "post receive on XRC SRQ %#x: %s", xrc_srq_->srqn(),
                         rnicdv::errc_name(e));
  return Status::error(e, "post receive on QP %#x: %s", qps_[r].qpn(), rnicdv::errc_name(e));
}

Status TestEndpoint::refill_receives() {
  if (recv_size_ == 0) return Status::ok();
  const uint32_t target = receives_at_start();
  for (size_t r = 0; r < recv_queues_; ++r) {
    while (recvs_posted_[r] - recvs_done_[r] + recv_list_ <= target) {
      if (Errc e = post_recv_list(r); e != Errc::ok) return recv_queue_error(r, e);
    }
  }
  return Status::ok();
}

Status TestEndpoint::restart_after_reject(size_t i, std::chrono::milliseconds timeout) {
  // The receive CQ's completions are all QP i's only when it is the one QP (as with -R).
  if (qps_.size() != 1)
    return Status::error(Errc::invalid_argument,
                         "restarting QP %#x after a REJ: %zu QPs share its completion queue",
                         qps_[i].qpn(), qps_.size());
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  uint64_t flushed = recvs_posted_[i] - recvs_done_[i];
  const uint32_t qpn = qps_[i].qpn();
  rnicdv::Completion wc[16];
  while (flushed > 0) {
    const int n = recv_cq_->poll(wc, 16);
    for (int k = 0; k < n; ++k)
      if (wc[k].qp_num == qpn && flushed > 0) --flushed;
    if (n > 0) continue;
    if (std::chrono::steady_clock::now() >= deadline)
      return Status::error(Errc::timeout,
                           "QP %#x: %llu flushed receives never completed after the REJ", qpn,
                           static_cast<unsigned long long>(flushed));
    std::this_thread::yield();
  }
  recvs_done_[i] = recvs_posted_[i];
  // -e: the flush raised the armed receive CQ's event. It belongs to no measurement: take it
  // and arm the CQ again, so events_taken() counts the run's alone.
  while (channel_) {
    Result<rnicdv::CqEvent> ev = channel_->wait_event(0);
    if (!ev) break;
    rnicdv::CompletionQueue& fired = ev->context == 0 ? *send_cq_ : *recv_cq_;
    fired.ack_events(1);
    if (Errc e = fired.request_notify(); e != Errc::ok)
      return Status::error(e, "-e: cannot arm a completion queue again after the REJ");
  }
  hw::QpAttr reset;
  reset.state = hw::QpState::reset;
  RNICDV_TRY(qps_[i].modify(reset, hw::qp_attr::state));
  RNICDV_TRY(qps_[i].modify(init_attr_, init_mask_));
  return refill_receives();
}

hw::PortInfo TestEndpoint::port_info(uint32_t port) const {
  const auto& info = dev_->info();
  if (port >= 1 && port <= info.ports.size()) return info.ports[port - 1];
  return hw::PortInfo{info.gid, info.gid_index};
}

Status TestEndpoint::check_gids(const Options& o) const {
  const auto& info = dev_->info();
  for (uint32_t port : {o.ib_port, o.dual_port ? kSecondPort : o.ib_port}) {
    // The driver sends from each port's one GID: -x may only name it (perftest's -O looks the
    // same index up on both ports), and --ipv6 asks for an IPv6 one (perftest's GID choice; a
    // port has one here).
    const hw::PortInfo p = port_info(port);
    const std::string on_port =
        o.dual_port || port != 1 ? " on port " + std::to_string(port) : std::string();
    if (o.gid_index >= 0 && o.gid_index != p.gid_index)
      return Status::error(Errc::invalid_argument,
                           "-x %d: %s sends from GID index %u only%s (its RoCE v2 address)",
                           o.gid_index, info.name.c_str(), p.gid_index, on_port.c_str());
    if (o.ipv6 && p.gid.is_ipv4_mapped())
      return Status::error(Errc::invalid_argument,
                           "--ipv6: %s's GID %s is IPv4 (on the simulated HCA, RNICDV_SIM_ADDR "
                           "gives it an IPv6 address)",
                           info.name.c_str(), p.gid.ip().to_string().c_str());
  }
  return Status::ok();
}

bool TestEndpoint::recv_on_second_port(const rnicdv::Completion& wc) const {
  if (!dual_port_) return false;
  if (!xrc_) return on_second_port(wc.wr_id);
  return std::find(second_port_targets_.begin(), second_port_targets_.end(), wc.qp_num) !=
         second_port_targets_.end();
}

std::vector<PeerRecord> TestEndpoint::local_records() const {
  std::vector<PeerRecord> out;
  for (size_t i = 0; i < qps_.size(); ++i) {
    PeerRecord r;
    r.lid = 0;  // RoCE: no LID
    r.out_reads = static_cast<uint16_t>(out_reads_);
    r.qpn = qps_[i].qpn();
    r.psn = regions_[i].psn;
    r.rkey = regions_[i].mr->rkey();
    r.vaddr = regions_[i].mr->addr() + half_;
    // The GID of the QP's own port (perftest's set_up_connection: temp_gid or temp_gid2).
    const hw::PortInfo port = port_info(qp_ports_[i]);
    std::memcpy(r.gid, port.gid.raw, 16);
    r.gid_index = port.gid_index;
    r.srqn = xrc_srqn();  // perftest's set_up_connection: every record names the XRC SRQ
    out.push_back(r);
  }
  return out;
}

Status TestEndpoint::set_remote(const std::vector<PeerRecord>& remote) {
  if (remote.size() != qps_.size())
    return Status::error(Errc::protocol_error, "peer has %zu QPs, this side %zu", remote.size(),
                         qps_.size());
  remote_ = remote;
  return Status::ok();
}

Status TestEndpoint::connect(const std::vector<PeerRecord>& remote, uint32_t mtu_bytes,
                             bool stay_in_rtr) {
  RNICDV_TRY(set_remote(remote));
  if (ud_) return connect_datagrams(stay_in_rtr);
  for (size_t i = 0; i < qps_.size(); ++i) {
    const PeerRecord& peer = remote_[peer_index(i)];
    hw::QpAttr rtr;
    rtr.state = hw::QpState::rtr;
    rtr.path_mtu = mtu_code(mtu_bytes);
    rtr.dest_qpn = peer.qpn;
    rtr.rq_psn = peer.psn;
    std::memcpy(rtr.remote_gid.raw, peer.gid, 16);
    rtr.max_dest_rd_atomic = static_cast<uint8_t>(std::min<uint32_t>(out_reads_, 16));
    rtr.min_rnr_timer = 12;
    // The address vector as perftest's GRH: its traffic class, hop limit, flow label and SL.
    rtr.traffic_class = traffic_class_;
    rtr.hop_limit = hop_limit_;
    rtr.flow_label = flow_labels_.empty() ? 0 : flow_labels_[i % flow_labels_.size()];
    rtr.sl = sl_;
    namespace a = hw::qp_attr;
    // UC has no responder resources and no RNR (ibv_modify_qp(3), IBV_QPT_UC), nor has an XRC
    // initiator, which receives nothing (the kernel drops both from its modify, as perftest
    // gives them to every XRC QP).
    const bool xrc_initiator = xrc_ && i < initiators_;
    const uint32_t reliability =
        uc_ || xrc_initiator ? 0 : a::max_dest_rd_atomic | a::min_rnr_timer;
    RNICDV_TRY(qps_[i].modify(rtr, a::state | a::path_mtu | a::dest_qpn | a::rq_psn | a::av |
                                       reliability));
    // An XRC target only answers, which it does from RTR.
    if (!stay_in_rtr && i < lanes_) RNICDV_TRY(to_rts(i));
  }
  return Status::ok();
}

// UD: RTR takes nothing but the state; each QP sends through an address handle towards its
// peer, made with the attributes an RC QP's address vector would carry.
Status TestEndpoint::connect_datagrams(bool stay_in_rtr) {
  ahs_.clear();
  for (size_t i = 0; i < qps_.size(); ++i) {
    hw::QpAttr rtr;
    rtr.state = hw::QpState::rtr;
    RNICDV_TRY(qps_[i].modify(rtr, hw::qp_attr::state));
    hw::AhAttr attr;
    std::memcpy(attr.remote_gid.raw, remote_[i].gid, 16);
    attr.traffic_class = traffic_class_;
    attr.hop_limit = hop_limit_;
    attr.flow_label = flow_labels_.empty() ? 0 : flow_labels_[i % flow_labels_.size()];
    attr.sl = sl_;
    attr.port = qp_ports_[i];  // -O: the second half's datagrams leave from port 2's GID
    RNICDV_ASSIGN_OR_RETURN(rnicdv::AddressHandle ah, pd_->create_ah(attr));
    ahs_.push_back(std::move(ah));
    if (!stay_in_rtr) RNICDV_TRY(to_rts(i));
  }
  return Status::ok();
}

Status TestEndpoint::to_rts(size_t lane) {
  if (ud_) {
    hw::QpAttr rts;
    rts.state = hw::QpState::rts;
    rts.sq_psn = regions_[lane].psn;
    return qps_[lane].modify(rts, hw::qp_attr::state | hw::qp_attr::sq_psn);
  }
  const PeerRecord& peer = remote(lane);
  const uint8_t rd =
      static_cast<uint8_t>(std::min<uint32_t>(peer.out_reads ? peer.out_reads : 1, out_reads_));
  return qps_[lane].to_rts(regions_[lane].psn, qp_timeout_, retry_count_, 7, rd);
}

void TestEndpoint::describe(HeaderInfo* h) const {
  const auto& info = dev_->info();
  h->device = info.name;
  h->gid_index = port_info(first_port_).gid_index;
  h->dual_port = dual_port_;
  h->gid_index2 = dual_port_ ? port_info(kSecondPort).gid_index : -1;
  h->inline_size = inline_size_;
  h->out_reads = out_reads_;
  h->connection = ud_ ? "UD" : uc_ ? "UC" : xrc_ ? "XRC" : "RC";
  // perftest's XRC takes its SRQ (use_srq), and its QP count is doubled for XRC pairs.
  h->using_srq = xrc_;
  h->num_qps = static_cast<uint32_t>(qps_.size());
  if (info.kind == "sim") {
    std::string t = info.transport;
    if (t.rfind("sim ", 0) == 0) t = t.substr(4);
    h->sim_wire = t;
    h->device_profile = rnicdv::sim::profile_name(info.profile);
  }
  if (dpdk_memory_) h->buffers = "DPDK heap, " + rnicdv::sim::dpdk_memory_mode();
  if (hugepages_) h->buffers = "2 MiB huge pages (--use_hugepages)";
  if (!mmap_file_.empty())
    h->buffers = "mmap of " + mmap_file_ + " from offset " + std::to_string(mmap_offset_) +
                 ", shared (--mmap)";
}

AddressInfo TestEndpoint::local_address(size_t i) const {
  PeerRecord r = local_records()[i];
  AddressInfo a;
  a.lid = r.lid;
  a.out_reads = r.out_reads;
  a.qpn = r.qpn;
  a.psn = r.psn;
  a.rkey = r.rkey;
  a.vaddr = r.vaddr;
  std::memcpy(a.gid, r.gid, 16);
  a.srqn = r.srqn;
  a.show_srqn = xrc_;
  return a;
}

AddressInfo TestEndpoint::remote_address(size_t i) const {
  const PeerRecord& r = remote_[i];
  AddressInfo a;
  a.lid = r.lid;
  a.out_reads = r.out_reads;
  a.qpn = r.qpn;
  a.psn = r.psn;
  a.rkey = r.rkey;
  a.vaddr = r.vaddr;
  std::memcpy(a.gid, r.gid, 16);
  a.srqn = r.srqn;
  a.show_srqn = xrc_;
  return a;
}

}  // namespace rnicperf
