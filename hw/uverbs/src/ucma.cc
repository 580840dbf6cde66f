// SPDX-License-Identifier: BSD-3-Clause
// The rdma_cm cdev: its descriptors, the ID table, the pump that turns CM events into ucma
// events, and GET_EVENT (ucma.h).
#include "ucma.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <cstring>

#include "exit_teardown.h"
#include "quiet_thread.h"
#include "shim.h"
#include "ucma_command.h"
#include "user_memory.h"

namespace rnicdv::uverbs {
namespace ucma {

namespace {

constexpr const char kCdevPath[] = "/dev/infiniband/rdma_cm";

void take_count(int fd) {
  uint64_t v;
  [[maybe_unused]] ssize_t r = libc::read(fd, &v, sizeof v);
}

void give_count(int fd) {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t w = libc::write(fd, &one, sizeof one);
}

void copy_private_data(rdma_ucm_conn_param& p, const std::vector<uint8_t>& data) {
  const size_t n = std::min<size_t>(data.size(), sizeof p.private_data);
  std::memcpy(p.private_data, data.data(), n);
  p.private_data_len = static_cast<uint8_t>(n);
}

void copy_private_data(rdma_ucm_ud_param& p, const std::vector<uint8_t>& data) {
  const size_t n = std::min<size_t>(data.size(), sizeof p.private_data);
  std::memcpy(p.private_data, data.data(), n);
  p.private_data_len = static_cast<uint8_t>(n);
}

void set_peer_params(rdma_ucm_conn_param& p, const hw::CmPeerOffer& peer) {
  p.qp_num = peer.qpn;
  p.responder_resources = peer.responder_resources;
  p.initiator_depth = peer.initiator_depth;
  p.retry_count = peer.retry_count;
  p.rnr_retry_count = peer.rnr_retry_count;
  p.srq = peer.srq;
}

std::shared_ptr<File> file_of(int fd) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.files.find(fd);
  return it == r.files.end() ? nullptr : it->second;
}

// A connect request on listener `l`: a new Id in the listener's File, which owns the CM
// connection from now on, and its CONNECT_REQUEST event.
void on_connect_request(Registry& r, Id& l, SimDevice* dev, hw::CmEvent& ev) {
  auto id = std::make_unique<Id>();
  id->handle = r.next_handle++;
  id->file = l.file;
  id->ps = l.ps;
  id->qp_type = l.qp_type;
  id->state = State::connect;
  id->family = ev.remote.ip.is_v4() ? AF_INET : AF_INET6;
  id->dev = dev;
  id->src = {ev.request->local_address().ip, ev.request->local_address().port};
  id->dst = {ev.remote.ip, ev.remote.port};
  id->passive = true;
  id->have_peer = true;
  id->peer = ev.peer;
  id->conn = std::move(ev.request);
  // A connection's route is the REQ's primary path (a SIDR request has none).
  hw::QpAttr path;
  uint32_t mask = 0;
  if (!ev.sidr && id->conn->qp_attr(hw::QpState::rtr, &path, &mask) && (mask & hw::qp_attr::av)) {
    id->tos = path.traffic_class;
    id->hop_limit = path.hop_limit;
    id->flow_label = path.flow_label;
    id->sl = path.sl;
  }
  Event out;
  out.resp.uid = l.uid;
  out.resp.id = id->handle;
  out.resp.event = RDMA_CM_EVENT_CONNECT_REQUEST;
  if (ev.sidr) {
    // A SIDR request: the UD parameters, of which only the private data is known yet.
    copy_private_data(out.resp.param.ud, ev.private_data);
  } else {
    set_peer_params(out.resp.param.conn, ev.peer);
    copy_private_data(out.resp.param.conn, ev.private_data);
  }
  out.owner = l.handle;
  out.conn_req = true;
  r.ids.emplace(id->handle, std::move(id));
  l.file->push(out);
}

// The answer to a UD ID's SIDR_REQ as rdma_cm reports it (cma_sidr_rep_handler):
// ESTABLISHED with the service's QPN, Q_Key and the address vector toward it, or UNREACHABLE
// with the SIDR_REP's status (-ETIMEDOUT when none came).
void on_sidr_event(Id& id, hw::CmEvent& ev, Event& out) {
  rdma_ucm_ud_param& p = out.resp.param.ud;
  switch (ev.type) {
    case hw::CmEventType::connect_response:
      id.state = State::established;
      id.have_peer = true;
      id.peer = ev.peer;
      out.resp.event = RDMA_CM_EVENT_ESTABLISHED;
      p.qp_num = ev.peer.qpn;
      p.qkey = ev.peer.qkey;
      fill_ah_attr(p.ah_attr, *id.dev, hw::Gid::from_ip(id.dst.ip), id.tos, kHopLimit, 0, 0);
      copy_private_data(p, ev.private_data);
      break;
    case hw::CmEventType::unreachable:
    case hw::CmEventType::timeout:
      id.state = State::failed;
      out.resp.event = RDMA_CM_EVENT_UNREACHABLE;
      out.resp.status = ev.sidr_status ? ev.sidr_status : -ETIMEDOUT;
      copy_private_data(p, ev.private_data);
      break;
    default:
      return;  // nothing else happens to a SIDR request
  }
  id.file->push(out);
}

// One event of `id`'s connection as the ucma event rdma_cm would report.
void on_connection_event(Id& id, hw::CmEvent& ev) {
  Event out;
  out.resp.uid = id.uid;
  out.resp.id = id.handle;
  out.owner = id.handle;
  if (ev.sidr) {
    on_sidr_event(id, ev, out);
    return;
  }
  rdma_ucm_conn_param& p = out.resp.param.conn;
  switch (ev.type) {
    case hw::CmEventType::connect_response:
      id.have_peer = true;
      id.peer = ev.peer;
      out.resp.event = RDMA_CM_EVENT_CONNECT_RESPONSE;
      set_peer_params(p, ev.peer);
      copy_private_data(p, ev.private_data);
      break;
    case hw::CmEventType::established:
      id.state = State::established;
      out.resp.event = RDMA_CM_EVENT_ESTABLISHED;
      if (id.have_peer) set_peer_params(p, id.peer);
      break;
    case hw::CmEventType::rejected:
      id.state = State::failed;
      out.resp.event = RDMA_CM_EVENT_REJECTED;
      out.resp.status = ev.reject_reason;
      copy_private_data(p, ev.private_data);
      break;
    case hw::CmEventType::unreachable:
    case hw::CmEventType::timeout:
      id.state = State::failed;
      out.resp.event = RDMA_CM_EVENT_UNREACHABLE;
      out.resp.status = -ETIMEDOUT;
      break;
    case hw::CmEventType::disconnected:
      if (id.disconnect_reported) return;
      id.disconnect_reported = true;
      id.state = State::disconnected;
      out.resp.event = RDMA_CM_EVENT_DISCONNECTED;
      break;
    case hw::CmEventType::error:
      if (id.state == State::established) {
        if (id.disconnect_reported) return;
        id.disconnect_reported = true;
        id.state = State::disconnected;
        out.resp.event = RDMA_CM_EVENT_DISCONNECTED;
      } else {
        id.state = State::failed;
        out.resp.event = RDMA_CM_EVENT_CONNECT_ERROR;
        out.resp.status = -ECONNABORTED;
      }
      break;
    case hw::CmEventType::connect_request:
      return;  // listeners only
  }
  id.file->push(out);
}

// Drains every pending CM event of `handle` (mu held).
void drain(Registry& r, uint32_t handle) {
  auto it = r.ids.find(handle);
  if (it == r.ids.end()) return;
  Id& id = *it->second;
  for (auto& [dev, listener] : id.listeners) {
    hw::CmEvent ev;
    while (listener->next_event(&ev))
      if (ev.type == hw::CmEventType::connect_request && ev.request)
        on_connect_request(r, id, dev, ev);
  }
  if (id.conn) {
    hw::CmEvent ev;
    while (id.conn && id.conn->next_event(&ev)) on_connection_event(id, ev);
  }
}

void pump_loop() {
  Registry& r = registry();
  std::vector<pollfd> fds;
  std::vector<uint32_t> owners;
  for (;;) {
    fds.clear();
    owners.clear();
    fds.push_back(pollfd{r.wake_fd, POLLIN, 0});
    {
      std::lock_guard<std::mutex> lock(r.mu);
      if (r.stopping) return;
      for (auto& [handle, id] : r.ids) {
        for (auto& [dev, l] : id->listeners) {
          fds.push_back(pollfd{l->event_fd(), POLLIN, 0});
          owners.push_back(handle);
        }
        if (id->conn) {
          fds.push_back(pollfd{id->conn->event_fd(), POLLIN, 0});
          owners.push_back(handle);
        }
      }
    }
    if (::poll(fds.data(), fds.size(), -1) < 0 && errno != EINTR) return;
    if (fds[0].revents & POLLIN) take_count(r.wake_fd);
    std::lock_guard<std::mutex> lock(r.mu);
    if (r.stopping) return;
    for (size_t i = 1; i < fds.size(); ++i)
      if (fds[i].revents & POLLIN) drain(r, owners[i - 1]);
  }
}

}  // namespace

// GET_EVENT: blocks in poll() on the File's own descriptor, holding no lock, unless the
// application made the descriptor non-blocking (the command table runs it unlocked).
int get_event(const Cmd& c) {
  const auto cmd = c.as<rdma_ucm_get_event>();
  const size_t size = std::min(c.out_len, sizeof(rdma_ucm_event_resp));
  if (!user_range_ok(cmd.response, size, true))  // before an event is taken
    return c.error(EFAULT, "response at %#llx is not writable",
                   static_cast<unsigned long long>(cmd.response));
  Registry& r = registry();
  struct Delivery {
    uint64_t response;
    size_t size;
    uint32_t owner;
    uint32_t mc;
  } to{cmd.response, size, 0, 0};
  // The copy comes first: an event is taken off the queue only once the application has it.
  const auto deliver = [](const Event& ev, void* arg) {
    auto* d = static_cast<Delivery*>(arg);
    d->owner = ev.owner;
    d->mc = ev.mc;
    return copy_to_user(d->response, &ev.resp, d->size);
  };
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(r.mu);
      const int taken = c.file->take_front(deliver, &to);
      if (taken < 0) return c.reply_fault(cmd.response, size);
      if (taken > 0) {
        auto it = r.ids.find(to.owner);
        if (it != r.ids.end()) ++it->second->events_reported;
        // A multicast event counts for its membership too (LEAVE_MCAST's events_reported).
        if (auto m = r.mcasts.find(to.mc); to.mc != 0 && m != r.mcasts.end())
          ++m->second.events_reported;
        return 0;
      }
    }
    if (c.file->app_nonblocking()) return -EAGAIN;
    pollfd p{c.file->fd(), POLLIN, 0};
    const ShimIdle waiting;  // no lock held: exit() from a handler here tears down as usual
    if (::poll(&p, 1, -1) < 0 && errno == EINTR) return -EINTR;
  }
}

// ---- File ------------------------------------------------------------------------------------

std::shared_ptr<File> File::create(int open_flags) {
  const int fd = ::eventfd(0, EFD_NONBLOCK | EFD_SEMAPHORE |
                                  ((open_flags & O_CLOEXEC) ? EFD_CLOEXEC : 0));
  if (fd < 0) return nullptr;
  auto f = std::shared_ptr<File>(new File(fd));
  f->set_app_nonblocking((open_flags & O_NONBLOCK) != 0);
  return f;
}

void File::push(const Event& ev) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return;
  events_.push_back(ev);
  give_count(fd_);
}

int File::take_front(bool (*deliver)(const Event& ev, void* arg), void* arg) {
  std::lock_guard<std::mutex> lock(mu_);
  if (events_.empty()) return 0;
  if (!deliver(events_.front(), arg)) return -1;
  events_.pop_front();
  take_count(fd_);
  return 1;
}

std::vector<Event> File::take(uint32_t owner) {
  return take_if([owner](const Event& ev) { return ev.owner == owner; });
}

std::vector<Event> File::take_multicast(uint32_t mc) {
  return take_if([mc](const Event& ev) { return ev.mc == mc; });
}

template <class Pred>
std::vector<Event> File::take_if(Pred pred) {
  std::vector<Event> out;
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = events_.begin(); it != events_.end();) {
    if (!pred(*it)) {
      ++it;
      continue;
    }
    out.push_back(*it);
    it = events_.erase(it);
    take_count(fd_);
  }
  return out;
}

void File::closed() {
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = true;
  events_.clear();
}

// ---- Registry ---------------------------------------------------------------------------------

Registry& registry() {
  return per_process_table<Registry>();  // outlives exit; shutdown_ucma() empties it
}

const char* state_name(State s) noexcept {
  switch (s) {
    case State::idle: return "idle";
    case State::addr_bound: return "address bound";
    case State::addr_resolved: return "address resolved";
    case State::route_resolved: return "route resolved";
    case State::listen: return "listening";
    case State::connect: return "connecting";
    case State::established: return "established";
    case State::disconnected: return "disconnected";
    case State::failed: return "failed";
  }
  return "?";
}

void wake_pump() {
  Registry& r = registry();
  if (r.wake_fd >= 0) give_count(r.wake_fd);
}

void post_event(Id& id, uint32_t event, int32_t status) {
  Event ev;
  ev.resp.uid = id.uid;
  ev.resp.id = id.handle;
  ev.resp.event = event;
  ev.resp.status = static_cast<uint32_t>(status);
  ev.owner = id.handle;
  id.file->push(ev);
}

uint32_t destroy_id_locked(uint32_t handle) {
  Registry& r = registry();
  auto it = r.ids.find(handle);
  if (it == r.ids.end()) return 0;
  std::unique_ptr<Id> id = std::move(it->second);
  r.ids.erase(it);
  // Requests the application never read go with their listener.
  for (const Event& ev : id->file->take(handle))
    if (ev.conn_req) destroy_id_locked(ev.resp.id);
  id->listeners.clear();
  id->conn.reset();  // the CM sends a REJ (connecting) or a DREQ (established)
  std::erase_if(r.mcasts, [handle](const auto& m) { return m.second.owner == handle; });
  if (id->port_reserved) {
    auto p = r.ports.find(id->src.port);
    if (p != r.ports.end()) r.ports.erase(p);
  }
  wake_pump();
  return id->events_reported;
}

}  // namespace ucma

// ---- The descriptor's entry points (shim.h) ---------------------------------------------------

bool is_ucma_path(const char* path) noexcept {
  return path && std::strcmp(path, ucma::kCdevPath) == 0;
}

int fake_stat_ucma(struct stat* st) noexcept {
  std::memset(st, 0, sizeof *st);
  st->st_mode = S_IFCHR | 0666;
  st->st_rdev = makedev(ucma::kMiscMajor, ucma::kMinor);
  st->st_nlink = 1;
  st->st_blksize = 4096;
  return 0;
}

int open_ucma(int flags) {
  if ((flags & O_ACCMODE) != O_RDWR) {
    errno = EACCES;
    return -1;
  }
  std::shared_ptr<ucma::File> f = ucma::File::create(flags);
  if (!f) return -1;
  ucma::Registry& r = ucma::registry();
  {
    std::lock_guard<std::mutex> lock(r.mu);
    if (r.wake_fd < 0) {
      r.wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
      if (r.wake_fd < 0) {
        const int err = errno;
        libc::close(f->fd());
        errno = err;
        return -1;
      }
      r.pump = sim::start_quiet_thread(ucma::pump_loop);
    }
    r.files[f->fd()] = f;
  }
  set_fd_kind(f->fd(), FdKind::ucma);
  return f->fd();
}

ssize_t ucma_write(int fd, const void* buf, size_t n) {
  std::shared_ptr<ucma::File> file = ucma::file_of(fd);
  if (!file) return unknown_descriptor("rdma_cm", "write", fd);
  rdma_ucm_cmd_hdr hdr{};
  if (n < sizeof hdr) {
    errno = EINVAL;
    return -1;
  }
  // copy_from_user of the header, then of the command: an unreadable buffer is EFAULT.
  if (!copy_from_user(&hdr, reinterpret_cast<uintptr_t>(buf), sizeof hdr)) return -1;
  if (hdr.in + sizeof hdr > n) {
    errno = EINVAL;
    return -1;
  }
  std::vector<uint8_t> body(hdr.in);
  if (!copy_from_user(body.data(), reinterpret_cast<uintptr_t>(buf) + sizeof hdr, hdr.in))
    return -1;
  // The handlers' -errno becomes write()'s -1 with errno here, and only here.
  const int rc = ucma::run_command(file, hdr.cmd, body.data(), hdr.in, hdr.out);
  if (rc < 0) {
    errno = -rc;
    return -1;
  }
  return static_cast<ssize_t>(n);
}

bool ucma_nonblocking(int fd, bool* on, bool set) {
  std::shared_ptr<ucma::File> file = ucma::file_of(fd);
  if (!file) return false;
  if (set)
    file->set_app_nonblocking(*on);
  else
    *on = file->app_nonblocking();
  return true;
}

// Closing the descriptor destroys the IDs it still owns, as the kernel's ucma_close does.
void ucma_close(int fd) {
  ucma::Registry& r = ucma::registry();
  std::shared_ptr<ucma::File> file;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.files.find(fd);
    if (it == r.files.end()) return;
    file = std::move(it->second);
    r.files.erase(it);
    std::vector<uint32_t> owned;
    for (auto& [h, id] : r.ids)
      if (id->file == file) owned.push_back(h);
    for (uint32_t h : owned) ucma::destroy_id_locked(h);
  }
  set_fd_kind(fd, FdKind::none);
  file->closed();
}

// The kernel's ucma_close, for every file of a process that ended: an established connection
// sends a DREQ and one being set up a REJ, so that each peer learns at once (ucma.h
// destroy_id_locked). The CM sends them without any lock a verbs command holds (Hca
// transmit_raw), so this runs even when exit() interrupted one (devices.cc at_exit).
bool shutdown_ucma(const ExitDeadline& deadline) {
  ucma::Registry& r = ucma::registry();
  std::thread pump;
  {
    if (!deadline.lock(r.mu)) return false;  // a command still holds the table: left as it is
    std::lock_guard<std::mutex> lock(r.mu, std::adopt_lock);
    r.stopping = true;
    std::vector<uint32_t> all;
    for (auto& [h, id] : r.ids) all.push_back(h);
    for (uint32_t h : all) ucma::destroy_id_locked(h);
    pump = std::move(r.pump);
  }
  ucma::wake_pump();
  if (pump.joinable()) pump.join();
  return true;
}

}  // namespace rnicdv::uverbs
