// SPDX-License-Identifier: BSD-3-Clause
// UD multicast (IBA 10.5.2.3, and RoCE v2's IP groups): QPs attach to a group named by its
// GID, an IPv4-mapped 224.0.0.0/4 address or an IPv6 ff00::/8 one, of the device's own IP
// version; the device joins the group on the wire while any of its QPs is attached,
// and gives each attached QP its own copy of every datagram sent to the group's QPN, each
// checked against that QP's Q_Key. A QP created to block self multicast loopback does not
// receive what it sent itself.
#include <algorithm>
#include <cstdio>

#include "../fabric_shared.h"
#include "../hca.h"

namespace rnicdv::sim {

namespace {

// The group an attach names, or an error for `op`.
Result<IpAddress> group_of(const hw::Gid& mgid, uint32_t qpn, const char* op) {
  const IpAddress group = mgid.ip();
  if (group.is_multicast()) return group;
  return Status::error(Errc::invalid_argument,
                       "qp %#x: %s %s: not a multicast GID (an IPv4-mapped 224.0.0.0/4 address or "
                       "an IPv6 ff00::/8 one)",
                       qpn, op, mgid.to_string().c_str());
}

}  // namespace

Status Hca::attach_mcast(QpObj* qp, const hw::Gid& mgid) {
  RNICDV_TRY(check_owner("attach_multicast"));
  RNICDV_TRY(check_alive("attach_multicast"));
  if (qp->type != hw::QpType::ud)
    return Status::error(Errc::invalid_argument,
                         "qp %#x: attach_multicast %s: only a UD QP joins a group (this one is %s)",
                         qp->qpn, mgid.to_string().c_str(),
                         qp->type == hw::QpType::uc ? "UC" : "RC");
  IpAddress group;
  RNICDV_ASSIGN_OR_RETURN(group, group_of(mgid, qp->qpn, "attach_multicast"));
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (qp_port(*qp) != 1)
      return Status::error(Errc::unsupported,
                           "qp %#x: attach_multicast %s: the QP is on port 2, and multicast "
                           "groups are joined on port 1 of a simulated HCA",
                           qp->qpn, mgid.to_string().c_str());
  }
  if (group.is_v4() != endpoint_.ip.is_v4())
    return Status::error(Errc::invalid_argument,
                         "qp %#x: attach_multicast %s: an %s group, and the device's address %s "
                         "is %s",
                         qp->qpn, group.to_string().c_str(), group.is_v4() ? "IPv4" : "IPv6",
                         endpoint_.ip.to_string().c_str(), endpoint_.ip.is_v4() ? "IPv4" : "IPv6");
  std::lock_guard<std::mutex> lock(mu_);
  // Attaching again is not an error (the kernel's uverbs takes it as done).
  if (std::find(qp->mcast_groups.begin(), qp->mcast_groups.end(), group) !=
      qp->mcast_groups.end())
    return Status::ok();
  const hw::DeviceCaps& caps = info_.caps;
  auto it = mcast_groups_.find(group);
  if (it == mcast_groups_.end() && mcast_groups_.size() >= caps.max_mcast_grp)
    return Status::error(Errc::no_resources,
                         "qp %#x: attach_multicast %s: the device holds %u groups already", qp->qpn,
                         group.to_string().c_str(), caps.max_mcast_grp);
  if (it != mcast_groups_.end() && it->second.size() >= caps.max_mcast_qp_attach)
    return Status::error(Errc::no_resources,
                         "qp %#x: attach_multicast %s: %u QPs are attached to it already", qp->qpn,
                         group.to_string().c_str(), caps.max_mcast_qp_attach);
  if (mcast_attachments_ >= caps.max_total_mcast_qp_attach)
    return Status::error(
        Errc::no_resources, "qp %#x: attach_multicast %s: the device has %u attachments already",
        qp->qpn, group.to_string().c_str(), caps.max_total_mcast_qp_attach);
  if (it == mcast_groups_.end()) {
    // The device's first QP in the group: the device joins it on the wire.
    if (attached_) {
      Status joined = shared_.wire->join_group(endpoint_, group);
      if (!joined) {
        char context[64];
        std::snprintf(context, sizeof context, "qp %#x: attach_multicast", qp->qpn);
        return joined.prepend(context);
      }
    }
    it = mcast_groups_.emplace(group, std::vector<QpObj*>{}).first;
  }
  it->second.push_back(qp);
  qp->mcast_groups.push_back(group);
  ++mcast_attachments_;
  // A device asleep on its wire's old wait fd looks again (wire.h wait_fd).
  kick_if_sleeping();
  return Status::ok();
}

Status Hca::detach_mcast(QpObj* qp, const hw::Gid& mgid) {
  RNICDV_TRY(check_owner("detach_multicast"));
  IpAddress group;
  RNICDV_ASSIGN_OR_RETURN(group, group_of(mgid, qp->qpn, "detach_multicast"));
  std::lock_guard<std::mutex> lock(mu_);
  if (std::erase(qp->mcast_groups, group) == 0)
    return Status::error(Errc::invalid_argument,
                         "qp %#x: detach_multicast %s: the QP is not attached to it", qp->qpn,
                         group.to_string().c_str());
  auto it = mcast_groups_.find(group);
  std::erase(it->second, qp);
  --mcast_attachments_;
  if (it->second.empty()) {
    mcast_groups_.erase(it);
    if (attached_) (void)shared_.wire->leave_group(endpoint_, group);
  }
  return Status::ok();
}

void Hca::detach_all_mcast_locked(QpObj& qp) {
  for (const IpAddress& group : qp.mcast_groups) {
    auto it = mcast_groups_.find(group);
    if (it == mcast_groups_.end()) continue;
    std::erase(it->second, &qp);
    --mcast_attachments_;
    if (it->second.empty()) {
      mcast_groups_.erase(it);
      if (attached_) (void)shared_.wire->leave_group(endpoint_, group);
    }
  }
  qp.mcast_groups.clear();
}

bool Hca::deliver_multicast_locked(const IpAddress& src, const IpAddress& group,
                                   const pkt::Packet& p, size_t len) {
  auto it = mcast_groups_.find(group);
  if (it == mcast_groups_.end()) return false;
  bool taken = false;
  for (QpObj* qp : it->second) {
    if (qp->block_self_mcast_loopback && src == endpoint_.ip && p.deth.src_qp == qp->qpn) continue;
    taken |= deliver_datagram_locked(qp, src, group, p, len);
  }
  return taken;
}

}  // namespace rnicdv::sim
