#!/usr/bin/env python3
"""Two dtlaunch builds (and the new one with --job_cgroup=0), 150 launches of 4 `true` workers each,
interleaved so that load from others falls on all alike.

  scripts/bench/launch_old_new.py NEW_DTLAUNCH OLD_DTLAUNCH
"""
import subprocess, time, statistics, sys
new, old = sys.argv[1], sys.argv[2]
cases=[("old",[old,"--nproc_per_node=4","--master_port=0","--no_python","true"]),
       ("new, job cgroup",[new,"--nproc_per_node=4","--master_port=0","--no_python","true"]),
       ("new, --job_cgroup=0",[new,"--job_cgroup=0","--nproc_per_node=4","--master_port=0","--no_python","true"])]
ts={n:[] for n,_ in cases}
for i in range(150):
    for n,c in cases:
        t=time.perf_counter(); subprocess.run(c,stdout=subprocess.DEVNULL,stderr=subprocess.DEVNULL); ts[n].append((time.perf_counter()-t)*1000)
for n,_ in cases:
    v=sorted(ts[n]); print(f"{n}: median {statistics.median(v):.2f} ms, min {v[0]:.2f} ms, p90 {v[int(len(v)*0.9)]:.2f} ms")
