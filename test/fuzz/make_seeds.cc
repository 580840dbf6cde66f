// SPDX-License-Identifier: BSD-3-Clause
// Writes the seed corpora of the fuzz targets (test/fuzz/corpus/<target>/): well-formed
// inputs built by the project's own encoders, so that the fuzzers start from inputs that get
// past every parser, plus a few malformed ones for the error paths.
//
//   fuzz-make-seeds DIR     writes DIR/sq_executor/seed-*, DIR/receive_path/seed-*, ...
#include <endian.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "cm/mad.h"
#include "fuzz_entry.h"
#include "packet/packet.h"
#include "rnicdv/wqe/cqe.h"
#include "rnicdv/wqe/send_wqe.h"

using namespace rnicdv;
namespace fs = std::filesystem;

namespace {

// The fuzz harness (hw/sim/src/fuzz.cc) gives each of its two devices one QP; a device's
// first QP number is 0x100.
constexpr uint32_t kHarnessQpn = 0x100;

bool write_file(const fs::path& path, const std::vector<uint8_t>& bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return false;
  const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  return std::fclose(f) == 0 && ok;
}

// ---- SQ rings ------------------------------------------------------------------------------

struct SqBuilder {
  std::vector<uint8_t> ring = std::vector<uint8_t>(64 * wqe::kBbBytes);
  uint32_t pi = 0;
  std::vector<uint8_t> payload = std::vector<uint8_t>(256);

  SqBuilder() {
    for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i * 7 + 1);
  }
  void add(SendWr wr) {
    wqe::SqLimits limits{4, 128};
    wqe::EncodedWqe enc;
    const wqe::SqRing sq{ring.data(), 64};
    if (wqe::encode_send_wqe(sq, pi, 64 - pi, kHarnessQpn, wr, limits, 0, &enc) != Errc::ok) {
      std::fprintf(stderr, "fuzz-make-seeds: a seed WQE did not encode\n");
      std::exit(1);
    }
    pi += enc.bbs;
  }
  void add_inline(WrOpcode op, uint32_t len, SendFlags flags = send_flags::signaled) {
    Sge sge{reinterpret_cast<uintptr_t>(payload.data()), len, 0};
    SendWr wr;
    wr.wr_id = pi;
    wr.opcode = op;
    wr.flags = flags | send_flags::inline_data;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.imm_data = 0x1234abcd;
    wr.remote_addr = 0x10000;
    wr.rkey = 0x2001;
    add(wr);
  }
  std::vector<uint8_t> bytes() const {
    return std::vector<uint8_t>(ring.begin(), ring.begin() + pi * wqe::kBbBytes);
  }
};

std::vector<std::pair<std::string, std::vector<uint8_t>>> sq_seeds() {
  std::vector<std::pair<std::string, std::vector<uint8_t>>> out;
  {
    SqBuilder b;
    SendWr wr;
    wr.opcode = WrOpcode::nop;
    wr.flags = send_flags::signaled;
    b.add(wr);
    out.emplace_back("nop", b.bytes());
  }
  {
    SqBuilder b;
    b.add_inline(WrOpcode::send, 32);
    out.emplace_back("send-inline", b.bytes());
  }
  {
    SqBuilder b;
    b.add_inline(WrOpcode::rdma_write, 100);
    out.emplace_back("write-inline-bad-rkey", b.bytes());
  }
  {
    SqBuilder b;
    b.add_inline(WrOpcode::rdma_write_imm, 8);
    b.add_inline(WrOpcode::send_imm, 0);
    out.emplace_back("write-imm-send-imm", b.bytes());
  }
  {
    SqBuilder b;  // unsignaled sends then a signaled one: one CQE retires them all
    b.add_inline(WrOpcode::send, 16, 0);
    b.add_inline(WrOpcode::send, 128, 0);
    b.add_inline(WrOpcode::send, 64, send_flags::signaled | send_flags::solicited);
    out.emplace_back("send-batch", b.bytes());
  }
  {
    SqBuilder b;  // a gather list with a key the device does not know: a protection error
    Sge sges[2] = {{0x7000, 64, 0x3003}, {0x8000, 32, 0x3003}};
    SendWr wr;
    wr.opcode = WrOpcode::rdma_read;
    wr.flags = send_flags::signaled;
    wr.sg_list = sges;
    wr.num_sge = 2;
    wr.remote_addr = 0x20000;
    wr.rkey = 0x2001;
    b.add(wr);
    out.emplace_back("read-bad-lkey", b.bytes());
  }
  {
    SqBuilder b;
    Sge sge{0x9000, 8, 0x3003};
    SendWr wr;
    wr.opcode = WrOpcode::atomic_cmp_swap;
    wr.flags = send_flags::signaled | send_flags::fence;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.remote_addr = 0x30008;
    wr.rkey = 0x2001;
    wr.compare_add = 5;
    wr.swap = 9;
    b.add(wr);
    wr.opcode = WrOpcode::atomic_fetch_add;
    b.add(wr);
    out.emplace_back("atomics", b.bytes());
  }
  {
    SqBuilder b;  // a valid send, then a WQE whose DS is 0: an error CQE, the QP to ERR
    b.add_inline(WrOpcode::send, 16);
    b.add_inline(WrOpcode::send, 16);
    auto* ctrl = reinterpret_cast<mlx5_wqe_ctrl_seg*>(b.ring.data() + wqe::kBbBytes);
    ctrl->qpn_ds = htobe32(kHarnessQpn << 8);
    out.emplace_back("bad-ds", b.bytes());
  }
  return out;
}

// ---- RoCEv2 datagrams ----------------------------------------------------------------------

std::vector<uint8_t> packet(sim::pkt::Packet p) {
  std::vector<uint8_t> buf(sim::pkt::kMaxPacketBytes);
  buf.resize(sim::pkt::build_packet(p, buf.data(), buf.size()));
  return buf;
}

std::vector<std::pair<std::string, std::vector<uint8_t>>> receive_seeds() {
  std::vector<std::pair<std::string, std::vector<uint8_t>>> out;
  static const uint8_t payload[] = "a payload of 48 bytes for the receive path seed";
  auto base = [](uint8_t opcode, uint32_t psn = 0) {
    sim::pkt::Packet p;
    p.bth.opcode = opcode;
    p.bth.dest_qp = kHarnessQpn;
    p.bth.psn = psn;
    p.bth.ack_req = true;
    return p;
  };
  {
    auto p = base(0x04);  // RC SEND_ONLY
    p.payload = payload;
    p.payload_len = 48;
    out.emplace_back("send-only", packet(p));
  }
  {
    auto p = base(0x05);  // SEND_ONLY_WITH_IMMEDIATE
    p.imm = 0xfeedbeef;
    p.payload = payload;
    p.payload_len = 12;
    out.emplace_back("send-only-imm", packet(p));
  }
  {
    auto p = base(0x00);  // SEND_FIRST: the rest never comes
    p.payload = payload;
    p.payload_len = 16;
    out.emplace_back("send-first", packet(p));
  }
  {
    auto p = base(0x0a);  // RDMA_WRITE_ONLY to a key the responder does not know
    p.reth = sim::pkt::Reth{0x10000, 0x2001, 32};
    p.payload = payload;
    p.payload_len = 32;
    out.emplace_back("write-only", packet(p));
  }
  {
    auto p = base(0x0b);  // RDMA_WRITE_ONLY_WITH_IMMEDIATE, zero length
    p.reth = sim::pkt::Reth{0, 0, 0};
    p.imm = 7;
    out.emplace_back("write-only-imm-empty", packet(p));
  }
  {
    auto p = base(0x0c);  // RDMA_READ_REQUEST
    p.reth = sim::pkt::Reth{0x10000, 0x2001, 600};
    out.emplace_back("read-request", packet(p));
  }
  {
    auto p = base(0x13);  // COMPARE_SWAP
    p.atomic = sim::pkt::AtomicEth{0x10008, 0x2001, 9, 5};
    out.emplace_back("compare-swap", packet(p));
  }
  {
    auto p = base(0x11);  // ACKNOWLEDGE to a requester with nothing outstanding
    p.aeth = sim::pkt::Aeth{0x1f, 0};
    out.emplace_back("ack", packet(p));
  }
  {
    auto p = base(0x04, 9);  // out of sequence: a NAK
    p.payload = payload;
    p.payload_len = 4;
    out.emplace_back("send-psn-ahead", packet(p));
  }
  {
    auto p = base(0x05);
    p.imm = 1;
    auto bytes = packet(p);
    bytes.resize(sim::pkt::kBthBytes + 2);  // ends inside the ImmDt: a runt, dropped
    out.emplace_back("send-imm-runt", bytes);
  }
  {
    auto p = base(sim::pkt::opcode::ud_send_only_imm);  // to the harness's UD QP
    p.bth.dest_qp = kHarnessQpn + 1;
    p.deth = sim::pkt::Deth{sim::kFuzzUdQkey, 0x42};
    p.imm = 3;
    p.payload = payload;
    p.payload_len = 48;
    out.emplace_back("ud-send-only-imm", packet(p));
    p.deth.qkey = sim::kFuzzUdQkey + 1;  // dropped: not the QP's Q_Key
    out.emplace_back("ud-send-wrong-qkey", packet(p));
  }
  // One packet of the UC QP's 256-byte path MTU, as FIRST and MIDDLE carry.
  static const uint8_t mtu_payload[256] = {0x75, 0x63};
  {
    auto p = base(sim::pkt::opcode::uc_send_only_imm);  // to the harness's UC QP
    p.bth.dest_qp = sim::kFuzzUcQpn;
    p.imm = 4;
    p.payload = payload;
    p.payload_len = 48;
    out.emplace_back("uc-send-only-imm", packet(p));
    p.bth.opcode = sim::pkt::opcode::uc_send_middle;  // no message in progress: dropped
    p.payload = mtu_payload;
    p.payload_len = sizeof mtu_payload;
    out.emplace_back("uc-send-middle", packet(p));
  }
  {
    auto p = base(sim::pkt::opcode::uc_write_first);  // a WRITE whose rest never comes
    p.bth.dest_qp = sim::kFuzzUcQpn;
    p.reth = sim::pkt::Reth{0x10000, 0x2001, 600};
    p.payload = mtu_payload;
    p.payload_len = sizeof mtu_payload;
    out.emplace_back("uc-write-first", packet(p));
  }
  {
    // To the harness's XRC target: a SEND naming its domain's SRQ, one naming another
    // domain's (refused), and a WRITE (XRCETH, then RETH).
    auto p = base(sim::pkt::opcode::xrc_base + sim::pkt::opcode::rc_send_only);
    p.bth.dest_qp = sim::kFuzzXrcQpn;
    p.xrc_srqn = sim::kFuzzXrcSrqn;
    p.payload = payload;
    p.payload_len = 48;
    out.emplace_back("xrc-send-only", packet(p));
    p.xrc_srqn = sim::kFuzzForeignXrcSrqn;
    out.emplace_back("xrc-send-foreign-srq", packet(p));
    p.bth.opcode = sim::pkt::opcode::xrc_base + sim::pkt::opcode::rc_write_only;
    p.xrc_srqn = sim::kFuzzXrcSrqn;
    p.reth = sim::pkt::Reth{0x10000, 0x2001, 48};
    out.emplace_back("xrc-write-only", packet(p));
  }
  return out;
}

// ---- CM MADs -------------------------------------------------------------------------------

std::vector<std::pair<std::string, std::vector<uint8_t>>> mad_seeds() {
  using namespace sim::cm;
  std::vector<std::pair<std::string, std::vector<uint8_t>>> out;
  auto add = [&](const char* name, CmBody body, uint64_t tid) {
    CmMad mad;
    mad.header.tid = tid;
    mad.body = std::move(body);
    const MadBytes b = encode_cm_mad(mad);
    out.emplace_back(name, std::vector<uint8_t>(b.begin(), b.end()));
  };
  ReqMsg req;
  req.local_comm_id = 0x11223344;
  req.service_id = service_id_for_port(7391);
  req.local_ca_guid = 0x0002c90300a1b2c3ull;
  req.local_qpn = 0x000101;
  req.responder_resources = 4;
  req.initiator_depth = 4;
  req.remote_cm_response_timeout = 20;
  req.starting_psn = 0x123456;
  req.local_cm_response_timeout = 20;
  req.retry_count = 7;
  req.path_mtu = 3;
  req.rnr_retry_count = 7;
  req.max_cm_retries = 15;
  req.primary_local_gid = ip_gid(hw::IpAddress::v4(0x7f000101));
  req.primary_remote_gid = ip_gid(hw::IpAddress::v4(0x7f000102));
  req.primary_hop_limit = 64;
  req.primary_local_ack_timeout = 14;
  CmaHeader cma;
  cma.src_port = 40000;
  cma.src = hw::IpAddress::v4(0x7f000101);
  cma.dst = hw::IpAddress::v4(0x7f000102);
  encode_cma_header(cma, req.private_data.data());
  add("req", req, 1);
  // The same over IPv6: the path's GIDs and the cma_hdr (IP version 6) name IPv6 addresses.
  ReqMsg req6 = req;
  cma.src = hw::IpAddress::parse("fd00::101").value();
  cma.dst = hw::IpAddress::parse("fd00::102").value();
  req6.primary_local_gid = ip_gid(cma.src);
  req6.primary_remote_gid = ip_gid(cma.dst);
  encode_cma_header(cma, req6.private_data.data());
  add("req_ipv6", req6, 1);

  RepMsg rep;
  rep.local_comm_id = 0x55667788;
  rep.remote_comm_id = req.local_comm_id;
  rep.local_qpn = 0x000102;
  rep.starting_psn = 0x654321;
  rep.responder_resources = 4;
  rep.initiator_depth = 4;
  rep.target_ack_delay = 3;
  rep.rnr_retry_count = 7;
  rep.local_ca_guid = 0x0002c90300d4e5f6ull;
  add("rep", rep, 1);

  RtuMsg rtu;
  rtu.local_comm_id = req.local_comm_id;
  rtu.remote_comm_id = rep.local_comm_id;
  add("rtu", rtu, 1);

  RejMsg rej;
  rej.local_comm_id = rep.local_comm_id;
  rej.remote_comm_id = req.local_comm_id;
  rej.reason = 28;  // consumer defined
  rej.reject_info_length = 4;
  rej.ari[0] = 1;
  add("rej", rej, 1);

  MraMsg mra;
  mra.local_comm_id = rep.local_comm_id;
  mra.remote_comm_id = req.local_comm_id;
  mra.service_timeout = 18;
  add("mra", mra, 1);

  DreqMsg dreq;
  dreq.local_comm_id = req.local_comm_id;
  dreq.remote_comm_id = rep.local_comm_id;
  dreq.remote_qpn = 0x000102;
  add("dreq", dreq, 2);

  DrepMsg drep;
  drep.local_comm_id = rep.local_comm_id;
  drep.remote_comm_id = req.local_comm_id;
  add("drep", drep, 2);

  SidrReqMsg sidr_req;
  sidr_req.request_id = 0x55667788;
  sidr_req.service_id = udp_service_id_for_port(7174);
  encode_cma_header(cma, sidr_req.private_data.data());
  add("sidr-req", sidr_req, 3);

  SidrRepMsg sidr_rep;
  sidr_rep.request_id = sidr_req.request_id;
  sidr_rep.qpn = 0x000103;
  sidr_rep.service_id = sidr_req.service_id;
  sidr_rep.qkey = 0x01234567;
  add("sidr-rep", sidr_rep, 3);

  // Malformed: short, and a MAD of another class.
  out.emplace_back("short", std::vector<uint8_t>(out[0].second.begin(), out[0].second.begin() + 100));
  auto other = out[0].second;
  other[1] = 0x01;  // subnet management
  out.emplace_back("other-class", other);
  return out;
}

// ---- CQ rings ------------------------------------------------------------------------------

std::vector<std::pair<std::string, std::vector<uint8_t>>> cqe_seeds() {
  std::vector<std::pair<std::string, std::vector<uint8_t>>> out;
  auto ring_seed = [](uint32_t cqe_size, uint32_t log_cnt, uint32_t first_pi,
                      const std::vector<wqe::CqeInit>& cqes) {
    const uint32_t cnt = 1u << log_cnt;
    std::vector<uint8_t> ring(size_t{cqe_size} * cnt);
    const wqe::CqRing r{ring.data(), cnt, cqe_size};
    wqe::init_cq_ring(r);
    for (size_t i = 0; i < cqes.size(); ++i) wqe::write_cqe(r, first_pi + uint32_t(i), cqes[i]);
    std::vector<uint8_t> bytes{static_cast<uint8_t>((cqe_size == 128 ? 1 : 0) | (log_cnt << 1))};
    bytes.insert(bytes.end(), ring.begin(), ring.end());
    return bytes;
  };
  wqe::CqeInit send_ok;
  send_ok.cqe_opcode = MLX5_CQE_REQ;
  send_ok.send_opcode = MLX5_OPCODE_SEND;
  send_ok.qpn = kHarnessQpn;
  send_ok.wqe_counter = 3;
  wqe::CqeInit read_ok = send_ok;
  read_ok.send_opcode = MLX5_OPCODE_RDMA_READ;
  read_ok.byte_cnt = 4096;
  wqe::CqeInit recv_imm;
  recv_imm.cqe_opcode = MLX5_CQE_RESP_SEND_IMM;
  recv_imm.qpn = kHarnessQpn;
  recv_imm.src_qpn = 0x101;
  recv_imm.byte_cnt = 48;
  recv_imm.imm = 0xfeedbeef;
  recv_imm.solicited = true;
  wqe::CqeInit write_imm = recv_imm;
  write_imm.cqe_opcode = MLX5_CQE_RESP_WR_IMM;
  wqe::CqeInit req_err;
  req_err.cqe_opcode = MLX5_CQE_REQ_ERR;
  req_err.send_opcode = MLX5_OPCODE_RDMA_WRITE;
  req_err.syndrome = MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR;
  req_err.vendor_syndrome = 0x88;
  req_err.qpn = kHarnessQpn;
  wqe::CqeInit flush = req_err;
  flush.syndrome = MLX5_CQE_SYNDROME_WR_FLUSH_ERR;
  wqe::CqeInit resp_err = req_err;
  resp_err.cqe_opcode = MLX5_CQE_RESP_ERR;
  resp_err.syndrome = MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR;

  out.emplace_back("ring64-mixed", ring_seed(64, 3, 0, {send_ok, read_ok, recv_imm, write_imm,
                                                        req_err, flush, resp_err}));
  out.emplace_back("ring128-requests", ring_seed(128, 2, 0, {send_ok, read_ok, req_err}));
  // Wrapped into the second lap: the owner bit flips.
  out.emplace_back("ring64-second-lap", ring_seed(64, 2, 2, {send_ok, recv_imm, flush, read_ok}));
  out.emplace_back("ring64-empty", ring_seed(64, 1, 0, {}));
  // UD receives over RoCE v2: the GRH flag and the packet type (UDP, IPv4) in flags_rqpn.
  wqe::CqeInit ud_recv = recv_imm;
  ud_recv.cqe_opcode = MLX5_CQE_RESP_SEND;
  ud_recv.imm = 0;
  ud_recv.solicited = false;
  ud_recv.byte_cnt = 40 + 64;
  ud_recv.grh = true;
  ud_recv.roce_pkt_type = 0xa;
  out.emplace_back("ring64-ud-grh", ring_seed(64, 2, 0, {ud_recv, send_ok, ud_recv}));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  const fs::path dir = argv[1];
  const std::pair<const char*, std::vector<std::pair<std::string, std::vector<uint8_t>>>> sets[] =
      {{"sq_executor", sq_seeds()},
       {"receive_path", receive_seeds()},
       {"cm_mad", mad_seeds()},
       {"cqe_decoder", cqe_seeds()}};
  for (const auto& [target, seeds] : sets) {
    std::error_code ec;
    fs::create_directories(dir / target, ec);
    for (const auto& [name, bytes] : seeds) {
      const fs::path path = dir / target / ("seed-" + name);
      if (!write_file(path, bytes)) {
        std::fprintf(stderr, "fuzz-make-seeds: cannot write %s\n", path.c_str());
        return 1;
      }
    }
    std::printf("%s: %zu seeds\n", target, seeds.size());
  }
  return 0;
}
