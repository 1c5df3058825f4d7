#!/usr/bin/env python3
"""A POSIX conformance suite in the manner of pjdfstest, run on a directory.

Usage: posix_suite.py DIR [--json OUT]

Every check names the system call and the case, as pjdfstest's test files
do (open, mkdir, rmdir, unlink, link, symlink, rename, chmod, chown,
truncate, utimensat, mkfifo, mknod, xattrs, statfs, permissions as another
user, sparse and large files, fallocate, mmap, O_APPEND, O_EXCL, names at
NAME_MAX and paths at PATH_MAX, unlink of an open file). Checks that need
root run as root and switch to uid/gid 65534 in a child for the "other
user" cases. The suite must pass whole on a local file system (tmpfs,
ext4): that is how its own checks are checked.

Prints one line per check and a summary; exits 0 when every check passed.
"""

import ctypes
import errno
import json
import mmap
import os
import stat
import sys
import time
import traceback

ROOT = os.path.abspath(sys.argv[1])
RESULTS = []
CHECKS = []
NOBODY = 65534

libc = ctypes.CDLL(None, use_errno=True)


def check(fn):
    CHECKS.append(fn)
    return fn


def expect_errno(codes, f, *args, **kw):
    codes = codes if isinstance(codes, (tuple, list)) else (codes,)
    try:
        f(*args, **kw)
    except OSError as e:
        if e.errno in codes:
            return
        raise AssertionError(
            f"{f.__name__}: errno {errno.errorcode.get(e.errno, e.errno)}, "
            f"expected {[errno.errorcode[c] for c in codes]}")
    raise AssertionError(f"{f.__name__} succeeded, expected {[errno.errorcode[c] for c in codes]}")


def as_user(f, uid=NOBODY, gid=NOBODY):
    """Runs f() in a child as uid/gid; raises what it raised (as text)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            f()
            os.write(w, b"ok")
        except BaseException as e:  # noqa: BLE001 - reported to the parent
            os.write(w, f"{type(e).__name__}: {e}".encode())
        finally:
            os._exit(0)
    os.close(w)
    out = b""
    while True:
        b = os.read(r, 4096)
        if not b:
            break
        out += b
    os.close(r)
    os.waitpid(pid, 0)
    if out != b"ok":
        raise AssertionError(f"as uid {uid}: {out.decode()}")


def renameat2(old, new, flags):
    AT_FDCWD = -100
    fn = libc.renameat2
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if fn(AT_FDCWD, old.encode(), AT_FDCWD, new.encode(), flags) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def fallocate(fd, mode, off, length):
    fn = libc.fallocate
    fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
    if fn(fd, mode, off, length) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


FALLOC_FL_KEEP_SIZE = 1
FALLOC_FL_PUNCH_HOLE = 2
RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2


def p(*parts):
    return os.path.join(ROOT, *parts)


def write(path, data=b"", mode=0o644):
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, mode)
    os.write(fd, data)
    os.close(fd)


def read(path):
    with open(path, "rb") as f:
        return f.read()


# ---- open ------------------------------------------------------------

@check
def open_creat_mode_follows_umask():
    old = os.umask(0o022)
    try:
        fd = os.open(p("m"), os.O_CREAT | os.O_WRONLY, 0o777)
        os.close(fd)
        assert stat.S_IMODE(os.stat(p("m")).st_mode) == 0o755
    finally:
        os.umask(old)


@check
def open_excl_on_existing_is_eexist():
    write(p("e"))
    expect_errno(errno.EEXIST, os.open, p("e"), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)


@check
def open_excl_on_symlink_is_eexist():
    os.symlink("nowhere", p("l"))
    expect_errno(errno.EEXIST, os.open, p("l"), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)


@check
def open_missing_is_enoent():
    expect_errno(errno.ENOENT, os.open, p("missing"), os.O_RDONLY)


@check
def open_dir_for_writing_is_eisdir():
    os.mkdir(p("d"))
    expect_errno(errno.EISDIR, os.open, p("d"), os.O_WRONLY)


@check
def open_through_a_file_is_enotdir():
    write(p("f"))
    expect_errno(errno.ENOTDIR, os.open, p("f", "x"), os.O_RDONLY)
    expect_errno(errno.ENOTDIR, os.open, p("f"), os.O_RDONLY | os.O_DIRECTORY)


@check
def open_trunc_truncates():
    write(p("t"), b"hello")
    fd = os.open(p("t"), os.O_WRONLY | os.O_TRUNC)
    os.close(fd)
    assert os.stat(p("t")).st_size == 0


@check
def open_append_appends():
    write(p("a"), b"one")
    fd = os.open(p("a"), os.O_WRONLY | os.O_APPEND)
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, b"two")
    os.close(fd)
    assert read(p("a")) == b"onetwo", read(p("a"))


@check
def names_at_name_max_and_past_it():
    ok = "n" * 255
    write(p(ok), b"x")
    assert os.path.exists(p(ok))
    expect_errno(errno.ENAMETOOLONG, os.open, p("n" * 256), os.O_CREAT | os.O_WRONLY, 0o644)
    expect_errno(errno.ENAMETOOLONG, os.mkdir, p("n" * 256))
    expect_errno(errno.ENAMETOOLONG, os.symlink, "x", p("n" * 256))


@check
def paths_past_path_max():
    long_path = p(*(["d" * 200] * 25))
    expect_errno(errno.ENAMETOOLONG, os.open, long_path, os.O_RDONLY)
    # A symlink target of PATH_MAX bytes or more is refused.
    expect_errno(errno.ENAMETOOLONG, os.symlink, "t" * 4096, p("longlink"))


# ---- mkdir, rmdir ------------------------------------------------------

@check
def mkdir_mode_and_parent_links():
    os.mkdir(p("top"))
    before = os.stat(p("top")).st_nlink
    os.mkdir(p("top", "sub"), 0o750)
    assert stat.S_IMODE(os.stat(p("top", "sub")).st_mode) == 0o750 & ~0o022 or \
        stat.S_IMODE(os.stat(p("top", "sub")).st_mode) == 0o750
    assert os.stat(p("top")).st_nlink == before + 1
    assert os.stat(p("top", "sub")).st_nlink == 2
    expect_errno(errno.EEXIST, os.mkdir, p("top", "sub"))
    expect_errno(errno.ENOENT, os.mkdir, p("nope", "sub"))


@check
def mkdir_in_setgid_dir_inherits_group():
    os.mkdir(p("sg"))
    os.chown(p("sg"), 0, 1234)
    os.chmod(p("sg"), 0o2775)
    os.mkdir(p("sg", "child"))
    write(p("sg", "file"))
    st = os.stat(p("sg", "child"))
    assert st.st_gid == 1234 and st.st_mode & stat.S_ISGID, oct(st.st_mode)
    assert os.stat(p("sg", "file")).st_gid == 1234


@check
def rmdir_cases():
    os.mkdir(p("r"))
    write(p("r", "f"))
    expect_errno(errno.ENOTEMPTY, os.rmdir, p("r"))
    expect_errno(errno.ENOTDIR, os.rmdir, p("r", "f"))
    os.unlink(p("r", "f"))
    before = os.stat(ROOT).st_nlink
    os.rmdir(p("r"))
    assert not os.path.exists(p("r"))
    assert os.stat(ROOT).st_nlink == before - 1
    expect_errno(errno.EINVAL, os.rmdir, p("."))


# ---- unlink, link ------------------------------------------------------

@check
def unlink_cases():
    write(p("u"), b"x")
    os.unlink(p("u"))
    assert not os.path.exists(p("u"))
    expect_errno(errno.ENOENT, os.unlink, p("u"))
    os.mkdir(p("ud"))
    expect_errno((errno.EISDIR, errno.EPERM), os.unlink, p("ud"))


@check
def unlink_of_an_open_file_keeps_its_data_until_close():
    # Many times over: the close before the open lets the file's size reach
    # a client's MDS after the unlink's answer (a race once lost 1 in 13).
    for k in range(40):
        name = p(f"open{k}")
        write(name, b"still here")
        fd = os.open(name, os.O_RDWR)
        os.unlink(name)
        assert not os.path.exists(name)
        st = os.fstat(fd)
        assert st.st_nlink == 0 and st.st_size == 10, (k, st.st_nlink, st.st_size)
        os.lseek(fd, 0, 0)
        got = os.read(fd, 100)
        assert got == b"still here", (k, got)
        os.write(fd, b" and more")
        os.lseek(fd, 0, 0)
        assert os.read(fd, 100) == b"still here and more"
        os.close(fd)
    # Two opens: the data stays until the last of them closes.
    write(p("twice"), b"kept")
    a = os.open(p("twice"), os.O_RDONLY)
    b = os.open(p("twice"), os.O_RDONLY)
    os.unlink(p("twice"))
    os.close(a)
    assert os.pread(b, 10, 0) == b"kept"
    os.close(b)


@check
def link_counts_and_ctime():
    write(p("l1"), b"data")
    c0 = os.stat(p("l1")).st_ctime_ns
    time.sleep(0.01)
    os.link(p("l1"), p("l2"))
    s1, s2 = os.stat(p("l1")), os.stat(p("l2"))
    assert s1.st_ino == s2.st_ino and s1.st_nlink == 2 == s2.st_nlink
    assert s1.st_ctime_ns > c0
    expect_errno(errno.EEXIST, os.link, p("l1"), p("l2"))
    os.unlink(p("l1"))
    assert os.stat(p("l2")).st_nlink == 1
    assert read(p("l2")) == b"data"
    os.mkdir(p("ld"))
    expect_errno(errno.EPERM, os.link, p("ld"), p("ld2"))


# ---- symlink ---------------------------------------------------------

@check
def symlinks():
    write(p("target"), b"t")
    os.symlink("target", p("sl"))
    assert os.readlink(p("sl")) == "target"
    assert stat.S_ISLNK(os.lstat(p("sl")).st_mode)
    assert os.lstat(p("sl")).st_size == len("target")
    assert read(p("sl")) == b"t"
    os.symlink("dangling", p("dl"))
    expect_errno(errno.ENOENT, os.stat, p("dl"))
    os.symlink("loop2", p("loop1"))
    os.symlink("loop1", p("loop2"))
    expect_errno(errno.ELOOP, os.stat, p("loop1"))
    expect_errno(errno.EEXIST, os.symlink, "x", p("sl"))


# ---- rename ----------------------------------------------------------

@check
def rename_file_over_file():
    write(p("a"), b"a")
    write(p("b"), b"b")
    ino = os.stat(p("a")).st_ino
    os.rename(p("a"), p("b"))
    assert not os.path.exists(p("a"))
    assert os.stat(p("b")).st_ino == ino and read(p("b")) == b"a"


@check
def rename_across_directories_moves_dir_links():
    os.mkdir(p("x"))
    os.mkdir(p("y"))
    os.mkdir(p("x", "child"))
    nx, ny = os.stat(p("x")).st_nlink, os.stat(p("y")).st_nlink
    os.rename(p("x", "child"), p("y", "child"))
    assert os.stat(p("x")).st_nlink == nx - 1
    assert os.stat(p("y")).st_nlink == ny + 1
    assert os.path.isdir(p("y", "child"))


@check
def rename_dir_cases():
    os.mkdir(p("d1"))
    os.mkdir(p("d2"))
    os.mkdir(p("d3"))
    write(p("d3", "f"))
    write(p("f"))
    os.rename(p("d1"), p("d2"))  # over an empty directory
    assert os.path.isdir(p("d2")) and not os.path.exists(p("d1"))
    expect_errno((errno.ENOTEMPTY, errno.EEXIST), os.rename, p("d2"), p("d3"))
    expect_errno(errno.ENOTDIR, os.rename, p("d2"), p("f"))
    expect_errno(errno.EISDIR, os.rename, p("f"), p("d2"))
    os.mkdir(p("d2", "in"))
    expect_errno(errno.EINVAL, os.rename, p("d2"), p("d2", "in", "x"))


@check
def rename_of_two_links_of_one_file_does_nothing():
    write(p("h1"))
    os.link(p("h1"), p("h2"))
    os.rename(p("h1"), p("h2"))
    assert os.path.exists(p("h1")) and os.path.exists(p("h2"))


@check
def rename_noreplace_and_exchange():
    write(p("n1"), b"1")
    write(p("n2"), b"2")
    expect_errno(errno.EEXIST, renameat2, p("n1"), p("n2"), RENAME_NOREPLACE)
    renameat2(p("n1"), p("n3"), RENAME_NOREPLACE)
    renameat2(p("n3"), p("n2"), RENAME_EXCHANGE)
    assert read(p("n2")) == b"1" and read(p("n3")) == b"2"


@check
def rename_updates_ctime():
    write(p("rc"))
    c0 = os.stat(p("rc")).st_ctime_ns
    time.sleep(0.01)
    os.rename(p("rc"), p("rc2"))
    assert os.stat(p("rc2")).st_ctime_ns > c0


# ---- chmod, chown ------------------------------------------------------

@check
def chmod_and_ctime():
    write(p("c"))
    c0 = os.stat(p("c")).st_ctime_ns
    time.sleep(0.01)
    os.chmod(p("c"), 0o4711)
    st = os.stat(p("c"))
    assert stat.S_IMODE(st.st_mode) == 0o4711 and st.st_ctime_ns > c0
    os.chmod(p("c"), 0o644)
    as_user(lambda: expect_errno(errno.EPERM, os.chmod, p("c"), 0o777))


@check
def chown_by_root_and_others():
    write(p("o"))
    os.chown(p("o"), 1000, 1000)
    st = os.stat(p("o"))
    assert (st.st_uid, st.st_gid) == (1000, 1000)
    as_user(lambda: expect_errno(errno.EPERM, os.chown, p("o"), NOBODY, NOBODY))


@check
def chown_clears_setuid():
    write(p("su"))
    os.chmod(p("su"), 0o4755)
    os.chown(p("su"), NOBODY, NOBODY)
    assert not os.stat(p("su")).st_mode & stat.S_ISUID


@check
def write_by_another_user_clears_setuid():
    write(p("sw"))
    os.chmod(p("sw"), 0o4777)

    def w():
        fd = os.open(p("sw"), os.O_WRONLY)
        os.write(fd, b"x")
        os.close(fd)
    as_user(w)
    assert not os.stat(p("sw")).st_mode & stat.S_ISUID


# ---- permissions as another user ----------------------------------------

@check
def permissions_for_other_users():
    write(p("secret"), b"s", 0o600)
    os.chmod(p("secret"), 0o600)
    os.mkdir(p("closed"), 0o700)
    os.chmod(p("closed"), 0o700)
    write(p("closed", "inside"))
    os.mkdir(p("ro"), 0o755)
    os.chmod(p("ro"), 0o755)
    os.chmod(ROOT, 0o755)

    def other():
        expect_errno(errno.EACCES, os.open, p("secret"), os.O_RDONLY)
        expect_errno(errno.EACCES, os.stat, p("closed", "inside"))
        expect_errno(errno.EACCES, os.open, p("ro", "new"), os.O_CREAT | os.O_WRONLY, 0o644)
        expect_errno(errno.EACCES, os.mkdir, p("ro", "newdir"))
    as_user(other)
    # Root may do all of it.
    assert read(p("secret")) == b"s"


@check
def sticky_directory():
    os.mkdir(p("tmp"))
    os.chmod(p("tmp"), 0o1777)
    write(p("tmp", "roots"))
    os.chmod(p("tmp", "roots"), 0o666)
    as_user(lambda: expect_errno(errno.EPERM, os.unlink, p("tmp", "roots")))

    def own():
        write(p("tmp", "mine"))
        os.unlink(p("tmp", "mine"))
    as_user(own)


# ---- truncate ----------------------------------------------------------

@check
def truncate_grow_and_shrink():
    write(p("tr"), b"abcdef")
    os.truncate(p("tr"), 3)
    assert read(p("tr")) == b"abc"
    os.truncate(p("tr"), 10)
    assert read(p("tr")) == b"abc" + b"\0" * 7
    os.mkdir(p("trd"))
    expect_errno(errno.EISDIR, os.truncate, p("trd"), 0)
    fd = os.open(p("tr"), os.O_RDONLY)
    try:
        expect_errno((errno.EINVAL, errno.EBADF), os.ftruncate, fd, 0)
    finally:
        os.close(fd)


# ---- utimensat --------------------------------------------------------

@check
def utimens_specific_now_and_omit():
    write(p("ut"))
    os.utime(p("ut"), ns=(1_000_000_123, 2_000_000_456))
    st = os.stat(p("ut"))
    assert (st.st_atime_ns, st.st_mtime_ns) == (1_000_000_123, 2_000_000_456), (st.st_atime_ns, st.st_mtime_ns)
    # UTIME_OMIT for atime, UTIME_NOW for mtime.
    UTIME_NOW, UTIME_OMIT = (1 << 30) - 1, (1 << 30) - 2

    class Timespec(ctypes.Structure):
        _fields_ = [("sec", ctypes.c_long), ("nsec", ctypes.c_long)]
    ts = (Timespec * 2)(Timespec(0, UTIME_OMIT), Timespec(0, UTIME_NOW))
    fn = libc.utimensat
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_int]
    before = time.time_ns()
    assert fn(-100, p("ut").encode(), ts, 0) == 0
    st = os.stat(p("ut"))
    assert st.st_atime_ns == 1_000_000_123
    assert st.st_mtime_ns >= before - 1_000_000_000


@check
def utimens_permissions():
    write(p("uo"))
    os.chmod(p("uo"), 0o666)
    # Anyone who may write may set the times to now, only the owner to a
    # given time.
    as_user(lambda: os.utime(p("uo")))
    as_user(lambda: expect_errno(errno.EPERM, os.utime, p("uo"), (1, 1)))


# ---- special files ---------------------------------------------------

@check
def mkfifo_and_mknod():
    os.mkfifo(p("fifo"), 0o644)
    assert stat.S_ISFIFO(os.stat(p("fifo")).st_mode)
    os.mknod(p("chr"), 0o644 | stat.S_IFCHR, os.makedev(1, 3))
    st = os.stat(p("chr"))
    assert stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(1, 3)
    os.mknod(p("blk"), 0o644 | stat.S_IFBLK, os.makedev(7, 0))
    assert stat.S_ISBLK(os.stat(p("blk")).st_mode)
    expect_errno(errno.EEXIST, os.mkfifo, p("fifo"))


# ---- xattrs ------------------------------------------------------------

@check
def xattrs():
    write(p("x"))
    os.setxattr(p("x"), "user.a", b"1")
    os.setxattr(p("x"), "user.b", b"")
    assert os.getxattr(p("x"), "user.a") == b"1"
    assert sorted(os.listxattr(p("x"))) == ["user.a", "user.b"]
    expect_errno(errno.EEXIST, os.setxattr, p("x"), "user.a", b"2", os.XATTR_CREATE)
    expect_errno(errno.ENODATA, os.setxattr, p("x"), "user.c", b"2", os.XATTR_REPLACE)
    os.setxattr(p("x"), "user.a", b"2", os.XATTR_REPLACE)
    assert os.getxattr(p("x"), "user.a") == b"2"
    os.removexattr(p("x"), "user.a")
    expect_errno(errno.ENODATA, os.getxattr, p("x"), "user.a")
    expect_errno(errno.ENODATA, os.removexattr, p("x"), "user.a")
    big = b"v" * 4000
    os.setxattr(p("x"), "user.big", big)
    assert os.getxattr(p("x"), "user.big") == big


# ---- statfs ----------------------------------------------------------

@check
def statfs_makes_sense():
    s = os.statvfs(ROOT)
    assert s.f_namemax == 255 and s.f_bsize > 0 and s.f_blocks > 0 and s.f_bavail <= s.f_blocks


# ---- data ------------------------------------------------------------

@check
def sparse_file_past_4gib():
    fd = os.open(p("sparse"), os.O_CREAT | os.O_RDWR, 0o644)
    off = 5 << 30
    os.pwrite(fd, b"tail", off)
    assert os.fstat(fd).st_size == off + 4
    assert os.pread(fd, 8, off - 4) == b"\0\0\0\0tail"
    assert os.pread(fd, 4096, 1 << 30) == b"\0" * 4096
    os.close(fd)
    assert os.stat(p("sparse")).st_size == off + 4


@check
def data_across_object_boundaries():
    data = os.urandom((9 << 20) + 12345)
    write(p("big"), data)
    assert read(p("big")) == data
    fd = os.open(p("big"), os.O_RDWR)
    os.pwrite(fd, b"X" * 100, (4 << 20) - 50)
    os.close(fd)
    want = data[:(4 << 20) - 50] + b"X" * 100 + data[(4 << 20) + 50:]
    assert read(p("big")) == want


@check
def fallocate_extends_and_punches():
    write(p("fa"), b"a" * 10000)
    fd = os.open(p("fa"), os.O_RDWR)
    fallocate(fd, 0, 0, 20000)
    assert os.fstat(fd).st_size == 20000
    fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, 40000)
    assert os.fstat(fd).st_size == 20000
    fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 100, 200)
    got = os.pread(fd, 10000, 0)
    assert got == b"a" * 100 + b"\0" * 200 + b"a" * 9700
    assert os.pread(fd, 10000, 10000) == b"\0" * 10000
    os.close(fd)


@check
def mmap_write_and_read():
    write(p("mm"), b"\0" * 8192)
    fd = os.open(p("mm"), os.O_RDWR)
    m = mmap.mmap(fd, 8192)
    m[100:105] = b"hello"
    m.flush()
    m.close()
    os.close(fd)
    assert read(p("mm"))[100:105] == b"hello"
    with open(p("mm"), "rb") as f:
        m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        assert m[100:105] == b"hello"
        m.close()


@check
def fsync_and_fdatasync():
    fd = os.open(p("sync"), os.O_CREAT | os.O_WRONLY, 0o644)
    os.write(fd, b"durable")
    os.fsync(fd)
    os.fdatasync(fd)
    os.close(fd)
    dfd = os.open(ROOT, os.O_RDONLY | os.O_DIRECTORY)
    os.fsync(dfd)
    os.close(dfd)
    assert read(p("sync")) == b"durable"


@check
def readdir_lists_everything_once():
    os.mkdir(p("many"))
    names = {f"entry-{i:04d}" for i in range(1500)}
    for n in names:
        write(p("many", n))
    assert set(os.listdir(p("many"))) == names


def main():
    out = None
    if "--json" in sys.argv:
        out = sys.argv[sys.argv.index("--json") + 1]
    passed = 0
    for fn in CHECKS:
        work = os.path.join(ROOT, "case-" + fn.__name__)
        os.mkdir(work)
        os.chmod(work, 0o755)
        global_root = ROOT
        globals()["ROOT"] = work
        try:
            fn()
            RESULTS.append({"check": fn.__name__, "ok": True})
            passed += 1
            print(f"ok    {fn.__name__}")
        except Exception as e:  # noqa: BLE001 - every failure is reported
            RESULTS.append({"check": fn.__name__, "ok": False, "error": str(e) or type(e).__name__,
                            "trace": traceback.format_exc(limit=2)})
            line = traceback.extract_tb(e.__traceback__)[-1].lineno
            print(f"FAIL  {fn.__name__} (line {line}): {e or type(e).__name__}")
        finally:
            globals()["ROOT"] = global_root
    print(f"{passed}/{len(CHECKS)} passed")
    if out:
        with open(out, "w") as f:
            json.dump({"passed": passed, "total": len(CHECKS), "results": RESULTS}, f, indent=1)
    sys.exit(0 if passed == len(CHECKS) else 1)


if __name__ == "__main__":
    main()
