#!/usr/bin/env python3
"""A file-system exerciser in the manner of xfstests' fsx.

Usage: fsx.py FILE [-N OPS] [-S SEED] [-l MAXLEN] [--no-mmap] [--no-falloc]

Random reads, writes, truncates (up and down), mapped reads and writes
(msync'd), fallocate (extend, keep size) and punched holes, closes and
reopens and fsyncs on one file, checked against a model of what it must
hold after each operation: every read (plain or mapped) is compared with
the model and the file's size with the model's. On a mismatch it prints
the operations so far and the first differing offset, and exits 1.
"""

import argparse
import ctypes
import mmap
import os
import random
import sys

libc = ctypes.CDLL(None, use_errno=True)
FALLOC_FL_KEEP_SIZE = 1
FALLOC_FL_PUNCH_HOLE = 2


def fallocate(fd, mode, off, length):
    fn = libc.fallocate
    fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
    if fn(fd, mode, off, length) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("-N", "--ops", type=int, default=2000)
    ap.add_argument("-S", "--seed", type=int, default=1)
    ap.add_argument("-l", "--maxlen", type=int, default=1 << 20)
    ap.add_argument("-o", "--maxop", type=int, default=64 << 10)
    ap.add_argument("--no-mmap", action="store_true")
    ap.add_argument("--no-falloc", action="store_true")
    a = ap.parse_args()
    rnd = random.Random(a.seed)
    model = bytearray()
    log = []
    fd = os.open(a.file, os.O_CREAT | os.O_TRUNC | os.O_RDWR, 0o644)

    def fail(why):
        print(f"fsx: {why}", file=sys.stderr)
        for i, l in enumerate(log[-30:]):
            print(f"  {len(log) - min(30, len(log)) + i + 1}: {l}", file=sys.stderr)
        sys.exit(1)

    def check(off, got):
        want = bytes(model[off:off + len(got)])
        if got != want:
            first = next(i for i in range(min(len(got), len(want)) + 1)
                         if i >= len(got) or i >= len(want) or got[i] != want[i])
            fail(f"data mismatch at offset {off + first} (read {len(got)} bytes at {off})")

    def check_size():
        size = os.fstat(fd).st_size
        if size != len(model):
            fail(f"size {size}, expected {len(model)}")

    ops = ["read", "write", "write", "truncate", "reopen", "fsync"]
    if not a.no_mmap:
        ops += ["mapread", "mapwrite"]
    if not a.no_falloc:
        ops += ["falloc", "punch"]
    for n in range(a.ops):
        op = rnd.choice(ops)
        off = rnd.randrange(a.maxlen)
        ln = rnd.randrange(1, a.maxop)
        if op == "read":
            if not model:
                continue
            off %= len(model)
            log.append(f"read {off} {ln}")
            got = os.pread(fd, ln, off)
            want_len = max(0, min(ln, len(model) - off))
            if len(got) != want_len:
                fail(f"short read: {len(got)} of {want_len} at {off}")
            check(off, got)
        elif op == "write":
            ln = min(ln, a.maxlen - off)
            data = rnd.randbytes(ln)
            log.append(f"write {off} {ln}")
            if os.pwrite(fd, data, off) != ln:
                fail("short write")
            if off > len(model):
                model.extend(b"\0" * (off - len(model)))
            model[off:off + ln] = data
            check_size()
        elif op == "truncate":
            size = rnd.randrange(a.maxlen)
            log.append(f"truncate {size}")
            os.ftruncate(fd, size)
            if size < len(model):
                del model[size:]
            else:
                model.extend(b"\0" * (size - len(model)))
            check_size()
        elif op == "reopen":
            log.append("close/open")
            os.close(fd)
            fd = os.open(a.file, os.O_RDWR)
            check_size()
        elif op == "fsync":
            log.append("fsync")
            os.fsync(fd)
        elif op == "mapread":
            if not model:
                continue
            off %= len(model)
            ln = min(ln, len(model) - off)
            log.append(f"mapread {off} {ln}")
            pg = off - off % mmap.PAGESIZE
            m = mmap.mmap(fd, off + ln - pg, offset=pg, access=mmap.ACCESS_READ)
            got = m[off - pg:off - pg + ln]
            m.close()
            check(off, got)
        elif op == "mapwrite":
            ln = min(ln, a.maxlen - off)
            data = rnd.randbytes(ln)
            log.append(f"mapwrite {off} {ln}")
            if off + ln > len(model):
                os.ftruncate(fd, off + ln)
                model.extend(b"\0" * (off + ln - len(model)))
            pg = off - off % mmap.PAGESIZE
            m = mmap.mmap(fd, off + ln - pg, offset=pg)
            m[off - pg:off - pg + ln] = data
            m.flush()
            m.close()
            model[off:off + ln] = data
            check_size()
        elif op == "falloc":
            keep = rnd.random() < 0.5
            ln = min(ln, a.maxlen - off)
            log.append(f"fallocate {off} {ln} keep={keep}")
            fallocate(fd, FALLOC_FL_KEEP_SIZE if keep else 0, off, ln)
            if not keep and off + ln > len(model):
                model.extend(b"\0" * (off + ln - len(model)))
            check_size()
        elif op == "punch":
            if not model:
                continue
            off %= len(model)
            log.append(f"punch {off} {ln}")
            fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off, ln)
            end = min(len(model), off + ln)
            model[off:end] = b"\0" * (end - off)
            check_size()
    # Everything, once more, through a fresh descriptor.
    os.close(fd)
    with open(a.file, "rb") as f:
        got = f.read()
    if len(got) != len(model):
        fail(f"final size {len(got)}, expected {len(model)}")
    check(0, got)
    print(f"fsx: {a.ops} operations, seed {a.seed}, mmap {'off' if a.no_mmap else 'on'}: all checks passed")


if __name__ == "__main__":
    main()
