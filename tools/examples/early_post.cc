// SPDX-License-Identifier: BSD-3-Clause
// Early posting in RTR, step by step, on two simulated HCAs in one process.
//
// The passive side ("server") sits in RTR, as it does between sending a CM REP and receiving
// the RTU. It posts its first replies there. The driver builds the WQEs but rings no
// doorbell; the simulator's counters show the device saw nothing. Moving to RTS releases the
// whole batch with one doorbell.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "rnicdv/rnicdv.h"
#include "rnicdv/sim/sim.h"

using namespace rnicdv;

namespace {

template <class T>
T must(Result<T> r, const char* what) {
  if (!r) {
    std::fprintf(stderr, "%s: %s\n", what, r.status().message().c_str());
    std::exit(1);
  }
  return std::move(r).value();
}

void must(const Status& s, const char* what) {
  if (!s) {
    std::fprintf(stderr, "%s: %s\n", what, s.message().c_str());
    std::exit(1);
  }
}

void show(const char* label, sim::Device& dev, uint32_t qpn) {
  const sim::DeviceCounters c = dev.counters();
  const sim::QpSnapshot s = dev.qp_snapshot(qpn).value();
  std::printf(
      "   %-28s state %-4s  SQ DBR %3u  UAR doorbells %llu (BlueFlame %llu)  "
      "WQEs executed %llu\n",
      label, hw::qp_state_name(s.state), s.sq_dbr, static_cast<unsigned long long>(c.uar_doorbells),
      static_cast<unsigned long long>(c.bf_writes),
      static_cast<unsigned long long>(s.wqes_executed));
}

}  // namespace

int main() {
  std::printf("1. Two simulated HCAs on one in-process fabric (deterministic mode)\n");
  sim::FabricConfig fc;
  fc.mode = sim::ExecMode::deterministic;
  fc.wire = sim::WireKind::inproc;
  auto fabric = must(sim::Fabric::create(fc), "fabric");
  auto client_hw = must(fabric->add_device(), "add client");
  auto server_hw = must(fabric->add_device(), "add server");
  Device client = must(Device::wrap(client_hw), "client");
  Device server = must(Device::wrap(server_hw), "server");
  std::printf("   client %s, server %s (profile %s)\n", client.name().c_str(),
              server.name().c_str(), sim::profile_name(server.info().profile).c_str());

  std::printf("2. PDs, CQs, memory regions and RC queue pairs\n");
  ProtectionDomain cpd = must(client.alloc_pd(), "client pd");
  ProtectionDomain spd = must(server.alloc_pd(), "server pd");
  CompletionQueue ccq = must(client.create_cq(64), "client cq");
  CompletionQueue scq = must(server.create_cq(64), "server cq");
  std::vector<uint8_t> cbuf(4096), sbuf(4096);
  const uint32_t all = hw::access::local_write | hw::access::remote_write | hw::access::remote_read;
  MemoryRegion cmr = must(cpd.reg_mr(cbuf.data(), cbuf.size(), all), "client mr");
  MemoryRegion smr = must(spd.reg_mr(sbuf.data(), sbuf.size(), all), "server mr");
  QpConfig config;
  config.threading = Threading::single;
  QueuePair cqp = must(client.create_qp(cpd, ccq, ccq, config), "client qp");
  QueuePair sqp = must(server.create_qp(spd, scq, scq, config), "server qp");
  std::printf("   server QP %#x: early posting %s, doorbell %s\n", sqp.qpn(),
              early_post_name(sqp.early_post()), doorbell::doorbell_mode_name(sqp.doorbell_mode()));

  std::printf("3. Both QPs to INIT, then RTR; the client goes on to RTS\n");
  must(cqp.to_init(), "client INIT");
  must(sqp.to_init(), "server INIT");
  must(cqp.to_rtr(sqp.local_endpoint(200), hw::Mtu::mtu1024), "client RTR");
  must(sqp.to_rtr(cqp.local_endpoint(100), hw::Mtu::mtu1024), "server RTR");
  must(cqp.to_rts(100), "client RTS");
  show("server before posting:", *server_hw, sqp.qpn());

  std::printf("4. The server posts 4 RDMA WRITEs and 1 SEND while still in RTR\n");
  const char* messages[] = {"logon", "heartbeat", "subscribe", "order", "ready"};
  std::vector<Sge> sges;
  for (int i = 0; i < 5; ++i) {
    std::strcpy(reinterpret_cast<char*>(sbuf.data() + 64 * i), messages[i]);
    sges.push_back(smr.sge(64 * i, 16));
  }
  const Sge recv_sge = cmr.sge(2048, 64);
  RecvWr recv;
  recv.wr_id = 99;
  recv.sg_list = &recv_sge;
  recv.num_sge = 1;
  if (cqp.post_recv(recv) != Errc::ok) return 1;
  std::vector<SendWr> batch(5);
  for (int i = 0; i < 5; ++i) {
    batch[i].wr_id = i;
    batch[i].sg_list = &sges[i];
    batch[i].num_sge = 1;
    batch[i].opcode = i < 4 ? WrOpcode::rdma_write : WrOpcode::send;
    batch[i].remote_addr = cmr.addr() + 64 * i;
    batch[i].rkey = cmr.rkey();
    batch[i].flags = i == 4 ? send_flags::signaled : 0;  // one CQE for the batch
  }
  const Errc err = sqp.post_send(batch);
  std::printf("   post_send: %s; withheld WRs: %u\n", errc_name(err), sqp.withheld());
  for (int i = 0; i < 50; ++i) fabric->step();  // let both devices run a while
  show("server after posting in RTR:", *server_hw, sqp.qpn());
  std::printf("   client memory at offset 0: \"%s\" (nothing arrived)\n",
              reinterpret_cast<char*>(cbuf.data()));

  std::printf("5. The connection is established: the server moves to RTS\n");
  must(sqp.to_rts(200), "server RTS");
  fabric->step();  // the device notices register writes when its engine runs
  show("server after RTS:", *server_hw, sqp.qpn());

  std::printf("6. Completions\n");
  Completion c[8];
  int got_server = 0, got_client = 0;
  fabric->run_until([&] {
    got_server += scq.poll(c, 8);
    got_client += ccq.poll(c, 8);
    return got_server >= 1 && got_client >= 1;
  });
  show("server when done:", *server_hw, sqp.qpn());
  std::printf("   server completions: %d (the signaled SEND retires all five)\n", got_server);
  std::printf("   client received \"%s\"; writes landed: \"%s\", \"%s\", \"%s\", \"%s\"\n",
              reinterpret_cast<char*>(cbuf.data() + 2048), reinterpret_cast<char*>(cbuf.data()),
              reinterpret_cast<char*>(cbuf.data() + 64), reinterpret_cast<char*>(cbuf.data() + 128),
              reinterpret_cast<char*>(cbuf.data() + 192));
  return 0;
}
