// SPDX-License-Identifier: BSD-3-Clause
// The lookups of next_symbols.h, made once at load.
// As in interpose.cc: each spelling (open and open64, ...) under its own name.
#undef _FILE_OFFSET_BITS
#include "next_symbols.h"

namespace rnicdv::uverbs::next {

open_fn g_open, g_open64;
access_fn g_access, g_euidaccess, g_eaccess;
dup_fn g_dup;
dup2_fn g_dup2;
dup3_fn g_dup3;
faccessat_fn g_faccessat;
openat_fn g_openat, g_openat64;
stat_fn g_stat, g_stat64;
fstat_fn g_fstat, g_fstat64;
xstat_fn g_xstat, g_xstat64;
fxstat_fn g_fxstat, g_fxstat64;
read_fn g_read;
write_fn g_write;
close_fn g_close;
ioctl_fn g_ioctl;
mmap_fn g_mmap, g_mmap64;
munmap_fn g_munmap;
mremap_fn g_mremap;
mprotect_fn g_mprotect;
pkey_mprotect_fn g_pkey_mprotect;
brk_fn g_brk;
sbrk_fn g_sbrk;
socket_fn g_socket;
fcntl_fn g_fcntl, g_fcntl64;
realpath_fn g_realpath;
realpath_chk_fn g_realpath_chk;


namespace {

template <typename Fn>
void resolve(Fn& cache, const char* name) {
  __atomic_store_n(&cache, reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name)), __ATOMIC_RELEASE);
}

// At load, before the shim's other constructors (101: the first priority not reserved).
__attribute__((constructor(101))) void resolve_next_symbols() {
  resolve(g_open, "open");
  resolve(g_open64, "open64");
  resolve(g_access, "access");
  resolve(g_euidaccess, "euidaccess");
  resolve(g_eaccess, "eaccess");
  resolve(g_dup, "dup");
  resolve(g_dup2, "dup2");
  resolve(g_dup3, "dup3");
  resolve(g_faccessat, "faccessat");
  resolve(g_openat, "openat");
  resolve(g_openat64, "openat64");
  resolve(g_stat, "stat");
  resolve(g_stat64, "stat64");
  resolve(g_fstat, "fstat");
  resolve(g_fstat64, "fstat64");
  resolve(g_xstat, "__xstat");
  resolve(g_xstat64, "__xstat64");
  resolve(g_fxstat, "__fxstat");
  resolve(g_fxstat64, "__fxstat64");
  resolve(g_read, "read");
  resolve(g_write, "write");
  resolve(g_close, "close");
  resolve(g_ioctl, "ioctl");
  resolve(g_mmap, "mmap");
  resolve(g_mmap64, "mmap64");
  resolve(g_munmap, "munmap");
  resolve(g_mremap, "mremap");
  resolve(g_mprotect, "mprotect");
  resolve(g_pkey_mprotect, "pkey_mprotect");
  resolve(g_brk, "brk");
  resolve(g_sbrk, "sbrk");
  resolve(g_socket, "socket");
  resolve(g_fcntl, "fcntl");
  resolve(g_fcntl64, "fcntl64");
  resolve(g_realpath, "realpath");
  resolve(g_realpath_chk, "__realpath_chk");
}

}  // namespace
}  // namespace rnicdv::uverbs::next
