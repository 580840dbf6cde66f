// SPDX-License-Identifier: BSD-3-Clause
// Golden-format checks: the header block, address lines and both tables against literal text.
#include <catch2/catch.hpp>

#include <cinttypes>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "cpu_util.h"
#include "report.h"

using namespace rnicperf;

TEST_CASE("the latency header block matches perftest's layout", "[format]") {
  HeaderInfo h;
  h.test = {Verb::write, Kind::latency};
  h.device = "sim0";
  h.tx_depth = 1;
  h.mtu_bytes = 1024;
  h.gid_index = 0;
  h.inline_size = 220;
  h.sim_wire = "udp 127.0.0.2:4791";
  h.device_profile = "mlx5";
  const std::string expected =
      "---------------------------------------------------------------------------------------\n"
      "                    RDMA_Write Latency Test\n"
      " Dual-port       : OFF\t\tDevice         : sim0\n"
      " Number of qps   : 1\t\tTransport type : IB\n"
      " Connection type : RC\t\tUsing SRQ      : OFF\n"
      " PCIe relax order: OFF\n"
      " ibv_wr* API     : OFF\n"
      " TX depth        : 1\n"
      " Mtu             : 1024[B]\n"
      " Link type       : Ethernet\n"
      " GID index       : 0\n"
      " Max inline data : 220[B]\n"
      " rdma_cm QPs\t : OFF\n"
      " Data ex. method : Ethernet\n"
      " Sim wire        : udp 127.0.0.2:4791\n"
      " Device profile  : mlx5\n"
      "---------------------------------------------------------------------------------------\n";
  CHECK(format_header(h) == expected);
}

TEST_CASE("a DPDK wire's header names the port, driver and MAC, and DPDK heap buffers",
          "[format]") {
  HeaderInfo h;
  h.test = {Verb::write, Kind::bandwidth};
  h.device = "sim0";
  h.tx_depth = 128;
  h.cq_mod = 100;
  h.mtu_bytes = 1024;
  h.gid_index = 0;
  h.sim_wire =
      "dpdk 10.9.0.2:4791 port 0 net_af_packet0 (net_af_packet) mac 02:00:0a:09:00:02 max frame "
      "1514";
  h.device_profile = "mlx5";
  h.buffers = "DPDK heap, hugepages";
  const std::string text = format_header(h);
  CHECK(text.find(" Sim wire        : dpdk 10.9.0.2:4791 port 0 net_af_packet0 (net_af_packet) "
                  "mac 02:00:0a:09:00:02 max frame 1514\n Device profile  : mlx5\n"
                  " Buffers         : DPDK heap, hugepages\n") != std::string::npos);
}

TEST_CASE("the bandwidth header shows CQ moderation, post list and outstanding reads", "[format]") {
  HeaderInfo h;
  h.test = {Verb::read, Kind::bandwidth};
  h.bidirectional = true;
  h.post_list = 4;
  h.device = "mlx5_0";
  h.num_qps = 2;
  h.tx_depth = 128;
  h.cq_mod = 4;
  h.mtu_bytes = 4096;
  h.gid_index = 3;
  h.out_reads = 16;
  h.rdma_cm = true;
  const std::string expected =
      "---------------------------------------------------------------------------------------\n"
      "                    RDMA_Read Bidirectional Post List BW Test\n"
      " Dual-port       : OFF\t\tDevice         : mlx5_0\n"
      " Number of qps   : 2\t\tTransport type : IB\n"
      " Connection type : RC\t\tUsing SRQ      : OFF\n"
      " PCIe relax order: OFF\n"
      " ibv_wr* API     : OFF\n"
      " TX depth        : 128\n"
      " Post List       : 4\n"
      " CQ Moderation   : 4\n"
      " Mtu             : 4096[B]\n"
      " Link type       : Ethernet\n"
      " GID index       : 3\n"
      " Outstand reads  : 16\n"
      " rdma_cm QPs\t : ON\n"
      " Data ex. method : Ethernet\n"
      "---------------------------------------------------------------------------------------\n";
  CHECK(format_header(h) == expected);
}

TEST_CASE("a SEND server shows its RX depth and no TX depth", "[format]") {
  HeaderInfo h;
  h.test = {Verb::send, Kind::bandwidth};
  h.initiator = false;
  h.server = true;
  h.rx_depth = 512;
  h.device = "sim0";
  std::string text = format_header(h);
  CHECK(text.find(" RX depth        : 512\n") != std::string::npos);
  CHECK(text.find("TX depth") == std::string::npos);
  CHECK(text.find("                    Send BW Test\n") != std::string::npos);
}

TEST_CASE("titles name the verb and mode as perftest does", "[format]") {
  CHECK(test_title({Verb::atomic, Kind::latency}, false, false) ==
        "Atomic FETCH_AND_ADD Latency Test");
  CHECK(test_title({Verb::send, Kind::bandwidth}, true, false) == "Send Bidirectional BW Test");
  CHECK(test_title({Verb::write, Kind::bandwidth}, false, false) == "RDMA_Write BW Test");
}

TEST_CASE("address lines use perftest's field widths and decimal GID bytes", "[format]") {
  AddressInfo a;
  a.qpn = 0x48;
  a.psn = 0xf5aed1;
  a.rkey = 0x1fd4bc;
  a.vaddr = 0x7f0e0c8aa000;
  a.out_reads = 16;
  a.gid[10] = 0xff;
  a.gid[11] = 0xff;
  a.gid[12] = 127;
  a.gid[15] = 2;
  const std::string gid = " GID: 00:00:00:00:00:00:00:00:00:00:255:255:127:00:00:02\n";
  CHECK(format_address("local", Verb::write, a) ==
        " local address: LID 0000 QPN 0x0048 PSN 0xf5aed1 RKey 0x1fd4bc VAddr 0x007f0e0c8aa000\n" +
            gid);
  CHECK(format_address("remote", Verb::read, a) ==
        " remote address: LID 0000 QPN 0x0048 PSN 0xf5aed1 OUT 0x10 RKey 0x1fd4bc VAddr "
        "0x007f0e0c8aa000\n" +
            gid);
  CHECK(format_address("local", Verb::send, a) ==
        " local address: LID 0000 QPN 0x0048 PSN 0xf5aed1\n" + gid);
  a.has_gid = false;
  CHECK(format_address("local", Verb::atomic, a) ==
        " local address: LID 0000 QPN 0x0048 PSN 0xf5aed1\n");
}

TEST_CASE("with -c XRC the header says XRC with its SRQ, and each address line ends with the "
          "SRQ number, perftest's XRC_FMT",
          "[format][xrc]") {
  HeaderInfo h;
  h.test = {Verb::send, Kind::latency};
  h.device = "sim0";
  h.num_qps = 2;
  h.connection = "XRC";
  h.using_srq = true;
  const std::string text = format_header(h);
  CHECK(text.find(" Number of qps   : 2\t\tTransport type : IB\n"
                  " Connection type : XRC\t\tUsing SRQ      : ON\n") != std::string::npos);

  AddressInfo a;
  a.qpn = 0x101;
  a.psn = 0x3f1222;
  a.rkey = 0x849df557;
  a.vaddr = 0x5567da740000;
  a.srqn = 0x40;
  a.show_srqn = true;
  a.has_gid = false;
  // " SRQn %#08x" after RKey and VAddr (READ's OUT before them), before the line's end.
  CHECK(format_address("local", Verb::write, a) ==
        " local address: LID 0000 QPN 0x0101 PSN 0x3f1222 RKey 0x849df557 VAddr "
        "0x005567da740000 SRQn 0x000040\n");
  CHECK(format_address("remote", Verb::read, a) ==
        " remote address: LID 0000 QPN 0x0101 PSN 0x3f1222 OUT 0000 RKey 0x849df557 VAddr "
        "0x005567da740000 SRQn 0x000040\n");
  CHECK(format_address("local", Verb::send, a) ==
        " local address: LID 0000 QPN 0x0101 PSN 0x3f1222 SRQn 0x000040\n");
  a.srqn = 0xabcdef;
  CHECK(format_address("local", Verb::atomic, a) ==
        " local address: LID 0000 QPN 0x0101 PSN 0x3f1222 SRQn 0xabcdef\n");
  a.show_srqn = false;  // RC, UC, UD: no SRQ number
  CHECK(format_address("local", Verb::send, a) ==
        " local address: LID 0000 QPN 0x0101 PSN 0x3f1222\n");
}

TEST_CASE("the latency table has perftest's exact column header", "[format]") {
  CHECK(latency_table_header() ==
        " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    "
        "t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] \n");
  LatencyResult r;
  r.size = 2;
  r.iterations = 1000;
  r.t_min = 1.24;
  r.t_max = 5.19;
  r.t_typical = 1.27;
  r.t_avg = 1.27;
  r.t_stdev = 0.05;
  r.p99 = 1.37;
  r.p999 = 5.19;
  // Byte for byte what Debian's perftest (4.5) prints, tabs included (a row of ib_write_lat
  // on the uverbs shim, seen with cat -A).
  CHECK(format_latency_row(r) ==
        " 2       1000         1.24           5.19         1.27     \t       1.27        \t0.05   "
        "\t\t1.37    \t\t5.19   \n");
  r.iterations = 100;
  r.t_min = 93.99;
  r.t_max = 1444.01;
  r.t_typical = 115.32;
  r.t_avg = 142.71;
  r.t_stdev = 172.44;
  r.p99 = 1444.01;
  r.p999 = 1444.01;
  CHECK(format_latency_row(r) ==
        " 2       100          93.99          1444.01      115.32   \t       142.71      \t172.44 "
        "\t\t1444.01 \t\t1444.01\n");
  CHECK(latency_duration_header() ==
        " #bytes        #iterations       t_avg[usec]    tps average\n");
  CHECK(format_latency_duration_row({2, 123456, 1.5, 333333.333}) ==
        " 2             123456            1.50           333333.33\n");
}

TEST_CASE("the bandwidth table has perftest's exact column headers", "[format]") {
  // Debian's perftest (4.5) labels the 2^20-byte unit MB/sec.
  CHECK(bandwidth_table_header(BwUnit::mib_per_sec) ==
        " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n");
  CHECK(bandwidth_table_header(BwUnit::gbit_per_sec) ==
        " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n");
  BandwidthResult r{65536, 5000, 11030.781, 11030.5, 0.1764881};
  CHECK(format_bandwidth_row(r, BwUnit::mib_per_sec) ==
        " 65536      5000             11030.78            11030.50\t\t   0.176488\n");
  // Byte for byte a row of Debian's ib_send_bw on the uverbs shim (cat -A).
  BandwidthResult seen{65536, 100, 0.0, 289.46, 0.004631};
  CHECK(format_bandwidth_row(seen, BwUnit::mib_per_sec) ==
        " 65536      100              0.00               289.46 \t\t   0.004631\n");
  BandwidthResult g{65536, 5000, 98.52, 98.5, 0.187691};
  CHECK(format_bandwidth_row(g, BwUnit::gbit_per_sec) ==
        " 65536      5000             98.52              98.50  \t\t   0.187691\n");
  // Below 0.1 Gb/sec perftest switches to six decimals.
  BandwidthResult slow{2, 1000, 0.0521, 0.04512345, 2.82};
  CHECK(format_bandwidth_row(slow, BwUnit::gbit_per_sec) ==
        " 2          1000             0.052100            0.045123\t\t   2.820000\n");
}

TEST_CASE("the early-post table lines up under its header", "[format]") {
  CHECK(early_post_table_header() ==
        " #posts     posted       withheld     t_first[usec]    t_last[usec]\n");
  EarlyPostRow rtr{16, true, 16, 10.5, 42.25};
  EarlyPostRow rts{16, false, 0, 3.0, 40.0};
  CHECK(format_early_post_row(rtr) ==
        " 16         in RTR       16           10.50            42.25\n");
  CHECK(format_early_post_row(rts) ==
        " 16         after RTS    0            3.00             40.00\n");
}

TEST_CASE("the histogram prints one row per bucket with a bar", "[format][histogram]") {
  Histogram h;
  h.total = 4;
  h.buckets = {{1.0, 1.189, 3}, {1.189, 1.414, 0}, {1.414, 1.682, 1}};
  std::string text = format_histogram(h, 2);
  CHECK(text ==
        " Latency histogram [usec, half round trip; 4 samples, none dropped]\n"
        "       from         to        count       %\n"
        "      1.000      1.189            3   75.00% ########################################\n"
        "      1.189      1.414            0    0.00% \n"
        "      1.414      1.682            1   25.00% ##############\n");
}

TEST_CASE("the server announces that it waits", "[format]") {
  CHECK(waiting_banner() ==
        "\n************************************\n"
        "* Waiting for client to connect... *\n"
        "************************************\n");
}

TEST_CASE("--cpu_util adds perftest's CPU_Util column to the header and the row", "[format][cpu_util]") {
  // perftest: RESULT_EXT_CPU_UTIL "    CPU_Util[%%]\n" after RESULT_FMT, REPORT_EXT_CPU_UTIL
  // "\t    %-3.2f\n" after REPORT_FMT.
  CHECK(with_cpu_util_header(bandwidth_table_header(BwUnit::mib_per_sec)) ==
        " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]"
        "    CPU_Util[%]\n");
  CHECK(with_cpu_util_header(latency_duration_header()) ==
        " #bytes        #iterations       t_avg[usec]    tps average    CPU_Util[%]\n");
  BandwidthResult r;
  r.size = 65536;
  r.iterations = 2000;
  r.bw_avg = 618.63;
  r.msg_rate = 0.009898;
  CHECK(with_cpu_util(format_bandwidth_row(r, BwUnit::mib_per_sec), 7.5) ==
        " 65536      2000             0.00               618.63 \t\t   0.009898\t    7.50\n");
  CHECK(with_cpu_util(format_bandwidth_row(r, BwUnit::mib_per_sec), 100) ==
        " 65536      2000             0.00               618.63 \t\t   0.009898\t    100.00\n");
}

TEST_CASE("CPU utilization is user over user plus idle of /proc/stat's cpu line, as perftest's",
          "[cpu_util]") {
  const CpuTimes a = parse_proc_stat("cpu  100 7 50 900 3 0 1 0 0 0\ncpu0 50 3 25 450 1 0 0 0 0 0\n");
  REQUIRE(a.valid);
  CHECK(a.user == 100);
  CHECK(a.idle == 900);
  const CpuTimes b = parse_proc_stat("cpu  130 9 80 990 3 0 1 0 0 0\n");
  REQUIRE(b.valid);
  CHECK(cpu_util_percent(a, b) == Approx(25.0));  // 30 / (30 + 90)
  CHECK(cpu_util_percent(a, a) == 0);
  CHECK_FALSE(parse_proc_stat("intr 1 2 3\n").valid);
  CHECK_FALSE(parse_proc_stat("").valid);
  CHECK(cpu_util_percent(CpuTimes{}, b) == 0);
  const CpuTimes now = read_cpu_times();
  CHECK(now.valid);
}

TEST_CASE("--report-both prints the local and the remote rows under perftest's titles",
          "[format][report_both]") {
  BandwidthResult mine, theirs;
  mine.size = theirs.size = 4096;
  mine.iterations = 100;
  theirs.iterations = 200;
  mine.bw_avg = 1.5;
  theirs.bw_avg = 2.5;
  mine.msg_rate = 0.25;
  theirs.msg_rate = 0.5;
  const std::string line(87, '-');
  const std::string header =
      " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n";
  CHECK(format_report_both(mine, theirs, BwUnit::mib_per_sec) ==
        line + "\n\n Local results: \n" + line + "\n" + header +
            " 4096       100              0.00               1.50   \t\t   0.250000\n" + line +
            "\n\n Remote results: \n" + line + "\n" + header +
            " 4096       200              0.00               2.50   \t\t   0.500000\n");
  const std::string cpu = format_report_both(mine, theirs, BwUnit::mib_per_sec, 12.5);
  CHECK(cpu.find("MsgRate[Mpps]    CPU_Util[%]\n 4096       100 ") != std::string::npos);
  CHECK(cpu.find("0.500000\t    12.50\n") != std::string::npos);
}

TEST_CASE("--recv_post_list adds perftest's Recv Post List line after the post list",
          "[format][recv_post_list]") {
  HeaderInfo h;
  h.test = {Verb::send, Kind::bandwidth};
  h.initiator = false;
  h.server = true;
  h.rx_depth = 512;
  h.recv_post_list = 8;
  h.device = "sim0";
  const std::string text = format_header(h);
  CHECK(text.find(" Recv Post List  : 8\n RX depth        : 512\n") != std::string::npos);
  h.recv_post_list = 1;
  CHECK(format_header(h).find("Recv Post List") == std::string::npos);
}

TEST_CASE("-U and -H dumps are perftest's '#, usec' block: numbered lines of %g values",
          "[format][dumps]") {
  CHECK(rnicperf::sample_dump_header("usec") == "#, usec\n");
  CHECK(rnicperf::sample_dump_header("cycles") == "#, cycles\n");
  // Ticks over ticks per unit: at 1000 ticks/usec and a round trip halved (2000 ticks a unit).
  const std::vector<uint64_t> ticks = {5000, 2500, 123456789, 3};
  CHECK(rnicperf::format_sample_dump(ticks, 2000.0, 1) ==
        "1, 2.5\n2, 1.25\n3, 61728.4\n4, 0.0015\n");
  // A dump formatted in parts goes on numbering where the last part stopped.
  CHECK(rnicperf::format_sample_dump(std::span(ticks).subspan(2), 1.0, 3) ==
        "3, 1.23457e+08\n4, 3\n");
  CHECK(rnicperf::format_sample_dump({}, 1.0, 1).empty());
}

TEST_CASE("-O: the header says Dual-port ON and gives port 2's GID index, as perftest's",
          "[format][dual_port]") {
  HeaderInfo h;
  h.test = {Verb::write, Kind::bandwidth};
  h.device = "sim0";
  h.dual_port = true;
  h.num_qps = 2;
  h.tx_depth = 128;
  h.cq_mod = 100;
  h.mtu_bytes = 4096;
  h.gid_index = 3;
  h.gid_index2 = 3;
  const std::string text = format_header(h);
  CHECK(text.find(" Dual-port       : ON\t\tDevice         : sim0\n"
                  " Number of qps   : 2\t\tTransport type : IB\n") != std::string::npos);
  // Debian's ib_write_bw -O on the uverbs shim prints these two lines, in this order.
  CHECK(text.find(" Link type       : Ethernet\n GID index       : 3\n GID index2      : 3\n"
                  " Max inline data : 0[B]\n") != std::string::npos);
  h.dual_port = false;
  CHECK(format_header(h).find(" Dual-port       : OFF\t\t") != std::string::npos);
  CHECK(format_header(h).find("GID index2") == std::string::npos);
}

TEST_CASE("--report-per-port: perftest's wide line, columns and row, tabs included",
          "[format][dual_port]") {
  CHECK(result_line_per_port() == std::string(163, '-') + "\n");
  CHECK(bandwidth_table_header_per_port(BwUnit::mib_per_sec) ==
        " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]   BW "
        "Port1[MB/sec]   MsgRate Port1[Mpps]   BW Port2[MB/sec]   MsgRate Port2[Mpps]\n");
  CHECK(bandwidth_table_header_per_port(BwUnit::gbit_per_sec) ==
        " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]   BW "
        "Port1[Gb/sec]   MsgRate Port1[Mpps]   BW Port2[Gb/sec]   MsgRate Port2[Mpps]\n");
  BandwidthResult r{4096, 46600, 0.0, 181.87, 0.046559};
  r.port[0] = {93.28, 0.023879};
  r.port[1] = {88.59, 0.02268};
  // Byte for byte the row Debian's ib_write_bw -O --report-per-port -D 1 --cpu_util printed on
  // the uverbs shim (cat -A), up to its CPU column; and perftest's REPORT_FMT_PER_PORT and
  // REPORT_EXT applied to the same figures.
  const std::string expected =
      " 4096       46600          0.00               181.87 \t\t   0.046559        93.28      "
      "        0.023879              88.59              0.022680\n";
  CHECK(format_bandwidth_row_per_port(r) == expected);
  char perftest[256];
  std::snprintf(perftest, sizeof perftest,
                " %-7lu    %-10" PRIu64
                "     %-7.2lf            %-7.2lf\t\t   %-7.6lf        %-7.2lf            "
                "%-7.6lf              %-7.2lf            %-7.6lf"
                "\n",
                4096ul, uint64_t{46600}, 0.0, 181.87, 0.046559, 93.28, 0.023879, 88.59, 0.02268);
  CHECK(format_bandwidth_row_per_port(r) == perftest);
  // perftest keeps two decimals per port even below 0.1 Gb/sec (its per-port branch comes
  // before the six-decimal one), and --cpu_util appends its column as to any row.
  BandwidthResult slow{2, 1000, 0.0, 0.04512345, 2.82};
  CHECK(format_bandwidth_row_per_port(slow) ==
        " 2          1000           0.00               0.05   \t\t   2.820000        0.00       "
        "        0.000000              0.00               0.000000\n");
  CHECK(with_cpu_util(format_bandwidth_row_per_port(r), 99.37) ==
        expected.substr(0, expected.size() - 1) + "\t    99.37\n");
  // --report-both: per-port rows under the usual column headers, as perftest prints them.
  const std::string both = format_report_both(r, r, BwUnit::mib_per_sec, -1, true);
  CHECK(both.find(bandwidth_table_header(BwUnit::mib_per_sec) + expected) != std::string::npos);
}
