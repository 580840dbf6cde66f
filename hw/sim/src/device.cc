// SPDX-License-Identifier: BSD-3-Clause
// sim::Device: the hw::Device a simulated HCA presents to the driver.
#include <endian.h>

#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "cm/sim_cm.h"
#include "wire/frame.h"
#include "completion_channel.h"
#include "device_impl.h"
#include "handles.h"

namespace rnicdv::sim {

namespace {

const SimPd* sim_pd(const Hca& hca, hw::Pd& pd) {
  auto* p = dynamic_cast<SimPd*>(&pd);
  return p && p->hca() == &hca ? p : nullptr;
}

CqObj* sim_cq(const Hca& hca, hw::Cq& cq) {
  auto* c = dynamic_cast<SimCq*>(&cq);
  return c && c->hca() == &hca ? c->obj() : nullptr;
}

Status foreign(const Hca& hca, const char* op, const char* what) {
  return Status::error(Errc::invalid_argument, "%s: %s: the %s belongs to another device",
                       hca.info().name.c_str(), op, what);
}

}  // namespace

Device::Device(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Device::~Device() {
  if (impl_->hca->forked_away()) {
    // In a child of fork(): the device's thread and locks are the parent's, and tearing its
    // state down could wait for a lock nobody here will release. The child's copy is kept,
    // reachable, until the child exits.
    impl_->hca->stop();
    static auto* kept_mu = new std::mutex();  // the child's own: no parent thread held it
    static auto* kept = new std::vector<std::unique_ptr<Impl>>();
    std::lock_guard<std::mutex> lock(*kept_mu);
    kept->push_back(std::move(impl_));
    return;
  }
  // Objects still held keep the device's memory alive; the engine stops now.
  impl_->hca->stop();
}

const hw::DeviceInfo& Device::info() const {
  return impl_->hca->info();
}
const DeviceConfig& Device::config() const {
  return impl_->hca->config();
}
const hw::IpAddress& Device::address() const {
  return impl_->hca->address();
}

uint32_t Device::ipv4() const {
  return impl_->hca->ipv4();
}

Result<std::unique_ptr<hw::Pd>> Device::alloc_pd() {
  RNICDV_ASSIGN_OR_RETURN(const uint32_t pdn, impl_->hca->alloc_pd());
  return std::unique_ptr<hw::Pd>(std::make_unique<SimPd>(impl_->hca, pdn));
}

Result<std::unique_ptr<hw::Mr>> Device::reg_mr(hw::Pd& pd, void* addr, size_t length,
                                               uint32_t access) {
  Hca& hca = *impl_->hca;
  const SimPd* p = sim_pd(hca, pd);
  if (!p) return foreign(hca, "reg_mr", "PD");
  RNICDV_ASSIGN_OR_RETURN(const uint32_t key, hca.reg_mr(p->pdn(), addr, length, access));
  return std::unique_ptr<hw::Mr>(std::make_unique<SimMr>(impl_->hca, key, addr, length));
}

Result<std::unique_ptr<hw::Cq>> Device::create_cq(uint32_t min_cqe) {
  RNICDV_ASSIGN_OR_RETURN(CqObj* const cq, impl_->hca->create_cq(min_cqe));
  return std::unique_ptr<hw::Cq>(std::make_unique<SimCq>(impl_->hca, cq));
}

Result<std::unique_ptr<hw::CompletionChannel>> Device::create_completion_channel() {
  return SimCompletionChannel::create(impl_->hca->info().name.c_str());
}

Result<std::unique_ptr<hw::Cq>> Device::create_evented_cq(uint32_t min_cqe,
                                                          hw::CompletionChannel& channel) {
  Hca& hca = *impl_->hca;
  auto* ch = dynamic_cast<SimCompletionChannel*>(&channel);
  if (!ch)
    return Status::error(Errc::invalid_argument,
                         "%s: create_cq: the completion channel is not a simulated device's",
                         hca.info().name.c_str());
  Result<std::unique_ptr<hw::Cq>> cq = create_cq(min_cqe);
  if (!cq) return cq;
  auto& sim = static_cast<SimCq&>(*cq.value());
  const uint32_t cqn = sim.view().dv.cqn;
  if (Status st = hca.set_cq_event_handler(sim.obj(), [q = ch->queue(), cqn] { q->push(cqn); });
      !st)
    return st;
  return cq;
}

namespace {

class SimSrq final : public hw::Srq {
 public:
  SimSrq(std::shared_ptr<Hca> hca, SrqObj* srq) : hca_(std::move(hca)), srq_(srq) {}
  // A QP still on it keeps the queue's memory until the device goes (Hca::~Hca).
  ~SimSrq() override { (void)hca_->destroy_srq(srq_); }
  const hw::SrqView& view() const override { return srq_->view; }
  Status arm_limit(uint32_t limit) override { return hca_->arm_srq_limit(srq_, limit); }
  SrqObj* obj() const { return srq_; }
  const Hca* hca() const { return hca_.get(); }

 private:
  std::shared_ptr<Hca> hca_;
  SrqObj* srq_;
};

// A QP of `hca` on its own objects, with its receives from `srq` if given.
Result<std::unique_ptr<hw::Qp>> make_qp(const std::shared_ptr<Hca>& hca, hw::Pd& pd,
                                        hw::Cq& send_cq, hw::Cq& recv_cq, hw::Srq* srq,
                                        const hw::QpCaps& caps,
                                        hw::QpType type = hw::QpType::rc) {
  const SimPd* p = sim_pd(*hca, pd);
  if (!p) return foreign(*hca, "create_qp", "PD");
  CqObj* scq = sim_cq(*hca, send_cq);
  CqObj* rcq = sim_cq(*hca, recv_cq);
  if (!scq || !rcq) return foreign(*hca, "create_qp", "CQ");
  SrqObj* shared = nullptr;
  if (srq) {
    auto* s = dynamic_cast<SimSrq*>(srq);
    if (!s || s->hca() != hca.get()) return foreign(*hca, "create_qp", "SRQ");
    shared = s->obj();
  }
  RNICDV_ASSIGN_OR_RETURN(QpObj* const qp,
                          hca->create_qp(p->pdn(), scq, rcq, caps, shared, type));
  return std::unique_ptr<hw::Qp>(std::make_unique<SimQp>(hca, qp));
}

class SimXrcd final : public hw::Xrcd {
 public:
  SimXrcd(std::shared_ptr<Hca> hca, uint32_t xrcdn) : hca_(std::move(hca)), xrcdn_(xrcdn) {}
  // The driver closes a domain after its SRQs and targets (it holds it for them); closing
  // one still in use leaves it open until the device goes.
  ~SimXrcd() override { (void)hca_->dealloc_xrcd(xrcdn_); }
  uint32_t xrcdn() const override { return xrcdn_; }
  const Hca* hca() const { return hca_.get(); }

 private:
  std::shared_ptr<Hca> hca_;
  uint32_t xrcdn_;
};

const SimXrcd* sim_xrcd(const Hca& hca, hw::Xrcd& xrcd) {
  auto* x = dynamic_cast<SimXrcd*>(&xrcd);
  return x && x->hca() == &hca ? x : nullptr;
}

// An address vector as libmlx5 builds one for a RoCE v2 GID (mlx5_create_ah): SL in bits 3..1
// of stat_rate_sl, no GRH bit (reserved on RoCE), the source GID index in grh_gid_fl, and the
// destination MAC the fabric gives the destination's IPv4 address.
class SimAh final : public hw::Ah {
 public:
  explicit SimAh(const mlx5_wqe_av& av) : av_(av) {}
  const mlx5_wqe_av& av() const override { return av_; }

 private:
  mlx5_wqe_av av_;
};

}  // namespace

Result<std::unique_ptr<hw::Qp>> Device::create_qp(hw::Pd& pd, hw::Cq& send_cq, hw::Cq& recv_cq,
                                                  const hw::QpCaps& caps) {
  return make_qp(impl_->hca, pd, send_cq, recv_cq, nullptr, caps);
}

Result<std::unique_ptr<hw::Qp>> Device::create_ud_qp(hw::Pd& pd, hw::Cq& send_cq,
                                                     hw::Cq& recv_cq, const hw::QpCaps& caps) {
  return make_qp(impl_->hca, pd, send_cq, recv_cq, nullptr, caps, hw::QpType::ud);
}

Result<std::unique_ptr<hw::Qp>> Device::create_uc_qp(hw::Pd& pd, hw::Cq& send_cq,
                                                     hw::Cq& recv_cq, hw::Srq* srq,
                                                     const hw::QpCaps& caps) {
  return make_qp(impl_->hca, pd, send_cq, recv_cq, srq, caps, hw::QpType::uc);
}

Result<std::unique_ptr<hw::Ah>> Device::create_ah(hw::Pd& pd, const hw::AhAttr& attr) {
  Hca& hca = *impl_->hca;
  if (!sim_pd(hca, pd)) return foreign(hca, "create_ah", "PD");
  const char* name = hca.info().name.c_str();
  if (attr.remote_gid.ip().is_v4() != hca.address().is_v4())
    return Status::error(Errc::unsupported,
                         "%s: create_ah: destination GID %s and the device's address %s are of "
                         "different IP versions (RoCE v2 frames carry one end to end)",
                         name, attr.remote_gid.to_string().c_str(),
                         hca.address().to_string().c_str());
  if (attr.flow_label > 0xfffff || attr.sl > 7)
    return Status::error(Errc::invalid_argument,
                         "%s: create_ah: flow label %#x (20 bits) or SL %u (0..7 on RoCE) out of "
                         "range",
                         name, attr.flow_label, attr.sl);
  const std::vector<hw::PortInfo>& ports = hca.info().ports;
  if (attr.port < 1 || attr.port > ports.size())
    return Status::error(Errc::invalid_argument, "%s: create_ah: port %u: the device has %zu",
                         name, attr.port, ports.size());
  mlx5_wqe_av av;
  std::memset(&av, 0, sizeof av);
  av.stat_rate_sl = static_cast<uint8_t>((attr.sl & 0x7) << 1);
  av.tclass = attr.traffic_class;
  av.hop_limit = attr.hop_limit ? attr.hop_limit : 64;
  av.grh_gid_fl = htobe32((uint32_t{ports[attr.port - 1u].gid_index} << 20) | attr.flow_label);
  std::memcpy(av.rgid, attr.remote_gid.raw, sizeof av.rgid);
  const MacAddress mac = mac_for_ip(attr.remote_gid.ip());
  std::memcpy(av.rmac, mac.data(), sizeof av.rmac);
  return std::unique_ptr<hw::Ah>(std::make_unique<SimAh>(av));
}

Result<std::unique_ptr<hw::Srq>> Device::create_srq(hw::Pd& pd, uint32_t max_wr, uint32_t max_sge) {
  Hca& hca = *impl_->hca;
  const SimPd* p = sim_pd(hca, pd);
  if (!p) return foreign(hca, "create_srq", "PD");
  RNICDV_ASSIGN_OR_RETURN(SrqObj* const srq, hca.create_srq(p->pdn(), max_wr, max_sge));
  return std::unique_ptr<hw::Srq>(std::make_unique<SimSrq>(impl_->hca, srq));
}

Result<std::unique_ptr<hw::Qp>> Device::create_qp_on_srq(hw::Pd& pd, hw::Cq& send_cq,
                                                         hw::Cq& recv_cq, hw::Srq& srq,
                                                         const hw::QpCaps& caps) {
  return make_qp(impl_->hca, pd, send_cq, recv_cq, &srq, caps);
}

Result<std::unique_ptr<hw::Xrcd>> Device::open_xrcd() {
  RNICDV_ASSIGN_OR_RETURN(const uint32_t xrcdn, impl_->hca->alloc_xrcd());
  return std::unique_ptr<hw::Xrcd>(std::make_unique<SimXrcd>(impl_->hca, xrcdn));
}

Result<std::unique_ptr<hw::Srq>> Device::create_xrc_srq(hw::Xrcd& xrcd, hw::Pd& pd, hw::Cq& cq,
                                                        uint32_t max_wr, uint32_t max_sge) {
  Hca& hca = *impl_->hca;
  const SimXrcd* x = sim_xrcd(hca, xrcd);
  if (!x) return foreign(hca, "create_xrc_srq", "XRC domain");
  const SimPd* p = sim_pd(hca, pd);
  if (!p) return foreign(hca, "create_xrc_srq", "PD");
  CqObj* c = sim_cq(hca, cq);
  if (!c) return foreign(hca, "create_xrc_srq", "CQ");
  RNICDV_ASSIGN_OR_RETURN(SrqObj* const srq,
                          hca.create_xrc_srq(x->xrcdn(), p->pdn(), c, max_wr, max_sge));
  return std::unique_ptr<hw::Srq>(std::make_unique<SimSrq>(impl_->hca, srq));
}

Result<std::unique_ptr<hw::Qp>> Device::create_xrc_send_qp(hw::Pd& pd, hw::Cq& send_cq,
                                                           const hw::QpCaps& caps) {
  return make_qp(impl_->hca, pd, send_cq, send_cq, nullptr, caps, hw::QpType::xrc_send);
}

Result<std::unique_ptr<hw::Qp>> Device::create_xrc_recv_qp(hw::Xrcd& xrcd) {
  Hca& hca = *impl_->hca;
  const SimXrcd* x = sim_xrcd(hca, xrcd);
  if (!x) return foreign(hca, "create_xrc_recv_qp", "XRC domain");
  RNICDV_ASSIGN_OR_RETURN(QpObj* const qp, hca.create_xrc_recv_qp(x->xrcdn()));
  return std::unique_ptr<hw::Qp>(std::make_unique<SimQp>(impl_->hca, qp));
}

int Device::async_fd() const {
  return impl_->hca->events().fd();
}

bool Device::next_async_event(hw::AsyncEvent* out) {
  return impl_->hca->events().pop(out);
}

hw::ProgressHook Device::progress_hook() {
  return hw::ProgressHook{[](void* ctx) { static_cast<Hca*>(ctx)->progress(); }, impl_->hca.get()};
}

hw::ConnectionManager* Device::connection_manager() {
  return impl_->cm.get();
}

DeviceCounters Device::counters() const {
  return impl_->hca->counters();
}

Result<QpSnapshot> Device::qp_snapshot(uint32_t qpn) const {
  return impl_->hca->qp_snapshot(qpn);
}

std::string Device::dump() const {
  return impl_->hca->dump();
}
PortState Device::port_state() const {
  return impl_->hca->port_up() ? PortState::active : PortState::down;
}
bool Device::fatal() const {
  return impl_->hca->dead();
}
void Device::pause() {
  impl_->hca->pause();
}
void Device::resume() {
  impl_->hca->resume();
}

void Device::drop_outgoing_cm(CmMessage msg, uint32_t count) {
  cm::cm_agent_of(*this).drop_outgoing(static_cast<cm::AttrId>(msg), count);
}

Result<std::unique_ptr<hw::Cq>> create_cq_external(Device& device, const ExternalCqMemory& mem) {
  auto& hca = device.impl().hca;
  RNICDV_ASSIGN_OR_RETURN(CqObj* const cq, hca->create_cq_external(mem));
  return std::unique_ptr<hw::Cq>(std::make_unique<SimCq>(hca, cq));
}

Result<std::unique_ptr<hw::Qp>> create_qp_external(Device& device, hw::Pd& pd, hw::Cq& send_cq,
                                                   hw::Cq& recv_cq, const ExternalQpMemory& mem) {
  auto& hca = device.impl().hca;
  const SimPd* p = sim_pd(*hca, pd);
  if (!p) return foreign(*hca, "create_qp", "PD");
  CqObj* scq = sim_cq(*hca, send_cq);
  CqObj* rcq = sim_cq(*hca, recv_cq);
  if (!scq || !rcq) return foreign(*hca, "create_qp", "CQ");
  SrqObj* srq = nullptr;
  if (mem.srq) {
    auto* s = dynamic_cast<SimSrq*>(mem.srq);
    if (!s || s->hca() != hca.get()) return foreign(*hca, "create_qp", "SRQ");
    srq = s->obj();
  }
  RNICDV_ASSIGN_OR_RETURN(QpObj* const qp, hca->create_qp_external(p->pdn(), scq, rcq, mem, srq));
  return std::unique_ptr<hw::Qp>(std::make_unique<SimQp>(hca, qp));
}

Result<std::unique_ptr<hw::Srq>> create_srq_external(Device& device, hw::Pd& pd,
                                                     const ExternalSrqMemory& mem) {
  auto& hca = device.impl().hca;
  const SimPd* p = sim_pd(*hca, pd);
  if (!p) return foreign(*hca, "create_srq", "PD");
  RNICDV_ASSIGN_OR_RETURN(SrqObj* const srq, hca->create_srq_external(p->pdn(), mem));
  return std::unique_ptr<hw::Srq>(std::make_unique<SimSrq>(hca, srq));
}

Result<std::unique_ptr<hw::Srq>> create_xrc_srq_external(Device& device, hw::Xrcd& xrcd,
                                                         hw::Pd& pd, hw::Cq& cq,
                                                         const ExternalSrqMemory& mem,
                                                         uint32_t user_index) {
  auto& hca = device.impl().hca;
  const SimXrcd* x = sim_xrcd(*hca, xrcd);
  if (!x) return foreign(*hca, "create_xrc_srq", "XRC domain");
  const SimPd* p = sim_pd(*hca, pd);
  if (!p) return foreign(*hca, "create_xrc_srq", "PD");
  CqObj* c = sim_cq(*hca, cq);
  if (!c) return foreign(*hca, "create_xrc_srq", "CQ");
  RNICDV_ASSIGN_OR_RETURN(SrqObj* const srq,
                          hca->create_xrc_srq_external(x->xrcdn(), p->pdn(), c, mem, user_index));
  return std::unique_ptr<hw::Srq>(std::make_unique<SimSrq>(hca, srq));
}

Status rereg_mr(hw::Mr& mr, hw::Pd& pd, void* addr, size_t length, uint32_t access) {
  auto* m = dynamic_cast<SimMr*>(&mr);
  auto* p = dynamic_cast<SimPd*>(&pd);
  if (!m || !p || p->hca() != m->hca())
    return Status::error(Errc::invalid_argument,
                         "rereg_mr: the region and the PD must belong to one simulated device");
  Status st = m->hca()->rereg_mr(m->lkey(), p->pdn(), addr, length, access);
  if (st) m->set_range(addr, length);
  return st;
}

Status attach_uar_page(Device& device, void* app_view, void* device_view) {
  return device.impl().hca->attach_uar_page(static_cast<uint8_t*>(app_view),
                                            static_cast<uint8_t*>(device_view));
}

void detach_uar_page(Device& device, void* app_view) {
  device.impl().hca->detach_uar_page(static_cast<uint8_t*>(app_view));
}

const std::string& uar_wake_mechanism() {
  static const std::string m = UarWatch::mechanism() == "userfaultfd"
                                   ? UarWatch::mechanism()
                                   : UarWatch::mechanism() + "; the device polls its UAR pages";
  return m;
}

Status set_cq_event_handler(hw::Cq& cq, std::function<void()> fn) {
  auto* c = dynamic_cast<SimCq*>(&cq);
  if (!c)
    return Status::error(Errc::invalid_argument,
                         "set_cq_event_handler: cq %#x is not a CQ of a simulated device",
                         cq.view().dv.cqn);
  return c->hca_ref().set_cq_event_handler(c->obj(), std::move(fn));
}

void set_qp_user_index(hw::Qp& qp, uint32_t user_index) {
  auto* q = dynamic_cast<SimQp*>(&qp);
  if (q) q->hca_ref().set_user_index(q->obj(), user_index);
}

}  // namespace rnicdv::sim
