// SPDX-License-Identifier: BSD-3-Clause
#include "bench_ucx.h"

#include <uct/api/uct.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "bench_sim.h"  // fail()

namespace rnicdv::bench {
namespace {

constexpr const char* kTransport = "rc_mlx5";

void check(ucs_status_t st, const std::string& what) {
  if (st != UCS_OK) fail("UCX: " + what + ": " + ucs_status_string(st));
}

// One UCT interface of "<dev>:1" with its memory domain, and a registered buffer.
struct Side {
  uct_component_h component = nullptr;
  uct_md_h md = nullptr;
  uct_worker_h worker = nullptr;
  uct_iface_h iface = nullptr;
  uct_iface_attr_t attr{};
  uct_ep_h ep = nullptr;
  std::vector<uint8_t> buf = std::vector<uint8_t>(4096);
  uct_mem_h memh = nullptr;

  Side(ucs_async_context_t* async, const std::string& dev) {
    uct_component_h* components = nullptr;
    unsigned count = 0;
    check(uct_query_components(&components, &count), "uct_query_components");
    for (unsigned i = 0; i < count && !md; ++i) {
      uct_component_attr_t ca{};
      ca.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT;
      check(uct_component_query(components[i], &ca), "uct_component_query");
      std::vector<uct_md_resource_desc_t> mds(ca.md_resource_count);
      ca.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
      ca.md_resources = mds.data();
      check(uct_component_query(components[i], &ca), "uct_component_query");
      for (const uct_md_resource_desc_t& r : mds) {
        if (dev != r.md_name) continue;
        uct_md_config_t* config = nullptr;
        check(uct_md_config_read(components[i], nullptr, nullptr, &config), "uct_md_config_read");
        const ucs_status_t st = uct_md_open(components[i], r.md_name, config, &md);
        uct_config_release(config);
        check(st, "uct_md_open " + dev);
        component = components[i];
        break;
      }
    }
    uct_release_component_list(components);
    if (!md)
      fail("UCX has no memory domain '" + dev +
           "' (is librnicdv-uverbs.so preloaded, and UCX's IB transports installed?)");
    check(uct_worker_create(async, UCS_THREAD_MODE_SINGLE, &worker), "uct_worker_create");

    uct_iface_config_t* config = nullptr;
    check(uct_md_iface_config_read(md, kTransport, nullptr, nullptr, &config),
          "uct_md_iface_config_read");
    uct_iface_params_t params{};
    params.field_mask = UCT_IFACE_PARAM_FIELD_OPEN_MODE | UCT_IFACE_PARAM_FIELD_DEVICE |
                        UCT_IFACE_PARAM_FIELD_STATS_ROOT | UCT_IFACE_PARAM_FIELD_RX_HEADROOM |
                        UCT_IFACE_PARAM_FIELD_CPU_MASK;
    params.open_mode = UCT_IFACE_OPEN_MODE_DEVICE;
    const std::string port = dev + ":1";
    params.mode.device.tl_name = kTransport;
    params.mode.device.dev_name = port.c_str();
    params.stats_root = nullptr;
    params.rx_headroom = 0;
    UCS_CPU_ZERO(&params.cpu_mask);
    const ucs_status_t st = uct_iface_open(md, worker, &params, config, &iface);
    uct_config_release(config);
    check(st, std::string("uct_iface_open ") + kTransport + " on " + port);
    uct_iface_progress_enable(iface, UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);
    check(uct_iface_query(iface, &attr), "uct_iface_query");
    if (!(attr.cap.flags & UCT_IFACE_FLAG_PUT_SHORT) || attr.cap.put.max_short < 8)
      fail(std::string(kTransport) + " on " + port + " has no 8-byte put_short");
    if (!(attr.cap.flags & UCT_IFACE_FLAG_CONNECT_TO_EP))
      fail(std::string(kTransport) + " does not connect endpoint to endpoint");
    check(uct_md_mem_reg(md, buf.data(), buf.size(), UCT_MD_MEM_ACCESS_RMA, &memh),
          "uct_md_mem_reg");
    uct_ep_params_t ep_params{};
    ep_params.field_mask = UCT_EP_PARAM_FIELD_IFACE;
    ep_params.iface = iface;
    check(uct_ep_create(&ep_params, &ep), "uct_ep_create");
  }
  ~Side() {
    if (ep) uct_ep_destroy(ep);
    if (memh) uct_md_mem_dereg(md, memh);
    if (iface) uct_iface_close(iface);
    if (worker) uct_worker_destroy(worker);
    if (md) uct_md_close(md);
  }
  Side(const Side&) = delete;
  Side& operator=(const Side&) = delete;

  std::vector<uint8_t> device_address() const {
    std::vector<uint8_t> a(attr.device_addr_len);
    check(uct_iface_get_device_address(iface, reinterpret_cast<uct_device_addr_t*>(a.data())),
          "uct_iface_get_device_address");
    return a;
  }
  std::vector<uint8_t> ep_address() const {
    std::vector<uint8_t> a(attr.ep_addr_len);
    check(uct_ep_get_address(ep, reinterpret_cast<uct_ep_addr_t*>(a.data())),
          "uct_ep_get_address");
    return a;
  }
  void connect_to(const Side& peer) {
    const std::vector<uint8_t> dev = peer.device_address(), ep_addr = peer.ep_address();
    check(uct_ep_connect_to_ep(ep, reinterpret_cast<const uct_device_addr_t*>(dev.data()),
                               reinterpret_cast<const uct_ep_addr_t*>(ep_addr.data())),
          "uct_ep_connect_to_ep");
  }
};

}  // namespace

struct UctPair::Impl {
  ucs_async_context_t* async = nullptr;
  std::unique_ptr<Side> a, b;
  uct_rkey_bundle_t rkey{};
  uint64_t remote = 0;
  uint64_t payload = 0x0123456789abcdefull;
};

UctPair::UctPair(const char* measured_dev, const char* peer_dev) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  check(ucs_async_context_create(UCS_ASYNC_MODE_THREAD_SPINLOCK, &m.async),
        "ucs_async_context_create");
  m.a = std::make_unique<Side>(m.async, measured_dev);
  m.b = std::make_unique<Side>(m.async, peer_dev);
  m.a->connect_to(*m.b);
  m.b->connect_to(*m.a);
  uct_md_attr_t md_attr{};
  check(uct_md_query(m.b->md, &md_attr), "uct_md_query");
  std::vector<uint8_t> packed(md_attr.rkey_packed_size);
  check(uct_md_mkey_pack(m.b->md, m.b->memh, packed.data()), "uct_md_mkey_pack");
  check(uct_rkey_unpack(m.a->component, packed.data(), &m.rkey), "uct_rkey_unpack");
  m.remote = reinterpret_cast<uintptr_t>(m.b->buf.data());
}

UctPair::~UctPair() {
  Impl& m = *impl_;
  uct_rkey_release(m.a->component, &m.rkey);
  m.b.reset();
  m.a.reset();
  ucs_async_context_destroy(m.async);
}

bool UctPair::put_short(uint32_t n) {
  Impl& m = *impl_;
  uct_ep_h ep = m.a->ep;
  for (uint32_t i = 0; i < n; ++i)
    if (uct_ep_put_short(ep, &m.payload, sizeof m.payload, m.remote, m.rkey.rkey) != UCS_OK)
        [[unlikely]]
      return false;
  return true;
}

void UctPair::drain() {
  Impl& m = *impl_;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  for (;;) {
    const ucs_status_t st = uct_ep_flush(m.a->ep, UCT_FLUSH_FLAG_LOCAL, nullptr);
    if (st == UCS_OK) return;
    if (st != UCS_INPROGRESS && st != UCS_ERR_NO_RESOURCE) check(st, "uct_ep_flush");
    uct_worker_progress(m.a->worker);
    uct_worker_progress(m.b->worker);
    if (std::chrono::steady_clock::now() > deadline) fail("UCX puts did not complete in 120 s");
    std::this_thread::yield();
  }
}

}  // namespace rnicdv::bench
