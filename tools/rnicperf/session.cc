// SPDX-License-Identifier: BSD-3-Clause
#include "session.h"
#include "session_impl.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <ctime>
#include <optional>
#include <thread>
#include <vector>

#include "bandwidth_loops.h"
#include "clock.h"
#include "cm_connect.h"
#include "early_post.h"
#include "endpoint.h"
#include "latency_loops.h"
#include "oob_protocol.h"
#include "rdma_cm_channel.h"
#include "report.h"
#include "report_json.h"
#include "reporter.h"
#include "run_context.h"
#include "stats.h"

namespace rnicperf {

using rnicdv::Errc;
using rnicdv::Status;

namespace detail {

// -z: the control channel on a QP of the test's device. In a --loopback run the server end
// tells the client its HCA address over the in-process channel; the client keeps watching it
// while it connects, so that a server that ended stops the client's tries.
Status Session::connect_control_rdma_cm(uint32_t timeout_ms) {
  constexpr size_t kAddressText = 64;
  RdmaCmChannelSetup setup;
  setup.port = o_.port;
  setup.timeout_ms = timeout_ms;
  setup.retry = o_.retry_connect || s_.channel.valid();
  setup.local = o_.bind_source_ip;
  if (s_.client) {
    std::string server = o_.server;
    if (s_.channel.valid()) {
      char text[kAddressText] = {};
      if (Status st = s_.channel.recv_all(text, sizeof text, timeout_ms); !st) {
        s_.channel = OobChannel();
        return st.prepend("-z: the loopback server's address");
      }
      server.assign(text, strnlen(text, sizeof text));
      // The server sends nothing more: the channel turns readable only when it closes.
      setup.give_up = [this] {
        Result<bool> closed = s_.channel.readable(0);
        return !closed || closed.value();
      };
    }
    Result<OobChannel> ch = rdma_cm_connect_channel(
        ep_->device(), server, setup,
        [](const std::string& what) { std::fprintf(stderr, "rnicperf: %s\n", what.c_str()); });
    s_.channel = OobChannel();
    if (!ch) return ch.status();
    oob_ = std::make_unique<OobSession>(std::move(ch.value()), true, timeout_ms);
    return Status::ok();
  }
  Result<OobChannel> ch =
      rdma_cm_accept_channel(ep_->device(), setup, [&](const std::string&) -> Status {
        print(waiting_banner());
        if (!s_.channel.valid()) return Status::ok();
        char text[kAddressText] = {};
        const std::string own = ep_->device().info().gid.ip().to_string();
        std::memcpy(text, own.data(), std::min(own.size(), sizeof text - 1));
        return s_.channel.send_all(text, sizeof text, timeout_ms)
            .prepend("-z: telling the loopback client where to connect");
      });
  s_.channel = OobChannel();  // a loopback client still trying stops now
  if (!ch) return ch.status();
  oob_ = std::make_unique<OobSession>(std::move(ch.value()), false, timeout_ms);
  return Status::ok();
}

Status Session::check_ports() const {
  const rnicdv::hw::DeviceInfo& info = ep_->device().info();
  const uint32_t ports = static_cast<uint32_t>(std::max<size_t>(info.ports.size(), 1));
  const std::string has = ports == 1   ? std::string("1 port (port 1)")
                          : ports == 2 ? std::string("2 ports (ports 1 and 2)")
                                       : std::to_string(ports) + " ports";
  if (o_.ib_port > ports)
    return Status::error(Errc::invalid_argument,
                         "-i %u: Unable to query port %u attributes: %s has %s", o_.ib_port,
                         o_.ib_port, s_.device_name.c_str(), has.c_str());
  if (o_.dual_port && kSecondPort > ports)
    return Status::error(
        Errc::invalid_argument,
        "-O: Unable to query port %u attributes: %s has %s, and dual-port mode "
        "puts the second half of the QPs on port %u%s",
        kSecondPort, s_.device_name.c_str(), has.c_str(), kSecondPort,
        info.kind == "sim" ? " (a simulated HCA has two with RNICDV_SIM_PORTS=2)" : "");
  return Status::ok();
}

Status Session::connect_control() {
  const uint32_t timeout_ms = o_.timeout_s * 1000u;
  if (o_.com_rdma_cm) return connect_control_rdma_cm(timeout_ms);
  const OobAddressing addressing{o_.ipv6_addr ? AF_INET6 : AF_UNSPEC, o_.bind_source_ip};
  if (s_.channel.valid()) {
    oob_ = std::make_unique<OobSession>(std::move(s_.channel), s_.client, timeout_ms);
    return Status::ok();
  }
  if (s_.client) {
    RNICDV_ASSIGN_OR_RETURN(
        OobChannel ch, OobChannel::connect(o_.server, o_.port, timeout_ms, o_.retry_connect,
                                           [](const std::string& what) {
                                             std::fprintf(stderr, "rnicperf: %s\n", what.c_str());
                                           },
                                           addressing));
    oob_ = std::make_unique<OobSession>(std::move(ch), true, timeout_ms);
    return Status::ok();
  }
  RNICDV_ASSIGN_OR_RETURN(OobListener listener, OobListener::listen(o_.port, addressing));
  print(waiting_banner());
  RNICDV_ASSIGN_OR_RETURN(OobChannel ch, listener.accept(timeout_ms));
  oob_ = std::make_unique<OobSession>(std::move(ch), false, timeout_ms);
  return Status::ok();
}

Status Session::run() {
  if (o_.report_cycles) {
    // perftest's cycles are its get_cycles(), the TSC: rnicperf's ticks are that only when
    // the clock is the TSC (they are nanoseconds otherwise).
    if (clock_.source() != Clock::Source::tsc) {
      s_.channel = OobChannel();  // a loopback peer waiting for the hello stops now
      return Status::error(Errc::invalid_argument,
                           "-C reports TSC cycles, and this run's clock is %s (no invariant "
                           "TSC, or RNICPERF_CLOCK=monotonic): use usec (no -C)",
                           clock_.description());
    }
    json_.set_latency_unit("cycles");
  }
  if (!s_.quiet && !o_.cpu_freq_f) {
    std::string warning = cpu_frequency_warning(read_cpuinfo());
    if (!warning.empty()) std::fprintf(stderr, "%s\n", warning.c_str());
  }
  unit_ = o_.report_gbits ? BwUnit::gbit_per_sec : BwUnit::mib_per_sec;
  {
    // The report's date (test_info's Date): when the run started, in UTC.
    char date[40] = "";
    std::time_t now = std::time(nullptr);
    std::tm utc{};
    if (gmtime_r(&now, &utc) && std::strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S UTC", &utc))
      json_.set_date(date);
  }

  EndpointConfig config;
  config.device_name = s_.device_name;
  config.fabric = s_.fabric;
  config.dpdk_memory = o_.dpdk_mem;
  // A simulated HCA this process makes on its own fabric (--loopback, --wire) has the ports
  // the run uses: two with -O or -i 2.
  if (s_.fabric && o_.highest_port() > 1) config.sim_ports = 2;
  auto ep = TestEndpoint::open(config);
  if (!ep) {
    // A loopback peer waits on the channel for the hello: closing it ends that wait now.
    s_.channel = OobChannel();
    return ep.status();
  }
  ep_ = std::move(ep.value());
  if (Status st = check_ports(); !st) {
    s_.channel = OobChannel();  // a loopback peer waiting for the hello stops now
    return st;
  }

  if (!o_.counters.empty()) {
    // perftest reads them first when it sets up its resources, and fails without them.
    if (Status st = read_counters(&counter_values_); !st) {
      s_.channel = OobChannel();
      return st.prepend("-W: Unable to access performance counters");
    }
  }

  RNICDV_TRY(connect_control());
  RNICDV_ASSIGN_OR_RETURN(const PeerKind peer, oob_->hello());
  if (peer == PeerKind::perftest) return run_with_perftest();
  TestParams remote;
  uint32_t mtu = 0;
  if (Status st = oob_->negotiate(params_from_options(o_, ep_->mtu_bytes(o_)), &remote, &mtu); !st)
    return st;
  if (!s_.client) o_.early_post = remote.early_post;  // the client chooses

  const std::vector<uint64_t> sizes = sizes_of(o_, mtu, s_.quiet);
  const uint32_t early_recvs = (!s_.client && o_.test.verb == Verb::send) ? 2 * o_.early_post : 0;
  RNICDV_TRY(create_endpoint(sizes.back(), early_recvs, mtu));

  std::vector<PeerRecord> remote_records;
  RNICDV_TRY(oob_->exchange_records(ep_->local_records(), &remote_records));
  const bool early = o_.early_post > 0;
  if (o_.rdma_cm && o_.ud) {
    // UD QPs come up without a CM; SIDR then tells the client where its datagrams go.
    RNICDV_TRY(ep_->connect(remote_records, mtu, early && s_.client));
    RNICDV_TRY(cm_resolve_datagrams(*ep_, *oob_, o_, s_.client));
  } else if (o_.rdma_cm) {
    RNICDV_TRY(ep_->set_remote(remote_records));
    RNICDV_TRY(cm_connect(*ep_, *oob_, o_, s_.client, mtu, &conn_));
  } else if (Status st = ep_->connect(remote_records, mtu, early && s_.client); !st) {
    return st;
  }
  print_addresses();
  RunContext base = base_context(sizes.front());
  // The peer is rnicperf: it tells its count (DONE). UC loses SENDs as UD loses datagrams.
  base.datagram_done = o_.ud || (o_.uc && o_.test.verb == Verb::send);
  EarlyPostResult early_result;
  if (early) {
    Status st = s_.client ? run_early_post_client(base, o_.early_post, &early_result)
                          : run_early_post_server(base, o_.early_post);
    if (!st) return st;
  }
  RNICDV_TRY(oob_->barrier(kConnected));

  if (!this_is_passive() || o_.test.kind == Kind::bandwidth) {
    std::string header = o_.test.kind == Kind::latency
                             ? (o_.duration_s ? latency_duration_header() : latency_table_header())
                             : bw_table_header();
    print(o_.cpu_util ? with_cpu_util_header(header) : header);
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    RunContext c = base;
    c.size = sizes[i];
    RNICDV_TRY(run_size(c, i));
    if (o_.all_sizes && !s_.quiet)
      std::fprintf(stderr, "rnicperf: %s: %llu bytes done (%zu/%zu)\n", test_name(o_.test),
                   static_cast<unsigned long long>(sizes[i]), i + 1, sizes.size());
  }
  print(table_line());

  if (early && s_.client) {
    print(" Early post: " + std::to_string(o_.early_post) + " " + early_result.operation + "s of " +
          std::to_string(sizes.front()) + " bytes; times from ESTABLISHED (RTS) / from the post\n");
    print(early_post_table_header());
    print(format_early_post_row(early_result.in_rtr));
    print(format_early_post_row(early_result.after_rts));
    print(result_line());
    json_.set_early_post(early_result.in_rtr, early_result.after_rts, early_result.operation,
                         sizes.front());
  }

  RNICDV_TRY(oob_->barrier(kFinished));
  if (o_.use_event) json_.set_completion_events(ep_->events_taken());
  if (ep_->recv_post_calls() > 0) json_.set_receive_post_calls(ep_->recv_post_calls());
  if (o_.post_send_lists()) json_.set_post_send_calls(post_send_calls_);
  if (o_.out_json && !s_.quiet) RNICDV_TRY(json_.write(o_.json_path));
  return Status::ok();
}

Status Session::create_endpoint(uint64_t max_size, uint32_t early_recvs, uint32_t mtu) {
  const bool receives = o_.test.verb == Verb::send &&
                        (o_.test.kind == Kind::latency || !sends() || o_.bidirectional);
  RNICDV_TRY(ep_->create(o_, max_size, receives, early_recvs, sends()));
  print(ep_->mmap_notes());
  header_.test = o_.test;
  header_.bidirectional = o_.bidirectional;
  header_.initiator = initiator();
  header_.server = !sends();  // perftest's header follows the "machine", not the TCP role
  header_.recv_post_list = o_.recv_post_list;
  header_.tx_depth = o_.tx_depth;
  header_.post_list = o_.post_list;
  header_.rx_depth = ep_->rx_depth();
  header_.cq_mod = o_.cq_mod;
  header_.mtu_bytes = mtu;
  header_.rdma_cm = o_.rdma_cm;
  header_.com_rdma_cm = o_.com_rdma_cm;
  header_.events = o_.use_event;
  header_.duration_mode = o_.duration_s > 0;
  header_.report_per_port = o_.report_per_port;
  header_.clock = clock_.description();
  ep_->describe(&header_);
  if (o_.post_send_lists()) header_.post_calls = "post_send, a SendWr list per call";
  if (s_.client && o_.early_post) {
    header_.early_post =
        std::to_string(o_.early_post) + (o_.test.verb == Verb::send ? " sends" : " writes") +
        " in RTR (withheld " + rnicdv::early_post_name(ep_->qp(0).early_post()) + ")";
  }
  json_.set_header(header_, s_.client ? "client" : "server", unit_);
  print(format_header(header_));

  return Status::ok();
}

Status Session::read_counters(std::vector<uint64_t>* values) {
  values->resize(o_.counters.size());
  for (size_t i = 0; i < o_.counters.size(); ++i) {
    RNICDV_ASSIGN_OR_RETURN((*values)[i],
                            ep_->device().read_port_counter(o_.ib_port, o_.counters[i]));
  }
  return Status::ok();
}

void Session::print_counters() {
  if (o_.counters.empty() || s_.quiet) return;
  std::vector<uint64_t> now;
  if (Status st = read_counters(&now); !st) {
    std::fprintf(stderr, "rnicperf: -W: %s\n", st.message().c_str());
    return;
  }
  std::string text;
  for (size_t i = 0; i < now.size(); ++i)
    text += "\t" + o_.counters[i] + "=" + std::to_string(now[i] - counter_values_[i]) + "\n";
  text += "\n";
  counter_values_ = std::move(now);
  std::fputs(text.c_str(), s_.out);
  std::fflush(s_.out);
}

void Session::print_addresses() {
  std::vector<AddressInfo> local_addr, remote_addr;
  for (size_t i = 0; i < ep_->num_qps(); ++i) {
    local_addr.push_back(ep_->local_address(i));
    remote_addr.push_back(ep_->remote_address(i));
    // --dlid: perftest shows the given LID as the remote one; RoCE addresses by GID, so the
    // connection does not change.
    if (o_.dlid != 0) remote_addr.back().lid = o_.dlid;
    print(format_address("local", o_.test.verb, local_addr.back()));
  }
  for (const auto& a : remote_addr) print(format_address("remote", o_.test.verb, a));
  json_.set_addresses(local_addr, remote_addr);
  print(table_line());  // above the result table's column header, as perftest's
}

RunContext Session::base_context(uint64_t first_size) {
  // Sample storage, sized once for the largest run: nothing is allocated inside the loops.
  const uint64_t total = o_.duration_s ? 0 : o_.iterations * o_.num_qps;
  tposted_.assign(o_.test.kind == Kind::latency ? total : (o_.no_peak ? 0 : total), 0);
  tcompleted_.assign(o_.test.kind == Kind::bandwidth && !o_.no_peak ? total : 0, 0);
  deltas_.reserve(total);
  return RunContext{*ep_,
                    o_,
                    clock_,
                    *oob_,
                    first_size,
                    o_.iterations,
                    tposted_,
                    tcompleted_,
                    static_cast<uint64_t>(clock_.ticks_per_sec() * o_.timeout_s),
                    &progress_,
                    stop_flag()};
}

Status Session::run_size(RunContext& c, size_t index) {
  // Receives first, then the barrier: the peer sends nothing of this size before they are
  // posted.
  RNICDV_TRY(ep_->refill_receives());
  RNICDV_TRY(oob_->barrier(kSizeBase + static_cast<uint32_t>(index)));
  progress_.store(0, std::memory_order_relaxed);
  return o_.test.kind == Kind::latency ? latency_size(c) : bandwidth_size(c);
}

Status Session::latency_size(RunContext& c) {
  const int rtt = rtt_factor(o_.test.verb);
  if (this_is_passive()) {
    uint64_t count = 0;
    return oob_->recv_done(&count, 0);
  }
  LatencyRun run;
  run.window.sample_cpu = o_.cpu_util;
  {
    Reporter reporter(peer_is_passive() ? oob_.get() : nullptr,
                      (o_.duration_s && !s_.quiet) ? std::string(test_name(o_.test)) : "",
                      o_.duration_s, &progress_);
    Status st;
    switch (o_.test.verb) {
      case Verb::write:
        st = run_write_pingpong(c, pingpong_initiator(), &run);
        break;
      case Verb::send:
        st = run_send_pingpong(c, pingpong_initiator(), &run);
        break;
      default:
        st = run_one_sided_latency(c, &run);
        break;
    }
    if (!st) return st;
  }
  post_send_calls_ += run.post_send_calls;
  const bool pingpong = o_.test.verb == Verb::write || o_.test.verb == Verb::send;
  if (peer_is_passive() || (o_.duration_s && pingpong && s_.client)) {
    RNICDV_TRY(oob_->send_done(run.posts));
  } else if (o_.duration_s && pingpong) {
    // The responder's loop ended on seeing the initiator's DONE; take it off the channel.
    uint64_t count = 0;
    RNICDV_TRY(oob_->recv_done(&count, 0));
  }
  if (o_.duration_s) {
    auto r = compute_latency_duration(run.window.ticks(), clock_.ticks_per_us(), rtt, c.size,
                                      run.window.iterations());
    if (o_.cpu_util) r.cpu_util = run.window.cpu_util();
    const std::string row = format_latency_duration_row(r);
    print(o_.cpu_util ? with_cpu_util(row, r.cpu_util) : row);
    print_value(Options::Output::latency, r.t_avg);
    print_counters();
    json_.add(r);
    return Status::ok();
  }
  const size_t n = c.iterations;
  deltas_.resize(n - 1);
  deltas_from_posts(std::span(tposted_.data(), n), deltas_);
  // -C: every figure in clock ticks, which are TSC cycles (Session::run checks the clock).
  const double ticks_per_unit = o_.report_cycles ? 1.0 : clock_.ticks_per_us();
  // -U: every sample in the order taken, before they are sorted (perftest's print_report_lat).
  if (o_.report_unsorted) dump_samples(deltas_, ticks_per_unit * rtt);
  // The distribution goes to the JSON with --histogram (which also prints the histogram) and
  // with --plot (which draws it from the JSON).
  const bool keep_distribution = o_.histogram || !o_.plot.empty();
  std::optional<Histogram> hist;
  if (keep_distribution) hist = make_histogram(deltas_, clock_.ticks_per_us(), rtt);
  LatencyResult r = compute_latency(deltas_, ticks_per_unit, rtt, c.size, c.iterations);
  std::optional<Cdf> cdf;  // compute_latency left deltas_ sorted
  if (keep_distribution) cdf = make_cdf(deltas_, clock_.ticks_per_us(), rtt);
  // -H: the sorted samples the figures are over (the two largest left out, as perftest).
  if (o_.report_histogram) dump_samples(std::span(deltas_.data(), r.samples), ticks_per_unit * rtt);
  // After a dump, perftest prints the table's header again above the row.
  if (o_.report_unsorted || o_.report_histogram) print(result_line() + latency_table_header());
  print(format_latency_row(r));
  print_value(Options::Output::latency, r.t_typical);
  print_counters();
  json_.add(r, hist ? &*hist : nullptr, cdf ? &*cdf : nullptr);
  if (hist && o_.histogram) {
    print(format_histogram(*hist, rtt));
  }
  return Status::ok();
}

Status Session::bandwidth_size(RunContext& c) {
  if (this_is_passive()) {
    uint64_t count = 0;
    RNICDV_TRY(oob_->recv_done(&count, 0));
    BandwidthResult r;
    RNICDV_TRY(oob_->recv_bw(&r, 0));
    if (o_.run_infinitely) {
      print(kClientClosed);  // perftest's server prints no row for an endless run
      return Status::ok();
    }
    print_bandwidth(r);
    json_.add(r);
    return Status::ok();
  }
  const bool sender = initiator();
  const bool receiver = o_.test.verb == Verb::send && (!sends() || o_.bidirectional);
  if (o_.warm_up && sender && !o_.duration_s) {
    // perftest's --perform_warm_up: one TX depth of one-sided posts, completed and not
    // measured, so the first measured posts find warm caches and translations.
    RunContext w = c;
    w.iterations = std::min<uint64_t>(o_.tx_depth, c.iterations);
    w.progress = nullptr;
    BandwidthRun discard;
    if (Status st = run_bandwidth(w, true, false, &discard); !st) return st.prepend("warm-up");
  }
  BandwidthRun run;
  run.tx_window.sample_cpu = run.rx_window.sample_cpu = o_.cpu_util;
  if (o_.run_infinitely) return bandwidth_infinitely(c, sender, receiver);
  {
    Reporter reporter(peer_is_passive() ? oob_.get() : nullptr,
                      (o_.duration_s && !s_.quiet) ? std::string(test_name(o_.test)) : "",
                      o_.duration_s, &progress_);
    RNICDV_TRY(run_bandwidth(c, sender, receiver, &run));
  }
  post_send_calls_ += run.post_send_calls;
  const uint64_t total = c.iterations * o_.num_qps;
  BandwidthResult mine;
  if (sender) {
    if (o_.duration_s) {
      mine = compute_bandwidth_per_port(c.size, run.tx_window.iterations(),
                                        run.tx_window.second_port_iterations(),
                                        run.tx_window.ticks(), clock_.ticks_per_sec(), unit_);
    } else {
      uint64_t peak = 0;
      if (!o_.no_peak)
        peak =
            best_ticks_per_message(std::span(tposted_.data(), total),
                                   std::span(tcompleted_.data(), total), o_.post_list, o_.cq_mod);
      mine = compute_bandwidth(c.size, total, run.t_last_completion - run.t_first_post,
                               clock_.ticks_per_sec(), unit_, peak);
    }
  } else {
    // A SEND receiver measures what arrives (perftest: no peak on the server side).
    if (o_.duration_s)
      mine = compute_bandwidth_per_port(c.size, run.rx_window.iterations(),
                                        run.rx_window.second_port_iterations(),
                                        run.rx_window.ticks(), clock_.ticks_per_sec(), unit_);
    else
      mine = compute_bandwidth(c.size, run.received, run.t_last_recv - run.t_first_recv,
                               clock_.ticks_per_sec(), unit_, 0);
  }
  // --cpu_util: this side's CPU over its measured window (perftest's calc_cpu_util).
  const double cpu = !o_.cpu_util ? -1.0
                     : sender     ? run.tx_window.cpu_util()
                                  : run.rx_window.cpu_util();
  mine.cpu_util = cpu;
  BandwidthResult shown = mine;
  BandwidthResult theirs;
  if (o_.bidirectional) {
    RNICDV_TRY(oob_->exchange_bw(mine, &theirs));
    shown = sum(mine, theirs);
  } else if (peer_is_passive()) {
    RNICDV_TRY(oob_->send_done(run.sent));
    RNICDV_TRY(oob_->send_bw(mine));
  }
  print_bandwidth(shown, cpu);
  json_.add(shown);
  last_bw_ = shown;
  if (o_.report_both && o_.bidirectional)
    print(format_report_both(mine, theirs, unit_, cpu, o_.report_per_port));
  return Status::ok();
}

Status Session::bandwidth_infinitely(RunContext& c, bool sender, bool receiver) {
  // send_bw and -b: the peer runs a loop too, and either side's stop ends both (each tells
  // the other its count). Otherwise the peer waits on the channel for this side's result.
  const bool peer_loops = perftest_peer_ ? o_.test.verb == Verb::send : !peer_is_passive();
  // perftest's run_inf_bi_factor: a -b row (write, read, atomic) is this side's operations
  // counted for both directions, the bandwidth and message rate doubled.
  const double factor = o_.bidirectional ? 2.0 : 1.0;
  std::atomic<bool> peer_stop{false};
  if (peer_loops) c.peer_stop = &peer_stop;
  c.peer_tells_count = !perftest_peer_;
  IntervalPrinter::Watch peer_ended;
  if (peer_loops) {
    peer_ended = [this, &peer_stop] {
      // The peer sends nothing during the run but its DONE (or its failure, or it closes the
      // channel, as a perftest peer's end does): anything there stops this side's loop.
      Result<bool> ready = oob_->channel().readable(0);
      if (ready && !ready.value()) return false;
      peer_stop.store(true, std::memory_order_relaxed);
      return true;
    };
  }
  BandwidthRun run;
  {
    Reporter reporter(peer_is_passive() ? oob_.get() : nullptr, "", 0, &progress_);
    // The quiet end of a loopback run shares the stop flag: when the printing end loops too,
    // its --stop-after ends both and the quiet end counts no intervals.
    IntervalPrinter printer(
        clock_, &progress_, o_.duration_s, (s_.quiet && peer_loops) ? 0 : o_.stop_after,
        o_.cpu_util,
        stop_flag(),
        [this, size = c.size, factor](uint64_t operations, uint64_t ticks, double cpu) {
          // perftest's print_report_bw in RUN_INFINITELY: the interval's operations over its
          // time, no peak.
          BandwidthResult r =
              compute_bandwidth(size, operations, ticks, clock_.ticks_per_sec(), unit_, 0);
          r.bw_avg *= factor;
          r.msg_rate *= factor;
          r.cpu_util = cpu;
          print_bandwidth(r, cpu);
          json_.add(r);  // the JSON keeps every row; the main thread reads it after the join
        },
        std::move(peer_ended));
    Status st = run_bandwidth(c, sender, receiver, &run);
    c.peer_stop = nullptr;
    if (!st) return st;
  }
  post_send_calls_ += run.post_send_calls;
  if (stop_flag()->load(std::memory_order_relaxed) || !peer_loops)
    print(kUserStopped);
  else
    print(s_.client ? kServerClosed : kClientClosed);
  if (peer_is_passive()) {
    RNICDV_TRY(oob_->send_done(run.sent));
    RNICDV_TRY(oob_->send_bw(compute_bandwidth(c.size, run.sent,
                                               run.t_last_completion - run.t_first_post,
                                               clock_.ticks_per_sec(), unit_, 0)));
  }
  return Status::ok();
}

void Session::finish() {
  // perftest checks the bandwidth limit first and reports only the first one missed.
  const char* missed = nullptr;
  if (o_.limit_bw >= 0 && !bw_limit_met_)
    missed = "Error: BW result is below bw limit";
  else if (o_.limit_msgrate >= 0 && !msgrate_limit_met_)
    missed = "Error: Msg rate  is below msg_rate limit";  // perftest's two spaces
  if (missed) {
    s_.below_limit = true;
    if (!s_.quiet) std::fprintf(stderr, "%s\n", missed);
  }
  if (o_.wait_destroy_s > 0) {
    if (!s_.quiet) {
      std::fprintf(s_.out, " Waiting %u seconds before releasing resources...\n",
                   o_.wait_destroy_s);
      std::fflush(s_.out);
    }
    std::this_thread::sleep_for(std::chrono::seconds(o_.wait_destroy_s));
  }
}

}  // namespace detail

Status run_session(SessionSetup& setup) {
  detail::Session session(setup);
  Status st = session.run();
  if (!st) {
    session.abort(st.message());
    return st;
  }
  session.finish();
  return st;
}

}  // namespace rnicperf
