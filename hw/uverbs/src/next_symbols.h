// SPDX-License-Identifier: BSD-3-Clause
// The next definitions (glibc's) of the libc functions interpose.cc replaces. Every one is
// looked up at load (resolve_next_symbols, next_symbols.cc), before main() and before any
// handler of the program can run: dlsym is not async-signal-safe, and a program may make its
// first mprotect from a SIGSEGV handler.
#pragma once

#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

namespace rnicdv::uverbs::next {

// The next definition of `name`, from the cache resolve_next_symbols filled at load; looked up
// here only if a call comes before that.
template <typename Fn>
Fn next_symbol(Fn& cache, const char* name) {
  Fn fn = __atomic_load_n(&cache, __ATOMIC_ACQUIRE);
  if (!fn) {
    fn = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
    __atomic_store_n(&cache, fn, __ATOMIC_RELEASE);
  }
  return fn;
}

using open_fn = int (*)(const char*, int, ...);
using openat_fn = int (*)(int, const char*, int, ...);
using stat_fn = int (*)(const char*, struct stat*);
using fstat_fn = int (*)(int, struct stat*);
using xstat_fn = int (*)(int, const char*, struct stat*);
using fxstat_fn = int (*)(int, int, struct stat*);
using read_fn = ssize_t (*)(int, void*, size_t);
using write_fn = ssize_t (*)(int, const void*, size_t);
using close_fn = int (*)(int);
using ioctl_fn = int (*)(int, unsigned long, ...);
using mmap_fn = void* (*)(void*, size_t, int, int, int, off_t);
using munmap_fn = int (*)(void*, size_t);
using mremap_fn = void* (*)(void*, size_t, size_t, int, ...);
using mprotect_fn = int (*)(void*, size_t, int);
using pkey_mprotect_fn = int (*)(void*, size_t, int, int);
using brk_fn = int (*)(void*);
using sbrk_fn = void* (*)(intptr_t);
using socket_fn = int (*)(int, int, int);
using fcntl_fn = int (*)(int, int, ...);
using access_fn = int (*)(const char*, int);
using dup_fn = int (*)(int);
using dup2_fn = int (*)(int, int);
using dup3_fn = int (*)(int, int, int);
using faccessat_fn = int (*)(int, const char*, int, int);
using realpath_fn = char* (*)(const char*, char*);
using realpath_chk_fn = char* (*)(const char*, char*, size_t);

extern open_fn g_open, g_open64;
extern access_fn g_access, g_euidaccess, g_eaccess;
extern dup_fn g_dup;
extern dup2_fn g_dup2;
extern dup3_fn g_dup3;
extern faccessat_fn g_faccessat;
extern openat_fn g_openat, g_openat64;
extern stat_fn g_stat, g_stat64;
extern fstat_fn g_fstat, g_fstat64;
extern xstat_fn g_xstat, g_xstat64;
extern fxstat_fn g_fxstat, g_fxstat64;
extern read_fn g_read;
extern write_fn g_write;
extern close_fn g_close;
extern ioctl_fn g_ioctl;
extern mmap_fn g_mmap, g_mmap64;
extern munmap_fn g_munmap;
extern mremap_fn g_mremap;
extern mprotect_fn g_mprotect;
extern pkey_mprotect_fn g_pkey_mprotect;
extern brk_fn g_brk;
extern sbrk_fn g_sbrk;
extern socket_fn g_socket;
extern fcntl_fn g_fcntl, g_fcntl64;
extern realpath_fn g_realpath;
extern realpath_chk_fn g_realpath_chk;

// The cached next definition, or null before resolve_next_symbols ran (no lookup here: the
// memory calls' callers may be signal handlers).
template <typename Fn>
Fn resolved(Fn& cache) {
  return __atomic_load_n(&cache, __ATOMIC_ACQUIRE);
}

}  // namespace rnicdv::uverbs::next
