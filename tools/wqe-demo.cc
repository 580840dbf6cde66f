// SPDX-License-Identifier: BSD-3-Clause
// wqe-demo: encodes a few mlx5 send WQEs and CQEs with rnicdv's wqe layer and prints them byte
// for byte beside what the device-side decoder reads back. No device, queue pair or doorbell
// is involved; it shows the formats, nothing more.
#include <infiniband/verbs.h>

#include <array>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "rnicdv/status.h"
#include "rnicdv/wqe/cqe.h"
#include "rnicdv/wqe/decode.h"
#include "rnicdv/wqe/send_wqe.h"

namespace {

using namespace rnicdv;

constexpr uint32_t kQpn = 0x000123;
constexpr uint32_t kRingBbs = 8;

bool is_rdma(uint8_t opcode) {
  return opcode == MLX5_OPCODE_RDMA_WRITE || opcode == MLX5_OPCODE_RDMA_WRITE_IMM ||
         opcode == MLX5_OPCODE_RDMA_READ;
}
bool is_atomic(uint8_t opcode) {
  return opcode == MLX5_OPCODE_ATOMIC_CS || opcode == MLX5_OPCODE_ATOMIC_FA;
}

// What each 16-byte unit of a decoded WQE holds.
std::array<const char*, wqe::kMaxWqeDs> unit_labels(const wqe::DecodedSendWqe& d) {
  std::array<const char*, wqe::kMaxWqeDs> labels;
  labels.fill("data");
  labels[0] = "ctrl";
  uint32_t unit = 1;
  if (is_rdma(d.opcode) || is_atomic(d.opcode)) labels[unit++] = "raddr";
  if (is_atomic(d.opcode)) labels[unit++] = "atomic";
  for (uint32_t i = 0; i < d.num_entries && unit < d.ds; ++i) {
    if (!d.entries[i].is_inline) {
      labels[unit++] = "data";
      continue;
    }
    const uint32_t units = (d.entries[i].length + 4 + 15) / 16;
    labels[unit++] = "inline header + data";
    for (uint32_t k = 1; k < units && unit < d.ds; ++k) labels[unit++] = "inline data";
  }
  return labels;
}

void dump_wqe(wqe::SqRing ring, uint32_t pi, const wqe::DecodedSendWqe& d) {
  const auto labels = unit_labels(d);
  const size_t ring_bytes = size_t{ring.bb_count} * wqe::kBbBytes;
  size_t offset = size_t{pi & (ring.bb_count - 1)} * wqe::kBbBytes;
  for (uint32_t unit = 0; unit < d.ds; ++unit) {
    std::printf("    ring+0x%03zx:", offset);
    for (int i = 0; i < 16; ++i) std::printf(" %02x", ring.buf[offset + i]);
    std::printf("   %s%s\n", labels[unit], offset + 16 == ring_bytes ? "  (ring end)" : "");
    offset = (offset + 16) % ring_bytes;
  }
}

void print_decoded(const wqe::DecodedSendWqe& d, const uint8_t* inline_buf) {
  std::printf("    decoded: %s, WQE index %u, QPN 0x%06x, DS %u (%u BB%s)%s%s%s\n",
              wqe::send_opcode_name(d.opcode), d.wqe_index, d.qpn, d.ds, d.bbs,
              d.bbs == 1 ? "" : "s", d.signaled() ? ", signaled" : "",
              d.solicited() ? ", solicited" : "", d.fenced() ? ", fenced" : "");
  if (d.opcode == MLX5_OPCODE_SEND_IMM || d.opcode == MLX5_OPCODE_RDMA_WRITE_IMM)
    std::printf("             immediate 0x%08x\n", d.imm);
  if (is_rdma(d.opcode) || is_atomic(d.opcode))
    std::printf("             remote address 0x%016" PRIx64 ", rkey 0x%08x\n", d.remote_addr,
                d.rkey);
  if (d.opcode == MLX5_OPCODE_ATOMIC_FA)
    std::printf("             add 0x%016" PRIx64 "\n", d.swap_add);
  if (d.opcode == MLX5_OPCODE_ATOMIC_CS)
    std::printf("             swap 0x%016" PRIx64 ", compare 0x%016" PRIx64 "\n", d.swap_add,
                d.compare);
  for (uint32_t i = 0; i < d.num_entries; ++i) {
    const wqe::GatherEntry& e = d.entries[i];
    if (e.is_inline) {
      std::printf("             inline %u bytes: \"%.*s\"\n", e.length, static_cast<int>(e.length),
                  reinterpret_cast<const char*>(inline_buf + e.addr));
    } else {
      std::printf("             gather %u: addr 0x%016" PRIx64 ", %u bytes, lkey 0x%08x\n", i,
                  e.addr, e.length, e.lkey);
    }
  }
  std::printf("             message length %" PRIu64 " bytes\n", d.total_length);
}

// Encodes, dumps and decodes one WQE; returns the next producer index.
bool show_wqe(const char* title, wqe::SqRing ring, uint32_t* pi, const SendWr& wr,
              const wqe::SqLimits& limits) {
  std::printf("\n%s, at producer index %u (BB %u)\n", title, *pi, *pi & (ring.bb_count - 1));
  wqe::EncodedWqe enc;
  const Errc err = wqe::encode_send_wqe(ring, *pi, ring.bb_count, kQpn, wr, limits, 0, &enc);
  if (err != Errc::ok) {
    std::printf("    encode failed: %s\n", errc_name(err));
    return false;
  }
  auto decoded = std::make_unique<wqe::DecodedSendWqe>();
  std::vector<uint8_t> inline_buf(wqe::kMaxWqeDs * wqe::kDsBytes);
  const wqe::WqeDefect defect = wqe::decode_send_wqe(
      ring, *pi, kQpn, decoded.get(), inline_buf.data(), static_cast<uint32_t>(inline_buf.size()));
  if (defect != wqe::WqeDefect::none) {
    std::printf("    decode failed: %s\n", wqe::wqe_defect_name(defect));
    return false;
  }
  dump_wqe(ring, *pi, *decoded);
  print_decoded(*decoded, inline_buf.data());
  *pi += enc.bbs;
  return true;
}

const char* wc_opcode_name(uint8_t opcode) {
  switch (opcode) {
    case IBV_WC_SEND:
      return "IBV_WC_SEND";
    case IBV_WC_RDMA_WRITE:
      return "IBV_WC_RDMA_WRITE";
    case IBV_WC_RDMA_READ:
      return "IBV_WC_RDMA_READ";
    case IBV_WC_COMP_SWAP:
      return "IBV_WC_COMP_SWAP";
    case IBV_WC_FETCH_ADD:
      return "IBV_WC_FETCH_ADD";
    case IBV_WC_RECV:
      return "IBV_WC_RECV";
    case IBV_WC_RECV_RDMA_WITH_IMM:
      return "IBV_WC_RECV_RDMA_WITH_IMM";
    default:
      return "other";
  }
}

void show_cqe(const char* title, wqe::CqRing ring, uint32_t index, const wqe::CqeInit& init) {
  std::printf("\n%s, CQ index %u\n", title, index);
  wqe::write_cqe(ring, index, init);
  const mlx5_cqe64* cqe = wqe::cqe_for_sw(ring, index);
  if (cqe == nullptr) {
    std::printf("    not owned by software (unexpected)\n");
    return;
  }
  const auto* bytes = reinterpret_cast<const uint8_t*>(cqe);
  for (int row = 0; row < 64; row += 16) {
    std::printf("    +0x%02x:", row);
    for (int i = 0; i < 16; ++i) std::printf(" %02x", bytes[row + i]);
    std::printf("\n");
  }
  wqe::CqeFields fields;
  wqe::decode_cqe(cqe, &fields);
  Completion wc;
  wqe::cqe_to_completion(cqe, &wc);
  std::printf("    CQE opcode %s, owner bit %u, QPN 0x%06x, WQE counter %u\n",
              wqe::cqe_opcode_name(fields.cqe_opcode), cqe->op_own & 1, fields.qpn,
              fields.wqe_counter);
  if (fields.cqe_opcode == MLX5_CQE_REQ_ERR || fields.cqe_opcode == MLX5_CQE_RESP_ERR)
    std::printf("    syndrome 0x%02x %s, vendor syndrome 0x%02x\n", fields.syndrome,
                wqe::cqe_syndrome_name(fields.syndrome), fields.vendor_syndrome);
  std::printf("    completion: status \"%s\", opcode %s, byte_len %u\n",
              ibv_wc_status_str(static_cast<ibv_wc_status>(wc.status)), wc_opcode_name(wc.opcode),
              wc.byte_len);
}

}  // namespace

int main() {
  std::printf(
      "wqe-demo: mlx5 send WQEs and CQEs as rnicdv encodes them, decoded back by the\n"
      "device-side decoder. Formats only: no device, queue pair or doorbell is involved.\n"
      "Send queue: %u basic blocks of 64 bytes, QPN 0x%06x.\n",
      kRingBbs, kQpn);

  std::vector<uint8_t> sq_mem(size_t{kRingBbs} * wqe::kBbBytes, 0);
  const wqe::SqRing ring{sq_mem.data(), kRingBbs};
  const wqe::SqLimits limits{/*max_sge=*/4, /*max_inline=*/128};
  uint32_t pi = 0;

  const Sge write_sges[] = {{0x00007f0000010000, 4096, 0x00001a2b},
                            {0x00007f0000020000, 512, 0x00001a2b}};
  SendWr write;
  write.opcode = WrOpcode::rdma_write;
  write.flags = send_flags::signaled;
  write.remote_addr = 0x00007f5500000000;
  write.rkey = 0x00003c4d;
  write.sg_list = write_sges;
  write.num_sge = 2;
  if (!show_wqe("RDMA WRITE of two SGEs", ring, &pi, write, limits)) return 1;

  // Move to the ring's last BB so the next WQE wraps to the start.
  pi = kRingBbs - 1;
  static const char kGreeting[] = "logon 35=A 49=CLIENT 56=EXCHANGE 98=0 108=30 141=Y";
  const Sge inline_sge{reinterpret_cast<uintptr_t>(kGreeting), sizeof kGreeting - 1, 0};
  SendWr send;
  send.opcode = WrOpcode::send;
  send.flags = send_flags::signaled | send_flags::inline_data;
  send.sg_list = &inline_sge;
  send.num_sge = 1;
  if (!show_wqe("Inline SEND that wraps at the ring's end", ring, &pi, send, limits)) return 1;

  const Sge result{0x00007f0000030000, 8, 0x00001a2b};
  SendWr fetch_add;
  fetch_add.opcode = WrOpcode::atomic_fetch_add;
  fetch_add.flags = send_flags::signaled;
  fetch_add.remote_addr = 0x00007f5500001000;
  fetch_add.rkey = 0x00003c4d;
  fetch_add.compare_add = 1;
  fetch_add.sg_list = &result;
  fetch_add.num_sge = 1;
  const uint32_t fetch_add_pi = pi;
  if (!show_wqe("Atomic FETCH_AND_ADD", ring, &pi, fetch_add, limits)) return 1;

  std::vector<uint8_t> cq_mem(4 * 64);
  const wqe::CqRing cq{cq_mem.data(), 4, 64};
  wqe::init_cq_ring(cq);
  wqe::CqeInit done;
  done.cqe_opcode = MLX5_CQE_REQ;
  done.send_opcode = MLX5_OPCODE_RDMA_WRITE;
  done.qpn = kQpn;
  done.wqe_counter = 0;
  show_cqe("Completion of the RDMA WRITE", cq, 0, done);

  wqe::CqeInit failed;
  failed.cqe_opcode = MLX5_CQE_REQ_ERR;
  failed.send_opcode = MLX5_OPCODE_ATOMIC_FA;
  failed.qpn = kQpn;
  failed.wqe_counter = static_cast<uint16_t>(fetch_add_pi);
  failed.syndrome = MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR;
  failed.vendor_syndrome = 0x88;
  show_cqe("Error completion of the FETCH_AND_ADD", cq, 1, failed);
  return 0;
}
