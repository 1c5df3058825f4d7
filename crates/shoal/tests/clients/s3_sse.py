"""Server-side encryption through boto3 and the aws CLI, in two steps
around a look at the raw pool (crates/shoal/tests/gateway.rs reads every
data object with `shoal rados get` between them and finds the secret
marker nowhere, the plain control's marker in place).

`write` (over HTTPS, GW_ENDPOINT, trusted through AWS_CA_BUNDLE): SSE-C
objects (one PUT, a multipart upload with a copied part, a copy from an
SSE-C source to SSE-S3), SSE-S3 by header and by the bucket's default,
the aws CLI's `--sse` and `--sse-c`; the refusals: SSE-C over plain HTTP
(GW_PLAIN_ENDPOINT), a wrong or missing key, SSE-KMS, malformed headers
and bucket encryption configurations. Each refused request stores nothing.

`read`: every object back byte for byte, whole and in ranges, with its
key where it has one; without it, or with another, refused; then all
removed.

Run with GW_ENDPOINT, GW_PLAIN_ENDPOINT, GW_KEY, GW_SECRET,
AWS_CA_BUNDLE. Exits non-zero with the failed check on the first failure.
"""
import base64
import hashlib
import os
import subprocess
import sys
import tempfile

from s3_common import client, code

import boto3
from botocore.config import Config

s3 = client(os.environ["GW_KEY"], os.environ["GW_SECRET"])
plain = boto3.client(
    "s3", endpoint_url=os.environ["GW_PLAIN_ENDPOINT"],
    aws_access_key_id=os.environ["GW_KEY"], aws_secret_access_key=os.environ["GW_SECRET"],
    region_name="us-east-1",
    config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))

B = "sse"
SECRET = b"SSE-SECRET-MARKER-"  # must never reach a data object in the clear
CONTROL = b"PLAIN-CONTROL-MARKER-"  # written in the clear, found by the test


def key_args(raw, copy=False):
    k = base64.b64encode(raw).decode()
    m = base64.b64encode(hashlib.md5(raw).digest()).decode()
    p = "CopySource" if copy else ""
    return {f"{p}SSECustomerAlgorithm": "AES256", f"{p}SSECustomerKey": k,
            f"{p}SSECustomerKeyMD5": m}


K1 = key_args(bytes(range(32)))
K2 = key_args(bytes(range(1, 33)))
SMALL = SECRET * 600  # 10 800 bytes: three chunks, the last short
# 5 MiB + 2 MiB + 3 bytes: parts of unaligned ends.
PART1 = (SECRET * ((5 << 20) // len(SECRET) + 1))[: 5 << 20]
PART2 = (SECRET * ((2 << 20) // len(SECRET) + 2))[: (2 << 20) + 3]
CONTROL_DATA = CONTROL * 100


def body(r):
    return r["Body"].read()


def aws(*args, env_extra=None):
    env = dict(os.environ, AWS_ACCESS_KEY_ID=os.environ["GW_KEY"],
               AWS_SECRET_ACCESS_KEY=os.environ["GW_SECRET"], AWS_DEFAULT_REGION="us-east-1")
    r = subprocess.run(["aws", "--endpoint-url", os.environ["GW_ENDPOINT"], *args],
                       env=env, capture_output=True, timeout=120)
    assert r.returncode == 0, (args, r.stdout, r.stderr)
    return r.stdout


def keys():
    return sorted(o["Key"] for o in s3.list_objects_v2(Bucket=B).get("Contents", []))


def write():
    s3.create_bucket(Bucket=B)
    s3.put_object(Bucket=B, Key="control", Body=CONTROL_DATA)

    # SSE-C: one PUT; the answer names the key's MD5, not the key.
    r = s3.put_object(Bucket=B, Key="c-small", Body=SMALL, **K1)
    assert r["SSECustomerAlgorithm"] == "AES256", r
    assert r["SSECustomerKeyMD5"] == K1["SSECustomerKeyMD5"], r
    assert "ServerSideEncryption" not in r, r

    # SSE-C over plain HTTP: refused, nothing stored.
    assert code(lambda: plain.put_object(Bucket=B, Key="c-plain", Body=SMALL, **K1)) \
        == "InvalidRequest"
    # Malformed or contradictory requests: refused, nothing stored.
    bad_md5 = dict(K1, SSECustomerKeyMD5=K2["SSECustomerKeyMD5"])
    assert code(lambda: s3.put_object(Bucket=B, Key="bad", Body=b"x", **bad_md5)) \
        == "InvalidArgument"
    short = key_args(b"0123456789")
    assert code(lambda: s3.put_object(Bucket=B, Key="bad", Body=b"x", **short)) \
        == "InvalidArgument"
    assert code(lambda: s3.put_object(Bucket=B, Key="bad", Body=b"x",
                                      SSECustomerAlgorithm="AES192",
                                      SSECustomerKey=K1["SSECustomerKey"])) \
        == "InvalidArgument"
    assert code(lambda: s3.put_object(Bucket=B, Key="bad", Body=b"x",
                                      ServerSideEncryption="aws:kms",
                                      SSEKMSKeyId="some-key")) == "InvalidArgument"
    assert code(lambda: s3.put_object(Bucket=B, Key="bad", Body=b"x",
                                      ServerSideEncryption="AES256", **K1)) \
        == "InvalidArgument"
    assert keys() == ["c-small", "control"], keys()

    # SSE-C multipart: every part needs the upload's key; a part copied
    # from an SSE-C source opens it with that source's key.
    up = s3.create_multipart_upload(Bucket=B, Key="c-multi", **K1)
    assert up["SSECustomerKeyMD5"] == K1["SSECustomerKeyMD5"], up
    uid = up["UploadId"]
    assert code(lambda: s3.upload_part(Bucket=B, Key="c-multi", UploadId=uid, PartNumber=1,
                                       Body=PART1)) == "InvalidRequest"
    assert code(lambda: s3.upload_part(Bucket=B, Key="c-multi", UploadId=uid, PartNumber=1,
                                       Body=PART1, **K2)) == "InvalidArgument"
    p1 = s3.upload_part(Bucket=B, Key="c-multi", UploadId=uid, PartNumber=1, Body=PART1, **K1)
    s3.put_object(Bucket=B, Key="c-part2", Body=PART2, **K2)
    p2 = s3.upload_part_copy(Bucket=B, Key="c-multi", UploadId=uid, PartNumber=2,
                             CopySource={"Bucket": B, "Key": "c-part2"},
                             **K1, **key_args(bytes(range(1, 33)), copy=True))
    parts = {"Parts": [{"PartNumber": 1, "ETag": p1["ETag"]},
                       {"PartNumber": 2, "ETag": p2["CopyPartResult"]["ETag"]}]}
    # Completing it needs the key too.
    assert code(lambda: s3.complete_multipart_upload(
        Bucket=B, Key="c-multi", UploadId=uid, MultipartUpload=parts)) == "InvalidRequest"
    s3.complete_multipart_upload(Bucket=B, Key="c-multi", UploadId=uid, MultipartUpload=parts,
                                 **K1)
    s3.delete_object(Bucket=B, Key="c-part2")

    # SSE-S3 by header; a copy from an SSE-C source into SSE-S3.
    r = s3.put_object(Bucket=B, Key="s3-header", Body=SMALL, ServerSideEncryption="AES256")
    assert r["ServerSideEncryption"] == "AES256", r
    assert code(lambda: s3.copy_object(Bucket=B, Key="s3-copy",
                                       CopySource={"Bucket": B, "Key": "c-small"})) \
        == "InvalidRequest"
    r = s3.copy_object(Bucket=B, Key="s3-copy", CopySource={"Bucket": B, "Key": "c-small"},
                       ServerSideEncryption="AES256", **key_args(bytes(range(32)), copy=True))
    assert r["ServerSideEncryption"] == "AES256", r

    # The bucket's default encryption: malformed or KMS ones refused and
    # nothing set; AES256 taken, then objects written without headers
    # (a PUT, a multipart upload) are SSE-S3.
    assert code(lambda: s3.get_bucket_encryption(Bucket=B)) \
        == "ServerSideEncryptionConfigurationNotFoundError"
    for rules, want in [
        ([{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "aws:kms",
                                                  "KMSMasterKeyID": "k"}}], "InvalidArgument"),
        ([{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}},
          {"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}], "MalformedXML"),
        ([{"BucketKeyEnabled": True}], "MalformedXML"),
    ]:
        got = code(lambda: s3.put_bucket_encryption(
            Bucket=B, ServerSideEncryptionConfiguration={"Rules": rules}))
        assert got == want, (rules, got)
    assert code(lambda: s3.get_bucket_encryption(Bucket=B)) \
        == "ServerSideEncryptionConfigurationNotFoundError"
    s3.put_bucket_encryption(Bucket=B, ServerSideEncryptionConfiguration={"Rules": [
        {"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]})
    rule = s3.get_bucket_encryption(Bucket=B)["ServerSideEncryptionConfiguration"]["Rules"][0]
    assert rule["ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256", rule
    r = s3.put_object(Bucket=B, Key="s3-default", Body=SMALL)
    assert r["ServerSideEncryption"] == "AES256", r
    up = s3.create_multipart_upload(Bucket=B, Key="s3-multi")
    assert up["ServerSideEncryption"] == "AES256", up
    p1 = s3.upload_part(Bucket=B, Key="s3-multi", UploadId=up["UploadId"], PartNumber=1,
                        Body=PART1)
    p2 = s3.upload_part(Bucket=B, Key="s3-multi", UploadId=up["UploadId"], PartNumber=2,
                        Body=PART2)
    r = s3.complete_multipart_upload(
        Bucket=B, Key="s3-multi", UploadId=up["UploadId"],
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": p1["ETag"]},
                                   {"PartNumber": 2, "ETag": p2["ETag"]}]})
    assert r["ServerSideEncryption"] == "AES256", r
    s3.delete_bucket_encryption(Bucket=B)
    assert code(lambda: s3.get_bucket_encryption(Bucket=B)) \
        == "ServerSideEncryptionConfigurationNotFoundError"

    # The aws CLI: --sse and --sse-c (its own key handling).
    with tempfile.TemporaryDirectory() as d:
        f = os.path.join(d, "f")
        with open(f, "wb") as out:
            out.write(SMALL)
        aws("s3", "cp", f, f"s3://{B}/cli-sse", "--sse", "AES256")
        raw = bytes(range(2, 34))
        with open(os.path.join(d, "k"), "wb") as out:
            out.write(raw)
        aws("s3", "cp", f, f"s3://{B}/cli-sse-c", "--sse-c", "AES256",
            "--sse-c-key", f"fileb://{os.path.join(d, 'k')}")
    assert keys() == ["c-multi", "c-small", "cli-sse", "cli-sse-c", "control", "s3-copy",
                      "s3-default", "s3-header", "s3-multi"], keys()


def read():
    multi = PART1 + PART2
    # SSE-C: with the key, whole, in ranges across chunk and part edges,
    # and through HEAD; without it or with another, refused.
    assert body(s3.get_object(Bucket=B, Key="c-small", **K1)) == SMALL
    for k, data in [("c-small", SMALL), ("c-multi", multi)]:
        for a, b in [(0, 0), (1, 4097), (4095, 4096), (len(data) - 5, len(data) - 1)]:
            got = body(s3.get_object(Bucket=B, Key=k, Range=f"bytes={a}-{b}", **K1))
            assert got == data[a:b + 1], (k, a, b, len(got))
    assert body(s3.get_object(Bucket=B, Key="c-multi", **K1)) == multi
    for a in [(5 << 20) - 3, 5 << 20, (5 << 20) + 4090]:
        got = body(s3.get_object(Bucket=B, Key="c-multi", Range=f"bytes={a}-{a + 9999}", **K1))
        assert got == multi[a:a + 10000], a
    h = s3.head_object(Bucket=B, Key="c-multi", **K1)
    assert h["ContentLength"] == len(multi) and h["SSECustomerKeyMD5"] == K1["SSECustomerKeyMD5"]
    for k in ["c-small", "c-multi"]:
        assert code(lambda: s3.get_object(Bucket=B, Key=k)) == "InvalidRequest", k
        assert code(lambda: s3.get_object(Bucket=B, Key=k, **K2)) == "InvalidArgument", k
        assert code(lambda: s3.head_object(Bucket=B, Key=k)) == "400", k
    assert code(lambda: plain.get_object(Bucket=B, Key="c-small", **K1)) == "InvalidRequest"
    # SSE-S3: read without headers; a key given to it refused.
    for k, data in [("s3-header", SMALL), ("s3-copy", SMALL), ("s3-default", SMALL),
                    ("s3-multi", multi), ("cli-sse", SMALL)]:
        r = s3.get_object(Bucket=B, Key=k)
        assert r["ServerSideEncryption"] == "AES256", (k, r)
        assert body(r) == data, k
        got = body(s3.get_object(Bucket=B, Key=k, Range="bytes=4000-8999"))
        assert got == data[4000:9000], k
        assert code(lambda: s3.get_object(Bucket=B, Key=k, **K1)) == "InvalidRequest", k
    # (boto3 has no such parameter for reads: the header is added.)
    c = client(os.environ["GW_KEY"], os.environ["GW_SECRET"])
    c.meta.events.register("before-call.s3.HeadObject", lambda params, **_: params[
        "headers"].update({"x-amz-server-side-encryption": "AES256"}))
    assert code(lambda: c.head_object(Bucket=B, Key="s3-header")) == "400"
    # The aws CLI reads its SSE-C object back with its key.
    with tempfile.TemporaryDirectory() as d:
        kf = os.path.join(d, "k")
        with open(kf, "wb") as out:
            out.write(bytes(range(2, 34)))
        aws("s3", "cp", f"s3://{B}/cli-sse-c", os.path.join(d, "back"), "--sse-c", "AES256",
            "--sse-c-key", f"fileb://{kf}")
        with open(os.path.join(d, "back"), "rb") as f:
            assert f.read() == SMALL
    assert body(s3.get_object(Bucket=B, Key="control")) == CONTROL_DATA
    for k in keys():
        s3.delete_object(Bucket=B, Key=k)
    s3.delete_bucket(Bucket=B)


{"write": write, "read": read}[sys.argv[1]]()
