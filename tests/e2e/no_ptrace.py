"""Runs a command where ptrace and process_vm_readv fail with EPERM for it and every process it
starts, as in a container whose seccomp profile denies them: a real kernel filter (libseccomp).

  no_ptrace.py COMMAND [ARG...]
"""
import errno
import os
import sys

import seccomp

rules = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
for call in ("ptrace", "process_vm_readv"):
    rules.add_rule(seccomp.ERRNO(errno.EPERM), call)
rules.load()
os.execvp(sys.argv[1], sys.argv[1:])
