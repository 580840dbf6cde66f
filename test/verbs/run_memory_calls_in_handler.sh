#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# The shim looks up libc's definitions of the calls it interposes at load time, not at their
# first use: a program's first mprotect, munmap, mremap, brk or sbrk may come from a signal
# handler, where dlsym must not run. memory_calls_in_handler makes its first such calls from
# a SIGUSR1 handler; the dynamic linker's trace (LD_DEBUG=bindings) must show the shim's
# lookups of them before "main starts", and none between it and "handler done".
#
#   run_memory_calls_in_handler.sh SHIM PROGRAM
set -u
shim=$1 prog=$2
trace=$(RNICDV_UVERBS_DEVICES=1 LD_DEBUG=bindings LD_PRELOAD="$shim" timeout -s KILL 60 "$prog" 2>&1)
rc=$?
if [ $rc -ne 0 ]; then
  echo "FAILED: $prog exited with $rc"
  echo "$trace" | tail -20
  exit 1
fi
names='open|open64|openat|openat64|stat|stat64|fstat|fstat64|__xstat|__xstat64|__fxstat'
names+='|__fxstat64|access|euidaccess|eaccess|faccessat|read|write|close|ioctl|dup|dup2|dup3'
names+='|mmap|mmap64|munmap|mremap|mprotect|pkey_mprotect|brk|sbrk|socket|fcntl|fcntl64'
names+='|realpath|__realpath_chk'
# "binding file <shim> [0] to <libc> [0]: normal symbol `mprotect'": the shim's lookup.
lookup="binding file [^ ]*$(basename "$shim") \[[0-9]+\] to [^ ]+ \[[0-9]+\]: normal symbol \`($names)'"
before=$(echo "$trace" | sed -n '/^main starts$/q;p')
during=$(echo "$trace" | sed -n '/^main starts$/,/^handler done$/p')
if ! echo "$trace" | grep -qx 'handler done'; then
  echo "FAILED: the program's markers are missing"
  echo "$trace" | tail -20
  exit 1
fi
status=0
for fn in mmap munmap mremap mprotect pkey_mprotect brk sbrk; do
  if ! echo "$before" | grep -Eq "binding file [^ ]*$(basename "$shim") \[[0-9]+\] to [^ ]+ \[[0-9]+\]: normal symbol \`$fn'"; then
    echo "FAILED: no lookup of $fn by the shim before main"
    status=1
  fi
done
late=$(echo "$during" | grep -E "$lookup")
if [ -n "$late" ]; then
  echo "FAILED: the shim looked up libc functions from the program's signal handler:"
  echo "$late"
  status=1
fi
[ $status -eq 0 ] && echo "every lookup made at load; none from the handler"
exit $status
