"""s3cmd, with its default configuration (which signs for region `US`),
against the gateway: mb, a multipart put, get, ls, setacl, setpolicy,
delpolicy, put --server-side-encryption (and info), sync, del -r,
rb, each checked. With `--short`: mb, put, ls, del, rb only (against a
gateway that enforces another region, which s3cmd learns from the
gateway's AuthorizationHeaderMalformed answer, as from AWS's).

Run by crates/shoal/tests/gateway.rs with GW_ENDPOINT, GW_KEY, GW_SECRET.
Exits non-zero with the failed check on the first failure.
"""
import json
import os
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request

EP = os.environ["GW_ENDPOINT"]
HOST = EP.split("://", 1)[1]

work = tempfile.mkdtemp(prefix="s3cmd-")
cfg = os.path.join(work, "s3cfg")
# Only what names the endpoint and the keys; everything else (the
# bucket location US, signature v4, 15 MiB multipart chunks) is s3cmd's
# default.
with open(cfg, "w") as f:
    f.write("[default]\n"
            f"access_key = {os.environ['GW_KEY']}\n"
            f"secret_key = {os.environ['GW_SECRET']}\n"
            f"host_base = {HOST}\n"
            f"host_bucket = {HOST}\n"
            "use_https = False\n")


def s3cmd(*args):
    r = subprocess.run(["s3cmd", "-c", cfg, *args],
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise SystemExit(f"s3cmd {' '.join(args)} failed ({r.returncode}):\n"
                         f"{r.stdout}\n{r.stderr}")
    return r.stdout


out = subprocess.run(["s3cmd", "-c", cfg, "--dump-config"], capture_output=True,
                     text=True, check=True).stdout
assert "bucket_location = US" in out, "not s3cmd's default region"

s3cmd("mb", "s3://s3cmd-bucket")
assert "s3://s3cmd-bucket" in s3cmd("ls")
if sys.argv[1:] == ["--short"]:
    small = os.path.join(work, "small")
    open(small, "wb").write(b"small")
    s3cmd("put", small, "s3://s3cmd-bucket/small")
    assert "s3://s3cmd-bucket/small" in s3cmd("ls", "s3://s3cmd-bucket/")
    s3cmd("del", "s3://s3cmd-bucket/small")
    s3cmd("rb", "s3://s3cmd-bucket")
    print("s3cmd (short): ok")
    sys.exit(0)

big = os.urandom(20 * 1024 * 1024 + 5)  # two 15 MiB chunks: multipart
src = os.path.join(work, "big.bin")
open(src, "wb").write(big)
out = s3cmd("--progress", "put", src, "s3://s3cmd-bucket/dir/big.bin")
assert "part 2 of 2" in out, out
dst = os.path.join(work, "back.bin")
s3cmd("get", "s3://s3cmd-bucket/dir/big.bin", dst)
assert open(dst, "rb").read() == big, "the object read back differs"
# --server-side-encryption: SSE-S3 (a multipart upload here), which
# `info` names, read back whole.
s3cmd("put", "--server-side-encryption", src, "s3://s3cmd-bucket/dir/sse.bin")
info = s3cmd("info", "s3://s3cmd-bucket/dir/sse.bin")
assert "AES256" in info, info
assert "AES256" not in s3cmd("info", "s3://s3cmd-bucket/dir/big.bin")
s3cmd("get", "--force", "s3://s3cmd-bucket/dir/sse.bin", dst)
assert open(dst, "rb").read() == big, "the encrypted object read back differs"
ls = s3cmd("ls", "s3://s3cmd-bucket/dir/")
assert "big.bin" in ls and str(len(big)) in ls, ls

# setacl: public, then readable without a signature.
s3cmd("setacl", "--acl-public", "s3://s3cmd-bucket/dir/big.bin")
with urllib.request.urlopen(f"{EP}/s3cmd-bucket/dir/big.bin", timeout=30) as r:
    assert r.read() == big, "the public object read anonymously differs"
s3cmd("setacl", "--acl-private", "s3://s3cmd-bucket/dir/big.bin")
try:
    urllib.request.urlopen(f"{EP}/s3cmd-bucket/dir/big.bin", timeout=30)
    raise SystemExit("a private object was read anonymously")
except urllib.error.HTTPError as e:
    assert e.code == 403, e.code

# setpolicy: a bucket policy lets anyone read one prefix; delpolicy
# takes it away.
pol = os.path.join(work, "policy.json")
with open(pol, "w") as f:
    json.dump({"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
        "Resource": "arn:aws:s3:::s3cmd-bucket/dir/*"}]}, f)
s3cmd("setpolicy", pol, "s3://s3cmd-bucket")
with urllib.request.urlopen(f"{EP}/s3cmd-bucket/dir/big.bin", timeout=30) as r:
    assert r.read() == big, "the object a policy makes public differs"
s3cmd("delpolicy", "s3://s3cmd-bucket")
try:
    urllib.request.urlopen(f"{EP}/s3cmd-bucket/dir/big.bin", timeout=30)
    raise SystemExit("read anonymously after the policy was removed")
except urllib.error.HTTPError as e:
    assert e.code == 403, e.code

# sync a tree up, change it, sync again: only what changed goes.
tree = os.path.join(work, "tree")
os.makedirs(os.path.join(tree, "sub"))
for i in range(5):
    open(os.path.join(tree, "sub" if i % 2 else "", f"f{i}"), "wb").write(os.urandom(1000 + i))
s3cmd("sync", tree + "/", "s3://s3cmd-bucket/tree/")
open(os.path.join(tree, "f0"), "wb").write(b"changed")
out = s3cmd("sync", tree + "/", "s3://s3cmd-bucket/tree/")
assert "f0" in out and "f2" not in out, out
listed = s3cmd("ls", "--recursive", "s3://s3cmd-bucket/tree/")
assert sum(1 for line in listed.splitlines() if "s3://" in line) == 5, listed
back = os.path.join(work, "tree-back")
s3cmd("sync", "s3://s3cmd-bucket/tree/", back + "/")
for root, _, files in os.walk(tree):
    for name in files:
        p = os.path.join(root, name)
        q = os.path.join(back, os.path.relpath(p, tree))
        assert open(p, "rb").read() == open(q, "rb").read(), p

s3cmd("del", "--recursive", "--force", "s3://s3cmd-bucket/")
assert s3cmd("ls", "--recursive", "s3://s3cmd-bucket/").strip() == ""
s3cmd("rb", "s3://s3cmd-bucket")
assert "s3cmd-bucket" not in s3cmd("ls")
print("s3cmd: ok")
