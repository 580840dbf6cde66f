// SPDX-License-Identifier: BSD-3-Clause
// rnicperf: perftest's eight benchmarks on rnicdv, on a real ConnectX or the simulated HCA.
//
//   rnicperf write_lat                 server: waits for a client on TCP port 18515
//   rnicperf write_lat 10.0.0.1        client
//   rnicperf write_bw --loopback       both ends in this process
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "first_reply.h"
#include "options.h"
#include "plot_runner.h"
#include "rnicdv/device.h"
#include "rnicdv/sim/sim.h"
#include "session.h"

namespace {

using rnicdv::Status;
using rnicperf::Options;

// --run_infinitely: SIGINT or SIGTERM ends the run cleanly (the loop stops posting, drains
// its completions, and the peer is told), as perftest's SIGINT handler does. Installed on a
// side that runs a loop (the posting side, a send_bw receiver, either side of -b, loopback),
// once: a second signal has its default effect, so a run that does not reach its loop can
// still be interrupted.
std::atomic<bool> g_stop{false};
static_assert(std::atomic<bool>::is_always_lock_free);

extern "C" void on_stop_signal(int) { g_stop.store(true, std::memory_order_relaxed); }

void install_stop_handlers() {
  struct sigaction sa{};
  sa.sa_handler = on_stop_signal;
  sa.sa_flags = SA_RESETHAND;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

int run(const Options& o, const std::string& device);

int fail(const Status& st) {
  std::fprintf(stderr, "rnicperf: %s\n", st.message().c_str());
  return 1;
}

bool is_sim_name(const std::string& name, unsigned* index) {
  if (name.size() <= 3 || name.compare(0, 3, "sim") != 0) return false;
  unsigned v = 0;
  for (size_t i = 3; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return false;
    v = v * 10 + static_cast<unsigned>(name[i] - '0');
  }
  *index = v;
  return true;
}

// A threaded fabric on the wire --wire names.
rnicdv::Result<std::shared_ptr<rnicdv::sim::Fabric>> make_fabric(const std::string& wire,
                                                                 const std::string& dpdk_args) {
  rnicdv::sim::FabricConfig config;
  config.mode = rnicdv::sim::ExecMode::threaded;
  config.wire = wire == "dpdk"  ? rnicdv::sim::WireKind::dpdk
                : wire == "udp" ? rnicdv::sim::WireKind::udp
                                : rnicdv::sim::WireKind::inproc;
  config.dpdk_args = dpdk_args;
  return rnicdv::sim::Fabric::create(config);
}

// Both ends in one process: two simulated HCAs on a private in-process fabric (or on the
// default fabric when $RNICDV_SIM_WIRE names one), or two QPs on one real device.
int run_loopback(const Options& o, const std::string& device) {
  auto channels = rnicperf::OobChannel::pair();
  if (!channels) return fail(channels.status());
  rnicperf::SessionSetup server, client;
  server.options = client.options = o;
  server.client = false;
  server.quiet = true;
  client.client = true;
  server.channel = std::move(channels->first);
  client.channel = std::move(channels->second);
  server.device_name = client.device_name = device;
  server.stop = client.stop = &g_stop;
  unsigned index = 0;
  if (is_sim_name(device, &index)) {
    client.device_name = "sim" + std::to_string(index + 1);
    if (!o.wire.empty() || !std::getenv("RNICDV_SIM_WIRE")) {
      auto fabric = make_fabric(o.wire.empty() ? "inproc" : o.wire, o.dpdk_args);
      if (!fabric) return fail(fabric.status());
      server.fabric = client.fabric = fabric.value();
    }
  } else if (!o.wire.empty()) {
    return fail(Status::error(rnicdv::Errc::invalid_argument,
                              "--wire %s: %s is not a simulated HCA (simN)", o.wire.c_str(),
                              device.c_str()));
  }
  // When both ends fail, one end's failure is often the other's cause: an end that cannot go
  // on closes the channel, and its peer then sees it closed (Errc::disconnected). The cause
  // is the one reported; between two causes, the client's, as a two-process run reports it.
  Status server_status;
  std::thread server_thread([&] { server_status = rnicperf::run_session(server); });
  Status client_status = rnicperf::run_session(client);
  server_thread.join();
  const Status server_failure =
      server_status ? server_status : Status(server_status).prepend("loopback server");
  auto consequence = [](const Status& st) { return st.code() == rnicdv::Errc::disconnected; };
  if (!client_status && !server_status && consequence(client_status) &&
      !consequence(server_status))
    return fail(server_failure);
  if (!client_status) return fail(client_status);
  if (!server_status) return fail(server_failure);
  return client.below_limit ? 1 : 0;  // the printed report's verdict (-w, -y)
}

// --plot / --plot-compare: draws `files` to `out`. The script's own failure is already one
// line on stderr.
int draw(const std::string& out, const std::vector<std::string>& files) {
  auto script = rnicperf::find_plot_script(RNICPERF_PLOT_SCRIPT);
  if (!script) return fail(script.status());
  auto status = rnicperf::run_plot_script(script.value(), out, files);
  if (!status) return fail(status.status());
  return status.value() == 0 ? 0 : 1;
}

// The run, then its plot: --plot draws the run's JSON report, which goes to --out_json_file
// when given and otherwise to a temporary file removed afterwards.
int run_and_plot(Options& o, const std::string& device);

}  // namespace

int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);
  auto parsed = rnicperf::parse_options(argc, argv);
  if (!parsed) return fail(parsed.status());
  Options& o = parsed.value();
  if (o.help) {
    std::fputs(rnicperf::usage_text().c_str(), stdout);
    return 0;
  }
  if (o.version) {
    std::printf("rnicperf %s (perftest-compatible; rnicdv)\n", RNICPERF_VERSION);
    return 0;
  }
  if (!o.plot_compare.empty()) return draw(o.plot, o.plot_compare);
  // A wire is the simulated HCA's: --wire without -d means sim0.
  const std::string device = !o.device.empty() ? o.device
                             : o.wire.empty()  ? rnicdv::Device::default_name()
                                               : std::string("sim0");
  if (o.first_reply > 0) {
    auto r = rnicperf::run_first_reply(o);
    if (!r) return fail(r.status());
    if (Status st = rnicperf::report_first_reply(o, r.value()); !st) return fail(st);
    return 0;
  }
  // The passive end of an endless write, read or atomic run (the server; the client with
  // --reversed) waits on its control channel for the sender's end, and a signal there has its
  // default effect, as in perftest. A send_bw receiver and both ends of -b run loops.
  const bool runs_loop = o.loopback || o.posts_operations(!o.server.empty()) ||
                         o.bidirectional || o.test.verb == rnicperf::Verb::send;
  if (o.run_infinitely && runs_loop) install_stop_handlers();
  if (!o.plot.empty()) return run_and_plot(o, device);
  return run(o, device);
}

namespace {

int run(const Options& o, const std::string& device) {
  if (o.loopback) return run_loopback(o, device);

  rnicperf::SessionSetup setup;
  setup.options = o;
  setup.client = !o.server.empty();
  setup.device_name = device;
  setup.stop = &g_stop;
  // --wire dpdk (or udp): this process's own fabric, on which the device is created.
  unsigned index = 0;
  if (!o.wire.empty() && o.wire != "inproc") {
    if (!is_sim_name(device, &index))
      return fail(Status::error(rnicdv::Errc::invalid_argument,
                                "--wire %s: %s is not a simulated HCA (simN)", o.wire.c_str(),
                                device.c_str()));
    auto fabric = make_fabric(o.wire, o.dpdk_args);
    if (!fabric) return fail(fabric.status());
    setup.fabric = fabric.value();
  }
  Status st = rnicperf::run_session(setup);
  if (!st) return fail(st);
  return setup.below_limit ? 1 : 0;  // perftest's verifier (-w, -y): its line is printed
}

int run_and_plot(Options& o, const std::string& device) {
  // Found before the run, so that a missing script does not cost a run.
  auto script = rnicperf::find_plot_script(RNICPERF_PLOT_SCRIPT);
  if (!script) return fail(script.status());
  std::string temporary;
  if (!o.out_json) {
    const char* dir = std::getenv("TMPDIR");
    std::string name = std::string(dir && *dir ? dir : "/tmp") + "/rnicperf-plot-XXXXXX.json";
    int fd = ::mkstemps(name.data(), 5);
    if (fd < 0)
      return fail(Status::error(rnicdv::Errc::io_error, "--plot: cannot create %s: %s",
                                name.c_str(), std::strerror(errno)));
    ::close(fd);
    temporary = name;
    o.out_json = true;
    o.json_path = name;
  }
  int rc = run(o, device);
  if (rc == 0) {
    auto status = rnicperf::run_plot_script(script.value(), o.plot, {o.json_path});
    if (!status)
      rc = fail(status.status());
    else if (status.value() != 0)
      rc = 1;
  }
  if (!temporary.empty()) ::unlink(temporary.c_str());
  return rc;
}

}  // namespace
