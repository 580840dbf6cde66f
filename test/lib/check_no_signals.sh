#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# A library lives inside other people's programs: none of rnicdv's takes over signals or
# changes page protections behind the program's back. Each library's undefined dynamic
# symbols must not include the calls that would (sigaction, signal, sigsetjmp/siglongjmp,
# mprotect); the simulated HCA wakes on eventfd and userfaultfd instead, and reaches
# application memory with process_vm_readv/writev.
#
#   check_no_signals.sh LIBRARY...
set -u
status=0
for lib in "$@"; do
  [ -e "$lib" ] || continue
  found=$(nm -D --undefined-only "$lib" | awk '{print $NF}' |
          grep -E '^(sigaction|__sigaction|signal|sysv_signal|bsd_signal|sigset|__sigsetjmp|sigsetjmp|siglongjmp|__longjmp_chk|longjmp|_longjmp|setjmp|_setjmp|mprotect|pkey_mprotect)(@|$)')
  if [ -n "$found" ]; then
    echo "$(basename "$lib") imports: $(echo $found)" >&2
    status=1
  else
    echo "== $(basename "$lib"): no signal handling, no mprotect"
  fi
done
exit $status
