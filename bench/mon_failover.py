#!/usr/bin/env python3
"""Monitor failover, measured as an operator meets it (issue 14, point 3).

For each `shoal` binary given (e.g. the code before a change and after it,
in the same run), against a fresh `shoal dev up --mons 3` cluster of real
processes on loopback:

  (a) --kills N times: SIGKILL the leader monitor, then run
      `shoal osd pool create` at once (again until it succeeds) and time
      it from the kill; restart the killed monitor and wait for a quorum
      of three before the next kill. Prints p50 / p99 / max.
  (b) --runs M times each, `shoal status` and `shoal config set` (a
      write), with all three monitors up, then with one monitor SIGKILLed
      (the first in mon_host that is not the leader, so the quorum stays):
      p50 / p99 per command, and what the dead monitor adds at the median.

Each figure includes starting the CLI process, as a user's command does.

Usage: bench/mon_failover.py [--kills N] [--runs M] [--dir DIR] SHOAL...
  (default SHOAL: target/release/shoal)
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def pct(xs, q):
    s = sorted(xs)
    return s[min(len(s) - 1, int(len(s) * q))] if s else float("nan")


class Cluster:
    def __init__(self, shoal, base):
        self.shoal = shoal
        self.dir = os.path.join(base, "cluster")
        self.conf = os.path.join(self.dir, "shoal.conf")
        self.env = dict(os.environ, SHOAL_CONF=self.conf)

    def run(self, *args, timeout=60):
        return subprocess.run(
            [self.shoal, *args], env=self.env, capture_output=True, text=True, timeout=timeout
        )

    def up(self):
        shutil.rmtree(self.dir, ignore_errors=True)
        r = self.run("dev", "up", "--dir", self.dir, "--mons", "3", "--osds", "1",
                     "--store", "mem", timeout=300)
        if r.returncode != 0:
            sys.exit(f"dev up failed: {r.stderr}")

    def down(self):
        self.run("dev", "down", "--dir", self.dir, "--wipe", timeout=120)

    def pid(self, mon):
        with open(os.path.join(self.dir, "run", f"mon.{mon}.pid")) as f:
            return int(f.read().strip())

    def status(self):
        r = self.run("status", "--format", "json", timeout=30)
        return json.loads(r.stdout) if r.returncode == 0 else None

    def wait_quorum(self, n, max_s=60):
        end = time.monotonic() + max_s
        while time.monotonic() < end:
            s = self.status()
            if s and s.get("leader") and len(s.get("quorum", [])) == n:
                return s
            time.sleep(0.2)
        sys.exit(f"no quorum of {n} within {max_s} s")

    def kill(self, mon):
        os.kill(self.pid(mon), signal.SIGKILL)

    def restart(self, mon):
        log = open(os.path.join(self.dir, "out", f"mon.{mon}.log"), "a")
        child = subprocess.Popen(
            [self.shoal, "--conf", self.conf, "mon", "--id", mon,
             "--data", os.path.join(self.dir, f"mon.{mon}")],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        with open(os.path.join(self.dir, "run", f"mon.{mon}.pid"), "w") as f:
            f.write(f"{child.pid}\n")

    def timed(self, *args):
        t = time.monotonic()
        r = self.run(*args)
        return time.monotonic() - t, r


def failover(c, kills):
    times, tries = [], []
    for i in range(kills):
        c.wait_quorum(3)
        time.sleep(1.0)  # let the restarted monitor settle into the quorum
        leader = c.wait_quorum(3)["leader"]
        t0 = time.monotonic()
        c.kill(leader)
        n = 0
        while True:
            n += 1
            r = c.run("osd", "pool", "create", f"fo{i}", "8", "replicated",
                      "--size", "1", "--min-size", "1")
            if r.returncode == 0 or "exists" in r.stderr.lower():
                break
            if time.monotonic() - t0 > 120:
                sys.exit(f"no pool create within 120 s of the kill: {r.stderr}")
        times.append((time.monotonic() - t0) * 1e3)
        tries.append(n)
        print(f"  kill {i + 1}/{kills}: mon.{leader} -> pool create after "
              f"{times[-1]:.0f} ms ({n} tries)", file=sys.stderr)
        c.restart(leader)
    return times, tries


def commands(c, runs, tag):
    out = {}
    for name, args in [("status", ["status", "--format", "json"]),
                       ("config set", None)]:
        lat = []
        for i in range(runs):
            a = args or ["config", "set", f"client.bench{i}", "ms_request_timeout_ms",
                         str(1000 + i)]
            dt, r = c.timed(*a)
            if r.returncode != 0:
                sys.exit(f"{name} failed ({tag}): {r.stderr}")
            lat.append(dt * 1e3)
        out[name] = lat
    return out


def bench(shoal, kills, runs, base):
    c = Cluster(shoal, base)
    print(f"{shoal}: dev up --mons 3 ...", file=sys.stderr)
    c.up()
    try:
        times, tries = failover(c, kills)
        s = c.wait_quorum(3)
        time.sleep(1.0)
        up = commands(c, runs, "all up")
        mons = [m["name"] for m in s["monmap"]["mons"]]
        dead = next(m for m in mons if m != s["leader"])
        c.kill(dead)
        c.wait_quorum(2)
        time.sleep(1.0)
        down = commands(c, runs, f"mon.{dead} dead")
    finally:
        c.down()
    return {"shoal": shoal, "kills": kills, "failover_ms": times, "tries": tries,
            "dead_mon": dead, "all_up_ms": up, "one_dead_ms": down}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--kills", type=int, default=20)
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--dir", default=None)
    p.add_argument("shoal", nargs="*")
    a = p.parse_args()
    bins = a.shoal or [os.path.join(ROOT, "target", "release", "shoal")]
    base = a.dir or tempfile.mkdtemp(prefix="shoal-monfail-")
    results = [bench(os.path.abspath(b), a.kills, a.runs, os.path.join(base, str(i)))
               for i, b in enumerate(bins)]
    for r in results:
        f = r["failover_ms"]
        print(f"\n{r['shoal']}")
        print(f"(a) leader SIGKILL -> first `osd pool create` done, {r['kills']} kills: "
              f"p50 {pct(f, .5):.0f} ms, p99 {pct(f, .99):.0f} ms, max {max(f):.0f} ms, "
              f"min {min(f):.0f} ms (CLI runs: {sum(r['tries'])})")
        print(f"(b) per command (ms, incl. CLI start), mon.{r['dead_mon']} killed for 'one dead':")
        print(f"    {'command':<12}{'all up p50':>12}{'p99':>9}{'one dead p50':>15}{'p99':>9}"
              f"{'added p50':>12}")
        for cmd in r["all_up_ms"]:
            u, d = r["all_up_ms"][cmd], r["one_dead_ms"][cmd]
            print(f"    {cmd:<12}{pct(u, .5):>12.1f}{pct(u, .99):>9.1f}{pct(d, .5):>15.1f}"
                  f"{pct(d, .99):>9.1f}{pct(d, .5) - pct(u, .5):>12.1f}")
    print("\n" + json.dumps(results))


if __name__ == "__main__":
    main()
