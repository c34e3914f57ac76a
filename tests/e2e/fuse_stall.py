"""A FUSE filesystem that answers the kernel's INIT and then never answers again: whatever touches it
waits in the kernel, and once a fatal signal has come, in uninterruptible sleep (D) that not even
SIGKILL ends, as on a hung NFS or FUSE mount. Ending this process (by its pid) aborts the connection
and frees them. Speaks /dev/fuse directly (the kernel's FUSE protocol, <linux/fuse.h>), so it needs
no libfuse; root only (mount(2)).

    python3 fuse_stall.py MOUNTPOINT     # prints "mounted" once the kernel has its INIT answer
"""
import ctypes
import os
import struct
import sys

FUSE_INIT = 26
IN_HEADER = struct.Struct("<IIQQIIIHH")   # len, opcode, unique, nodeid, uid, gid, pid, total_extlen, padding
OUT_HEADER = struct.Struct("<IiQ")        # len, error, unique
INIT_IN = struct.Struct("<IIII")          # major, minor, max_readahead, flags (the rest unread)
INIT_OUT = struct.Struct("<IIIIHHIIHHII24x")  # major minor readahead flags bg congestion max_write gran pages align flags2 depth


def main():
    mountpoint = sys.argv[1]
    fd = os.open("/dev/fuse", os.O_RDWR)
    libc = ctypes.CDLL(None, use_errno=True)
    options = f"fd={fd},rootmode=40000,user_id=0,group_id=0,allow_other".encode()
    if libc.mount(b"dtl-fuse-stall", mountpoint.encode(), b"fuse", 0, options) != 0:
        sys.exit(f"fuse_stall: mount {mountpoint}: {os.strerror(ctypes.get_errno())}")
    while True:
        request = os.read(fd, 1 << 20)
        _, opcode, unique, *_ = IN_HEADER.unpack_from(request)
        if opcode != FUSE_INIT:
            continue  # read, so the kernel counts it as sent, and never answered
        major, minor, readahead, _ = INIT_IN.unpack_from(request, IN_HEADER.size)
        body = INIT_OUT.pack(major, minor, readahead, 0, 1, 1, 4096, 1, 1, 0, 0, 0)
        os.write(fd, OUT_HEADER.pack(OUT_HEADER.size + len(body), 0, unique) + body)
        print("mounted", flush=True)


if __name__ == "__main__":
    main()
