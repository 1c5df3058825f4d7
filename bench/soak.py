#!/usr/bin/env python3
"""The whole product at once, under faults, for a bounded time (issue 49).

A dev cluster of BlockStore OSDs, 3 monitors, 2 managers, 2 metadata
servers and 2 S3 gateways carries four workloads at once, each checking
what it reads against what it was acknowledged:

- objects: `shoal bench history` (every acknowledged write remembered,
  every read checked, every object read again at the end);
- a block image served by `shoal nbd serve`, written by fio with
  `verify=crc32c` a region at a time, every region read and verified once
  more at the end;
- S3 on a versioned bucket through both gateways: PUTs, GETs of any
  version kept (content compared), DELETEs of versions and of keys; every
  version kept is read back and listed at the end;
- the file system: a tree untarred, compared with the local copy and
  removed, over and over, and a probe writing a small file with fsync every
  few hundred milliseconds.

Meanwhile a fault lands every FAULT_MIN..FAULT_MAX seconds, the kinds taken
in a shuffled cycle so that a short run sees several: SIGKILL of an OSD,
of the monitor leader, of the active MDS, of a gateway or of the active
manager (each started again after a while, as systemd would), an OSD marked
out and back in, an OSD's disk filled to its full ratio (a one-PG, one-copy
pool written until the monitors report OSD_FULL, held, then deleted).

At the end the faults stop, the workloads make their final checks, every
PG must be active+clean, every OSD deep-scrubs and no scrub error or
damage may be reported. The report (one JSON object on stdout, a summary
on stderr) gives acknowledged writes lost (goal 0), the longest stall each
front end saw, and each daemon's memory at the start, the middle and the
end (goal: none grows more than 10 % over the second half; daemons
restarted in the second half are not compared). Exits 1 when any check
fails, 2 on bad usage.

Usage: bench/soak.sh --minutes N [--seed S] [--fault-every MIN MAX]
       [--hold SECS] [--faults KIND,...] [--osds N] [--osd-gib G] [--keep]
  kinds: kill_osd kill_mon_leader kill_mds kill_gateway kill_mgr
         osd_out_in osd_full
  SHOAL=path/to/shoal (default: target/release/shoal, else target/debug/shoal)
Needs fio (with its nbd engine), python3-boto3, fuse3 and /dev/fuse; what
is missing is skipped and named in the report (the objects workload and the
faults always run).
"""

import argparse
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def log(msg):
    t = time.strftime("%H:%M:%S")
    print(f"[soak {t}] {msg}", file=sys.stderr, flush=True)


def free_port():
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Failure(Exception):
    pass


class Cluster:
    """The dev cluster in DIR and the daemons the soak adds to it."""

    def __init__(self, shoal, d):
        self.shoal = shoal
        self.dir = d
        self.conf = os.path.join(d, "shoal.conf")
        self.extra = {}  # name -> Popen of daemons started here
        self.restarted = {}  # name -> last restart time

    def run(self, *args, timeout=60, check=True):
        p = subprocess.run(
            [self.shoal, "--conf", self.conf, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and p.returncode != 0:
            raise Failure(f"shoal {' '.join(args)}: {p.stderr.strip()[-400:]}")
        return p

    def json(self, *args, timeout=30):
        return json.loads(self.run(*args, "--format", "json", timeout=timeout).stdout)

    def try_json(self, *args, timeout=15):
        try:
            return self.json(*args, timeout=timeout)
        except (Failure, subprocess.TimeoutExpired, ValueError):
            return None

    def pid_file(self, name):
        return os.path.join(self.dir, "run", f"{name}.pid")

    def pid(self, name):
        try:
            return int(open(self.pid_file(name)).read().strip())
        except (OSError, ValueError):
            return None

    def names(self):
        run = os.path.join(self.dir, "run")
        return sorted(f[:-4] for f in os.listdir(run) if f.endswith(".pid"))

    def spawn(self, name, argv, cwd=None):
        """Starts a daemon as `shoal dev` does: own process group, its log
        appended to out/NAME.log, its pid in run/NAME.pid."""
        out = open(os.path.join(self.dir, "out", f"{name}.log"), "ab")
        p = subprocess.Popen(
            argv,
            cwd=cwd or self.dir,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,
        )
        out.close()
        with open(self.pid_file(name), "w") as f:
            f.write(f"{p.pid}\n")
        self.extra[name] = p
        return p

    def kill9(self, name):
        """SIGKILLs daemon NAME and waits until it is gone; returns how to
        start it again (its command line and directory)."""
        pid = self.pid(name)
        if pid is None:
            raise Failure(f"no pid for {name}")
        argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")[:-1]
        cwd = os.readlink(f"/proc/{pid}/cwd")
        os.kill(pid, signal.SIGKILL)
        deadline = time.time() + 10
        while time.time() < deadline:
            p = self.extra.get(name)
            if p is not None and p.pid == pid:
                p.poll()
            try:
                state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
            except OSError:
                break
            if state == "Z":
                break
            time.sleep(0.05)
        return [a.decode() for a in argv], cwd

    def restart(self, name, how):
        argv, cwd = how
        self.spawn(name, argv, cwd)
        self.restarted[name] = time.time()

    def rss_kib(self, name):
        pid = self.pid(name)
        try:
            for line in open(f"/proc/{pid}/status"):
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        except (OSError, TypeError):
            pass
        return None

    def pg_clean(self):
        v = self.try_json("pg", "stat")
        if not v or not v.get("num_pgs"):
            return False
        n = sum(s["num"] for s in v["num_pg_by_state"] if s["name"] == "active+clean")
        return n == v["num_pgs"]

    def health_codes(self):
        v = self.try_json("health")
        if v is None:
            return None
        return {c.get("code") for c in v.get("checks", [])}

    def until(self, what, secs, f):
        deadline = time.time() + secs
        while not f():
            if time.time() > deadline:
                raise Failure(f"not {what} within {secs} s")
            time.sleep(1)


class Workload:
    """What one front end's workload counts."""

    def __init__(self, name):
        self.name = name
        self.ok = 0
        self.failed = 0
        self.errors = {}
        self.lost = 0  # acknowledged writes not read back as written
        self.problems = []  # check failures, in words
        self.last_ok = None
        self.max_stall = 0.0
        self.stall_at = None  # when the longest stall began, since T0
        self.t0 = time.time()
        self.skipped = None
        self.lock = threading.Lock()

    def success(self, n=1):
        now = time.time()
        with self.lock:
            if self.last_ok is not None and now - self.last_ok > self.max_stall:
                self.max_stall = now - self.last_ok
                self.stall_at = self.last_ok - self.t0
            self.last_ok = now
            self.ok += n

    def stall(self, secs, ended=None):
        """A stall of SECS seen otherwise (one op's latency), ended at
        ENDED (now when not given)."""
        with self.lock:
            if secs > self.max_stall:
                self.max_stall = secs
                self.stall_at = (ended or time.time()) - secs - self.t0

    def error(self, what):
        key = str(what).strip().splitlines()[-1][:160] if str(what).strip() else type(what).__name__
        with self.lock:
            self.failed += 1
            self.errors[key] = self.errors.get(key, 0) + 1

    def problem(self, what, lost=0):
        with self.lock:
            self.problems.append(str(what)[:400])
            self.lost += lost
        log(f"{self.name}: CHECK FAILED: {str(what)[:400]}")

    def report(self):
        return {
            "ok_ops": self.ok,
            "failed_ops": self.failed,
            "errors": dict(sorted(self.errors.items(), key=lambda kv: -kv[1])[:8]),
            "lost_acked_writes": self.lost,
            "longest_stall_s": round(self.max_stall, 2),
            "longest_stall_began_at_s": None if self.stall_at is None else round(self.stall_at, 1),
            "check_failures": self.problems[:20],
            "skipped": self.skipped,
        }


# ---------------------------------------------------------------- objects


def objects_workload(c, w, secs, stop):
    p = subprocess.Popen(
        [c.shoal, "--conf", c.conf, "bench", "-p", "rbd", "history", str(secs),
         "--objects", "64", "-t", "4", "--format", "json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = p.communicate()
    try:
        r = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        w.problem(f"bench history printed no report (rc {p.returncode}): {err.strip()[-400:]}")
        return
    w.ok = r["acked_writes"] + r["reads"] - r["failed_reads"]
    w.failed = r["failed_writes"] + r["failed_reads"]
    w.errors = {e["error"][:160]: e["count"] for e in r["errors"][:8]}
    w.max_stall = r["max_stall_s"]
    # When: the longest run of seconds without an acknowledged write.
    best, run = (0, None), 0
    for i, n in enumerate(r.get("acks_per_s", [])):
        run = run + 1 if n == 0 else 0
        if run > best[0]:
            best = (run, i - run + 1)
    w.stall_at = best[1]
    for v in r["violations"]:
        w.problem(f"violation: {v}", lost=1)
    for v in r["unread_at_end"]:
        w.problem(f"unreadable at the end: {v}", lost=1)
    if p.returncode != 0 and not w.problems:
        w.problem(f"bench history exited {p.returncode}: {err.strip()[-400:]}")


# ------------------------------------------------------------------- NBD

NBD_REGION = 16 << 20


def fio(uri, region, bs, seed, verify_only=False, timeout=300):
    args = [
        "fio", "--name=soak", "--ioengine=nbd", f"--uri={uri}",
        f"--offset={region * NBD_REGION}", f"--size={NBD_REGION}",
        f"--bs={bs}", "--rw=randwrite", "--iodepth=8", "--verify=crc32c",
        "--verify_fatal=1", "--verify_state_save=0", f"--randseed={seed}", "--output-format=json",
    ]
    if verify_only:
        args.append("--verify_only")
    p = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    text = p.stdout
    try:
        j = json.loads(text[text.index("{"):])
    except ValueError:
        j = None
    return p, j


def fio_verdict(p, j):
    """'ok', 'corrupt' (a verify failed) or 'error' (an I/O error)."""
    text = (p.stdout or "") + (p.stderr or "")
    if "verify: bad" in text or "bad header" in text or "bad magic" in text or "crc32c" in text and "wanted" in text:
        return "corrupt"
    if p.returncode != 0 or j is None or j["jobs"][0].get("error", 0) != 0:
        return "error"
    return "ok"


def nbd_workload(c, w, stop, regions=12):
    uri = f"nbd://{c.nbd_addr}/rbd/soak"
    written = c.nbd_regions = {}  # region -> (bs, seed) of its last verified run
    rng = random.Random(7)
    last_done = time.time()
    while not stop.is_set():
        region = rng.randrange(regions)
        bs = rng.choice(["4k", "64k"])
        seed = rng.randrange(1, 1 << 30)
        try:
            p, j = fio(uri, region, bs, seed)
        except subprocess.TimeoutExpired:
            w.error("fio ran over 300 s")
            continue
        v = fio_verdict(p, j)
        if v == "corrupt":
            w.problem(f"region {region}: {(p.stdout + p.stderr)[-400:]}", lost=1)
            continue
        if v == "error":
            # The region's contents are now partly the interrupted run's:
            # it is no longer checked at the end.
            written.pop(region, None)
            w.error((p.stderr or p.stdout).strip()[-160:] or f"fio exit {p.returncode}")
            time.sleep(1)
            continue
        now = time.time()
        # Longest single op latency, and the gap between runs that ended.
        lat = max(j["jobs"][0]["write"]["clat_ns"]["max"], j["jobs"][0]["read"]["clat_ns"]["max"]) / 1e9
        w.stall(lat)
        if w.failed:
            began = now - j["jobs"][0]["job_runtime"] / 1e3
            w.stall(began - last_done, ended=began)
        last_done = now
        written[region] = (bs, seed)
        w.success(j["jobs"][0]["write"]["total_ios"])


def nbd_final(c, w):
    uri = f"nbd://{c.nbd_addr}/rbd/soak"
    for region, (bs, seed) in sorted(getattr(c, "nbd_regions", {}).items()):
        for attempt in range(5):
            p, j = fio(uri, region, bs, seed, verify_only=True)
            v = fio_verdict(p, j)
            if v == "ok":
                break
            if v == "corrupt":
                w.problem(f"region {region} at the end: {(p.stdout + p.stderr)[-400:]}", lost=1)
                break
            time.sleep(2)
        else:
            w.problem(f"region {region} unreadable at the end: {(p.stderr or p.stdout)[-300:]}", lost=1)


# -------------------------------------------------------------------- S3


def s3_clients(c):
    import boto3
    from botocore.config import Config

    user = json.load(open(os.path.join(c.dir, "gateway", "user.json")))
    keys = user["keys"][0] if "keys" in user else user
    access = keys.get("access_key") or keys.get("access_key_id")
    secret = keys.get("secret_key") or keys.get("secret_access_key")
    cfg = Config(retries={"max_attempts": 1}, connect_timeout=5, read_timeout=30,
                 s3={"addressing_style": "path"})
    return [
        boto3.client("s3", endpoint_url=f"http://{a}", aws_access_key_id=access,
                     aws_secret_access_key=secret, region_name="us-east-1", config=cfg)
        for a in c.gateway_addrs
    ]


def s3_workload(c, w, stop):
    clients = s3_clients(c)
    bucket = "soak"
    rng = random.Random(11)
    kept = c.s3_kept = {}  # (key, version) -> sha256
    by_key = {}  # key -> [versions, oldest first]
    which = 0

    def call(f):
        nonlocal which
        for _ in range(len(clients)):
            cl = clients[which % len(clients)]
            try:
                return f(cl)
            except Exception as e:  # noqa: BLE001 - any failure is counted
                resp = getattr(e, "response", None) or {}
                w.error(resp.get("Error", {}).get("Code") or type(e).__name__)
                which += 1
        time.sleep(0.5)  # both refused: no hot loop while it lasts
        return None

    # Made before the faults begin, so it cannot fail.
    for cl in clients[:1]:
        try:
            cl.create_bucket(Bucket=bucket)
        except Exception as e:  # noqa: BLE001
            if "BucketAlreadyOwnedByYou" not in str(e):
                raise
        cl.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    while not stop.is_set():
        op = rng.random()
        key = f"k{rng.randrange(40)}"
        if op < 0.5:
            body = rng.randbytes(rng.randrange(1, 64 << 10))
            r = call(lambda cl: cl.put_object(Bucket=bucket, Key=key, Body=body))
            if r is None:
                continue
            v = r.get("VersionId")
            if not v:
                w.problem(f"PUT {key} returned no version id")
                continue
            kept[(key, v)] = hashlib.sha256(body).hexdigest()
            by_key.setdefault(key, []).append(v)
            w.success()
            # Bound the space: at most 3 versions a key.
            while len(by_key[key]) > 3:
                old = by_key[key][0]
                if call(lambda cl: cl.delete_object(Bucket=bucket, Key=key, VersionId=old)) is None:
                    break
                by_key[key].pop(0)
                kept.pop((key, old), None)
                w.success()
        elif op < 0.9:
            if not kept:
                continue
            (k, v), digest = rng.choice(list(kept.items()))
            r = call(lambda cl: cl.get_object(Bucket=bucket, Key=k, VersionId=v)["Body"].read())
            if r is None:
                continue
            if hashlib.sha256(r).hexdigest() != digest:
                w.problem(f"GET {k} version {v}: content differs ({len(r)} bytes)", lost=1)
            w.success()
        else:
            # A delete marker: the versions stay and are still read by id.
            if call(lambda cl: cl.delete_object(Bucket=bucket, Key=key)) is not None:
                w.success()


def s3_final(c, w):
    clients = s3_clients(c)
    kept = getattr(c, "s3_kept", {})
    listed = set()
    token = {}
    for _ in range(1000):
        r = clients[0].list_object_versions(Bucket="soak", **token)
        for v in r.get("Versions", []):
            listed.add((v["Key"], v["VersionId"]))
        if not r.get("IsTruncated"):
            break
        token = {"KeyMarker": r["NextKeyMarker"], "VersionIdMarker": r["NextVersionIdMarker"]}
    for (k, v), digest in sorted(kept.items()):
        if (k, v) not in listed:
            w.problem(f"version {k} {v} not listed at the end", lost=1)
        try:
            body = clients[1 % len(clients)].get_object(Bucket="soak", Key=k, VersionId=v)["Body"].read()
        except Exception as e:  # noqa: BLE001
            w.problem(f"GET {k} {v} at the end: {e}", lost=1)
            continue
        if hashlib.sha256(body).hexdigest() != digest:
            w.problem(f"GET {k} {v} at the end: content differs", lost=1)


# ----------------------------------------------------------- file system


def tree_differences(local, into, excused):
    """Paths under LOCAL whose copy under INTO is missing or differs,
    leaving out those tar named in an error (EXCUSED, its stderr)."""
    bad = []
    for root, dirs, files in os.walk(local):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            rel = os.path.relpath(os.path.join(root, name), local)
            if rel in excused:
                continue
            a, b = os.path.join(local, rel), os.path.join(into, rel)
            try:
                if os.path.islink(a):
                    same = os.readlink(a) == os.readlink(b)
                else:
                    with open(a, "rb") as fa, open(b, "rb") as fb:
                        same = fa.read() == fb.read()
            except OSError as e:
                same = False
                rel = f"{rel} ({e.strerror})"
            if not same:
                bad.append(rel)
    return bad


def fs_untar_workload(c, w, stop, tarball, local):
    """Untar, compare, remove, over and over. A file tar named in an error
    (ENOSPC while an OSD is full) may differ; every other must be whole:
    a write the client accepted is never dropped without an error."""
    n = 0
    while not stop.is_set():
        into = os.path.join(c.mnt, f"tree{n}")
        n += 1
        try:
            os.makedirs(into)
            t = subprocess.run(["tar", "-C", into, "-xf", tarball], capture_output=True, text=True, timeout=600)
            if t.returncode != 0:
                w.error(t.stderr.strip().splitlines()[-1][-160:] if t.stderr.strip() else f"tar exit {t.returncode}")
            # A refused file's data may arrive once space is back: read
            # after everything written so far has landed or failed.
            fd = os.open(into, os.O_RDONLY)
            try:
                os.fsync(fd)
            except OSError:
                pass
            finally:
                os.close(fd)
            excused = {line.split(": ")[1] for line in t.stderr.splitlines()
                       if line.startswith("tar: ") and line.count(": ") >= 2}
            bad = tree_differences(local, into, excused)
            if bad:
                w.problem(f"tree{n - 1}: {len(bad)} files differ from the local copy with no error from "
                          f"tar (tar exit {t.returncode}): {bad[:5]}", lost=len(bad))
                continue
            if t.returncode == 0:
                w.success()
            r = subprocess.run(["rm", "-rf", into], capture_output=True, text=True, timeout=600)
            if r.returncode != 0:
                w.error(r.stderr.strip()[-160:])
        except (OSError, subprocess.TimeoutExpired) as e:
            w.error(e)
            time.sleep(1)


def fs_probe_workload(c, w, stop):
    """Small writes with fsync: what an application waits for."""
    i = 0
    path = os.path.join(c.mnt, "probe")
    while not stop.is_set():
        data = f"probe {i}\n".encode() * 64
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            try:
                os.write(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            with open(path, "rb") as f:
                got = f.read()
            if got != data:
                w.problem(f"probe {i}: read {len(got)} bytes that differ from the write", lost=1)
            w.success()
        except OSError as e:
            w.error(e)
        i += 1
        time.sleep(0.3)


# ---------------------------------------------------------------- faults

FAULTS = ["kill_osd", "kill_mon_leader", "kill_mds", "kill_gateway", "kill_mgr", "osd_out_in", "osd_full"]


def victim(c, kind, rng):
    """The daemon a kill fault takes (None: none to take)."""
    if kind == "kill_osd":
        return rng.choice([n for n in c.names() if n.startswith("osd.")])
    if kind == "kill_gateway":
        return rng.choice([n for n in c.names() if n.startswith("gateway")])
    if kind == "kill_mon_leader":
        leader = (c.try_json("mon", "stat") or {}).get("leader")
        return f"mon.{leader}" if leader else rng.choice([n for n in c.names() if n.startswith("mon.")])
    if kind == "kill_mds":
        fss = (c.try_json("fs", "status") or {}).get("filesystems") or [{}]
        act = (fss[0].get("active") or {}).get("name")
        return act and f"mds.{act}"
    if kind == "kill_mgr":
        act = ((c.try_json("mgr", "stat") or {}).get("active") or {}).get("name")
        return act and f"mgr.{act}"
    raise ValueError(kind)


def fault(c, kind, rng, hold):
    """Applies one fault, holds it, undoes it; returns a line for the report."""
    if kind == "osd_out_in":
        osd = rng.choice([n for n in c.names() if n.startswith("osd.")])[4:]
        c.run("osd", "out", osd)
        time.sleep(hold)
        c.run("osd", "in", osd)
        return f"osd.{osd}"
    if kind == "osd_full":
        return fill_an_osd(c, hold)
    name = victim(c, kind, rng)
    if not name:
        return "nothing active to kill (skipped)"
    how = c.kill9(name)
    # An OSD stays down for the whole hold; the others come back sooner,
    # as a supervisor would start them.
    time.sleep(hold if kind == "kill_osd" else min(hold, 10))
    c.restart(name, how)
    return name


def fill_an_osd(c, hold):
    """Writes a one-PG, one-copy pool until its OSD is reported full,
    holds, deletes the pool and waits until no OSD is full."""
    pool = "soak.filler"
    c.run("osd", "pool", "create", pool, "1", "replicated", "--size", "1", "--min-size", "1")
    c.run("osd", "pool", "set", pool, "pg_autoscale_mode", "off", check=False)
    blob = os.path.join(c.dir, "filler.bin")
    with open(blob, "wb") as f:
        f.write(os.urandom(16 << 20))
    start = time.time()
    n = 0
    full = False
    try:
        while time.time() - start < 240:
            codes = c.health_codes() or set()
            if "OSD_FULL" in codes:
                full = True
                break
            p = c.run("rados", "-p", pool, "put", f"fill{n}", blob, check=False, timeout=60)
            n += 1
            if p.returncode != 0:
                # The OSD refuses past its own ratio before the monitors say so.
                time.sleep(1)
        took = time.time() - start
        if full:
            time.sleep(hold)
    finally:
        c.run("osd", "pool", "rm", pool, pool, "--yes-i-really-really-mean-it", check=False)
        os.unlink(blob)
    c.until("no OSD full after the filler's deletion", 180,
            lambda: not ({"OSD_FULL", "OSD_BACKFILLFULL"} & (c.health_codes() or {"?"})))
    return f"{n} x 16 MiB written, OSD_FULL after {took:.0f} s" if full else f"{n} x 16 MiB written, never full"


def guarded(f, w):
    """Runs workload F; its crash is a check failure, not a silent stop."""
    def run(*args):
        try:
            f(*args)
        except Exception as e:  # noqa: BLE001
            w.problem(f"the workload stopped: {type(e).__name__}: {e}")
    return run


def faults_loop(c, stop, rng, every, hold, events, only=None):
    kinds = []
    while True:
        if stop.wait(rng.uniform(*every)):
            return
        if not kinds:
            kinds = list(only or FAULTS)
            rng.shuffle(kinds)
        kind = kinds.pop()
        t0 = time.time()
        log(f"fault: {kind}")
        try:
            what = fault(c, kind, rng, hold)
        except Exception as e:  # noqa: BLE001 - a fault that cannot land is reported
            what = f"FAILED: {e}"
        events.append({"at_s": round(t0 - c.t0, 1), "fault": kind, "what": what,
                       "took_s": round(time.time() - t0, 1)})
        log(f"fault: {kind} {what} ({time.time() - t0:.0f} s)")


# ------------------------------------------------------------------ main


def make_tarball(work):
    tar = os.path.join(work, "src.tar")
    subprocess.run(["tar", "-C", ROOT, "--exclude=target", "-cf", tar, "crates/fs", "crates/nbd", "docs"],
                   check=True)
    local = os.path.join(work, "local-tree")
    os.makedirs(local)
    subprocess.run(["tar", "-C", local, "-xf", tar], check=True)
    return tar, local


def have_fuse():
    return os.path.exists("/dev/fuse") and bool(shutil.which("fusermount3") or shutil.which("fusermount"))


def main():
    ap = argparse.ArgumentParser(description="Soak the whole product under faults.")
    ap.add_argument("--minutes", type=float, required=True)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--fault-every", type=float, nargs=2, default=[60, 120], metavar=("MIN", "MAX"))
    ap.add_argument("--hold", type=float, default=20, help="seconds a fault lasts")
    ap.add_argument("--osds", type=int, default=4)
    ap.add_argument("--osd-gib", type=float, default=1.5)
    ap.add_argument("--faults", default=None, help="comma-separated kinds (default: all)")
    ap.add_argument("--keep", action="store_true", help="leave the cluster's directory")
    a = ap.parse_args()
    seed = a.seed if a.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    shoal = os.environ.get("SHOAL") or next(
        (p for p in (f"{ROOT}/target/release/shoal", f"{ROOT}/target/debug/shoal") if os.path.exists(p)), None)
    if not shoal:
        print("soak: build first (cargo build -p shoal)", file=sys.stderr)
        return 2
    shoal = os.path.abspath(shoal)
    only = a.faults.split(",") if a.faults else None
    if only and not set(only) <= set(FAULTS):
        print(f"soak: faults are {', '.join(FAULTS)}", file=sys.stderr)
        return 2
    secs = int(a.minutes * 60)
    work = tempfile.mkdtemp(prefix="shoal-soak.", dir=os.environ.get("TMPDIR", "/var/tmp"))
    d = os.path.join(work, "cluster")
    c = Cluster(shoal, d)
    c.mnt = os.path.join(work, "mnt")
    mount = None
    workloads = {n: Workload(n) for n in ["objects", "nbd", "s3", "fs"]}
    probe = Workload("fs-probe")
    events = []
    report = {"seed": seed, "minutes": a.minutes, "shoal": shoal}
    log(f"seed {seed}, {a.minutes} min, in {work}")
    try:
        up = subprocess.run(
            [shoal, "dev", "up", "--dir", d, "--mons", "3", "--osds", str(a.osds), "--store", "block",
             "--osd-bytes", str(int(a.osd_gib * (1 << 30))), "--fs"],
            capture_output=True, text=True, timeout=300)
        if up.returncode != 0:
            raise Failure(f"dev up: {up.stderr[-2000:]}")
        # A second manager and a second gateway.
        ring = os.path.join(d, "mgr.y.keyring")
        sec = c.run("auth", "get-or-create", "mgr.y", "mon", "allow profile mgr", "osd", "allow r").stdout
        open(ring, "w").write(sec)
        os.makedirs(os.path.join(d, "out"), exist_ok=True)
        c.spawn("mgr.y", [shoal, "--conf", c.conf, "--set", f"keyring={ring}", "-n", "mgr.y", "mgr", "--id", "y",
                          "--bind", "127.0.0.1:0"])
        c.gateway_addrs = [open(os.path.join(d, "gateway", "addr")).read().strip()]
        g2 = f"127.0.0.1:{free_port()}"
        c.spawn("gateway2", [shoal, "--conf", c.conf, "gateway", "--bind", g2])
        c.gateway_addrs.append(g2)
        # The image and its server.
        c.run("rbd", "create", "soak", "--size", "256M")
        c.nbd_addr = f"127.0.0.1:{free_port()}"
        c.spawn("nbd", [shoal, "--conf", c.conf, "nbd", "serve", "--bind", c.nbd_addr])
        c.until("mgr.y standing by", 30, lambda: any(
            s.get("name") == "y" for s in (c.try_json("mgr", "stat") or {}).get("standbys", [])))
        import socket

        for addr in [g2, c.nbd_addr]:
            host, port = addr.split(":")
            c.until(f"{addr} listening", 30, lambda: socket.socket().connect_ex((host, int(port))) == 0)
        # Front ends this machine cannot drive are skipped, and said so.
        if not shutil.which("fio"):
            workloads["nbd"].skipped = "no fio"
        try:
            import boto3  # noqa: F401
        except ImportError:
            workloads["s3"].skipped = "no boto3"
        if not have_fuse():
            workloads["fs"].skipped = "no /dev/fuse or fusermount"
        if not workloads["fs"].skipped:
            os.makedirs(c.mnt)
            mount = subprocess.Popen([shoal, "--conf", c.conf, "fs", "mount", c.mnt],
                                     stdout=open(os.path.join(work, "mount.log"), "w"), stderr=subprocess.STDOUT)
            c.until("the file system mounted", 30,
                    lambda: subprocess.run(["findmnt", c.mnt], capture_output=True).returncode == 0)
            tarball, local = make_tarball(work)

        names = c.names()
        mem = {n: {"start": c.rss_kib(n)} for n in names}
        c.t0 = time.time()
        for w in list(workloads.values()) + [probe]:
            w.t0 = c.t0
        stop = threading.Event()
        fault_stop = threading.Event()
        def start(f, w, *args):
            threads.append(threading.Thread(target=guarded(f, w), args=(c, w, *args)))

        threads = []
        start(objects_workload, workloads["objects"], secs, stop)
        if not workloads["nbd"].skipped:
            start(nbd_workload, workloads["nbd"], stop)
        if not workloads["s3"].skipped:
            start(s3_workload, workloads["s3"], stop)
        if not workloads["fs"].skipped:
            start(fs_untar_workload, workloads["fs"], stop, tarball, local)
            start(fs_probe_workload, probe, stop)
        ft = threading.Thread(target=faults_loop,
                              args=(c, fault_stop, rng, a.fault_every, a.hold, events, only))
        for t in threads + [ft]:
            t.daemon = True
            t.start()
        # The faults end in time for the last one to be undone.
        mid_at = c.t0 + secs / 2
        fault_end = c.t0 + max(secs - 60, secs * 0.6)
        curve = {n: [] for n in names}
        next_sample = c.t0
        mount_gone = False
        while time.time() < c.t0 + secs:
            if time.time() >= next_sample:
                for n in names:
                    curve[n].append(c.rss_kib(n))
                next_sample += 30
            if mid_at and time.time() >= mid_at:
                for n in names:
                    mem[n]["middle"] = c.rss_kib(n)
                mid_at = None
            if time.time() >= fault_end:
                fault_stop.set()
            if mount is not None and mount.poll() is not None and not mount_gone:
                # The mount's own log (mount.log) says why its session ended.
                mount_gone = True
                workloads["fs"].problem(f"the mount process exited early, status {mount.returncode} "
                                        f"(see mount.log)")
            time.sleep(1)
        fault_stop.set()
        ft.join(timeout=400)
        for n in names:
            mem[n]["end"] = c.rss_kib(n)
        stop.set()
        for t in threads:
            t.join(timeout=900)
            if t.is_alive():
                raise Failure(f"a workload did not stop: {t}")
        log("workloads stopped; healing, then the final checks")
        c.until("every PG active+clean", 300, c.pg_clean)
        if not workloads["nbd"].skipped:
            guarded(nbd_final, workloads["nbd"])(c, workloads["nbd"])
        if not workloads["s3"].skipped:
            guarded(s3_final, workloads["s3"])(c, workloads["s3"])
        # Deep scrubs of every OSD; nothing inconsistent.
        for n in c.names():
            if n.startswith("osd."):
                c.run("osd", "deep-scrub", n[4:], check=False)
        time.sleep(3)
        c.until("deep scrubs done", 300, lambda: "scrubbing" not in c.run("pg", "dump", "--format", "json").stdout)
        detail = c.run("health", "detail").stdout
        scrub_ok = not any(k in detail for k in ("INCONSISTENT", "SCRUB_ERRORS", "DAMAGED"))
        report["scrub"] = "clean" if scrub_ok else detail[-1000:]
        report["health_at_end"] = detail.splitlines()[0] if detail else ""
        for n in names:
            m = mem[n]
            restarted = c.restarted.get(n)
            m["restarted_in_second_half"] = bool(restarted and restarted >= c.t0 + secs / 2)
            if m.get("middle") and m.get("end") and not m["restarted_in_second_half"]:
                m["growth_second_half_pct"] = round(100.0 * (m["end"] - m["middle"]) / m["middle"], 1)
        grown = [n for n, m in mem.items() if m.get("growth_second_half_pct", 0) > 10]
        report.update({
            "faults": events,
            "workloads": {n: w.report() for n, w in workloads.items()} | {"fs-probe": probe.report()},
            "lost_acked_writes": sum(w.lost for w in workloads.values()) + probe.lost,
            "memory_kib": mem,
            "memory_every_30s_kib": curve,
            "memory_grew_over_10pct": grown,
        })
        failed = [n for n, w in list(workloads.items()) + [("fs-probe", probe)] if w.problems]
        failed_faults = [e for e in events if str(e["what"]).startswith("FAILED")]
        report["passed"] = not failed and scrub_ok and not failed_faults
        if failed_faults:
            report["faults_failed"] = failed_faults
    except (Failure, OSError, subprocess.SubprocessError) as e:
        report["passed"] = False
        report["error"] = str(e)
        log(f"FAILED: {e}")
    finally:
        if mount is not None:
            mount.terminate()
            try:
                mount.wait(10)
            except subprocess.TimeoutExpired:
                mount.kill()
            subprocess.run(["fusermount3", "-uz", c.mnt], capture_output=True)
        for n, p in c.extra.items():
            if p.poll() is None:
                p.terminate()
        subprocess.run([shoal, "dev", "down", "--dir", d] + ([] if a.keep else ["--wipe"]),
                       capture_output=True, timeout=120)
        for p in c.extra.values():
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(report))
    summary(report)
    return 0 if report.get("passed") else 1


def summary(r):
    log(f"passed: {r.get('passed')}, acknowledged writes lost: {r.get('lost_acked_writes')}, scrub: {r.get('scrub')}")
    for n, w in (r.get("workloads") or {}).items():
        log(f"  {n}: {w['ok_ops']} ok, {w['failed_ops']} failed, longest stall {w['longest_stall_s']} s"
            + (f" from {w['longest_stall_began_at_s']} s" if w.get("longest_stall_began_at_s") is not None else "")
            + (f", skipped: {w['skipped']}" if w["skipped"] else "")
            + (f", CHECK FAILURES: {w['check_failures']}" if w["check_failures"] else ""))
    for e in r.get("faults") or []:
        log(f"  fault at {e['at_s']} s: {e['fault']} {e['what']} ({e['took_s']} s)")
    for n, m in (r.get("memory_kib") or {}).items():
        log(f"  {n}: RSS {m.get('start')} / {m.get('middle')} / {m.get('end')} KiB"
            + (f", second half {m['growth_second_half_pct']:+} %" if "growth_second_half_pct" in m else ""))
    if r.get("error"):
        log(f"error: {r['error']}")


if __name__ == "__main__":
    sys.exit(main())
