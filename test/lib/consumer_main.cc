// SPDX-License-Identifier: BSD-3-Clause
// An external program, as a user writes one: the driver alone, opening sim0 (the simulator
// comes on demand from beside librnicdv). Built by consumers.sh and subproject_consumer.sh.
#include <cstdio>
#include <rnicdv/rnicdv.h>
int main() {
  auto dev = rnicdv::Device::open("sim0");
  if (!dev) { std::fprintf(stderr, "%s\n", dev.status().message().c_str()); return 1; }
  auto pd = dev.value().alloc_pd();
  std::printf("opened %s (%s), pd %s\n", dev.value().name().c_str(),
              dev.value().info().kind.c_str(), pd ? "ok" : "failed");
  return pd ? 0 : 1;
}
