# gdb script: every goroutine's stack, grouped by the function it started
# in and the one that started it, with the size the runtime gave it and
# the bytes it uses. runtime.MemStats.StackInuse counts stack spans, not
# stacks, so a difference of two readings can be off by the free slots of
# spans left partly used; this reads runtime.allgs itself (the runtime's
# own field names: g.stack, g.sched.sp, g.startpc, g.gopc, atomicstatus).
#
#   GSOUT=/tmp/stacks.txt gdb -q -batch -p PID -ex 'source goroutine_stacks.py'
#
# (attach while the process is held where you want to look: bench's
# BenchmarkStream2000 with BATCHER_BENCH_PROFILES set writes its profiles
# at that point; gdb stops the process while it reads.)
import collections
import os

import gdb

gdb.execute("set pagination off")
allgs = gdb.parse_and_eval("'runtime.allgs'")
n, arr = int(allgs["len"]), allgs["array"]
names = {}


def sym(pc):
    if pc not in names:
        try:
            s = gdb.execute("info symbol 0x%x" % pc, to_string=True)
            names[pc] = s.split(" in section")[0].split(" + ")[0].strip()
        except gdb.error:
            names[pc] = hex(pc)
    return names[pc]


DEAD = 6  # _Gdead: a free g, which may keep a stack for its next use
groups = collections.defaultdict(lambda: [0, 0, 0, collections.Counter()])
total = count = 0
for i in range(n):
    g = arr[i].dereference()
    lo, hi = int(g["stack"]["lo"]), int(g["stack"]["hi"])
    if hi == lo:
        continue
    status, sp = int(g["atomicstatus"]["value"]), int(g["sched"]["sp"])
    used = hi - sp if lo <= sp <= hi else 0
    key = ("(free g)", "") if status == DEAD else (sym(int(g["startpc"])), sym(int(g["gopc"])))
    grp = groups[key]
    grp[0] += 1
    grp[1] += hi - lo
    grp[2] += used
    grp[3][hi - lo] += 1
    total += hi - lo
    count += 1
with open(os.environ.get("GSOUT", "goroutine-stacks.txt"), "w") as out:
    out.write("%d bytes of stacks in %d goroutines\n" % (total, count))
    for (start, by), (k, size, used, sizes) in sorted(groups.items(), key=lambda kv: -kv[1][1]):
        out.write("%10d B %6d goroutines, %6d B used each, sizes %s: %s, started by %s\n"
                  % (size, k, used // k, dict(sizes), start, by))
