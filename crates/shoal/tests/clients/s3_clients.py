"""The S3 gateway through clients nobody here wrote: boto3 and the aws CLI.

Run by crates/shoal/tests/gateway.rs with the endpoint and two users' keys
in the environment (GW_ENDPOINT, GW_ALICE_KEY/SECRET, GW_BOB_KEY/SECRET).
Exits non-zero with the failed check on the first failure.
"""
import hashlib
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

EP = os.environ["GW_ENDPOINT"]


def client(key, secret):
    return boto3.client(
        "s3", endpoint_url=EP, aws_access_key_id=key, aws_secret_access_key=secret,
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1},
                      signature_version="s3v4"))


def code(f):
    try:
        f()
    except ClientError as e:
        return e.response["Error"]["Code"]
    return None


def anon(method, url, data=None):
    req = urllib.request.Request(url, data=data, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


alice = client(os.environ["GW_ALICE_KEY"], os.environ["GW_ALICE_SECRET"])
bob = client(os.environ["GW_BOB_KEY"], os.environ["GW_BOB_SECRET"])

# Buckets: each user sees its own; names are the owner's.
alice.create_bucket(Bucket="photos")
alice.create_bucket(Bucket="public-site", ACL="public-read")
assert sorted(b["Name"] for b in alice.list_buckets()["Buckets"]) == ["photos", "public-site"]
assert bob.list_buckets()["Buckets"] == []
assert code(lambda: bob.create_bucket(Bucket="photos")) == "BucketAlreadyExists"
assert code(lambda: alice.head_bucket(Bucket="nope-bucket")) in ("404", "NoSuchBucket")

# Objects: bytes, headers, metadata, ETags as AWS computes them (MD5).
body = os.urandom(3 * 1024 * 1024 + 17)
r = alice.put_object(Bucket="photos", Key="cat.jpg", Body=body, ContentType="image/jpeg",
                     CacheControl="max-age=60", ContentDisposition="inline",
                     Metadata={"camera": "pinhole"})
assert r["ETag"] == '"%s"' % hashlib.md5(body).hexdigest(), r["ETag"]
g = alice.get_object(Bucket="photos", Key="cat.jpg")
assert g["Body"].read() == body
assert g["ContentType"] == "image/jpeg" and g["CacheControl"] == "max-age=60"
assert g["ContentDisposition"] == "inline" and g["Metadata"] == {"camera": "pinhole"}
h = alice.head_object(Bucket="photos", Key="cat.jpg")
assert h["ContentLength"] == len(body) and h["ETag"] == r["ETag"]
part = alice.get_object(Bucket="photos", Key="cat.jpg", Range="bytes=100-199")
assert part["Body"].read() == body[100:200] and part["ContentRange"] == "bytes 100-199/%d" % len(body)
tail = alice.get_object(Bucket="photos", Key="cat.jpg", Range="bytes=-10")["Body"].read()
assert tail == body[-10:]
assert code(lambda: alice.get_object(Bucket="photos", Key="cat.jpg",
                                     Range="bytes=%d-" % (len(body) + 5))) == "InvalidRange"
assert code(lambda: alice.get_object(Bucket="photos", Key="dog.jpg")) == "NoSuchKey"
# An object of several 4 MiB stripes, read whole and across a boundary.
big = os.urandom(9 * 1024 * 1024 + 5)
r = alice.put_object(Bucket="photos", Key="big.bin", Body=big)
assert r["ETag"] == '"%s"' % hashlib.md5(big).hexdigest()
assert alice.get_object(Bucket="photos", Key="big.bin")["Body"].read() == big
edge = 4 * 1024 * 1024
got = alice.get_object(Bucket="photos", Key="big.bin", Range="bytes=%d-%d" % (edge - 3, edge + 2 * edge))
assert got["Body"].read() == big[edge - 3:3 * edge + 1]
alice.delete_object(Bucket="photos", Key="big.bin")
# Multipart: parts, listings, completion with the ETag AWS computes, a
# repeated complete, bad completions, abort.
mp = alice.create_multipart_upload(Bucket="photos", Key="movie.mp4", ContentType="video/mp4",
                                   Metadata={"take": "2"})
uid = mp["UploadId"]
chunks = [os.urandom(5 * 1024 * 1024), os.urandom(5 * 1024 * 1024 + 1), os.urandom(123)]
etags = []
for n, c in enumerate(chunks, 1):
    etags.append(alice.upload_part(Bucket="photos", Key="movie.mp4", UploadId=uid, PartNumber=n,
                                   Body=c)["ETag"])
# A part uploaded again replaces the first upload of its number.
chunks[2] = os.urandom(77)
etags[2] = alice.upload_part(Bucket="photos", Key="movie.mp4", UploadId=uid, PartNumber=3,
                             Body=chunks[2])["ETag"]
parts = alice.list_parts(Bucket="photos", Key="movie.mp4", UploadId=uid)["Parts"]
assert [(p["PartNumber"], p["Size"], p["ETag"]) for p in parts] == \
    [(n, len(c), e) for n, (c, e) in enumerate(zip(chunks, etags), 1)], parts
ups = alice.list_multipart_uploads(Bucket="photos")["Uploads"]
assert [(u["Key"], u["UploadId"]) for u in ups] == [("movie.mp4", uid)], ups
done = [{"PartNumber": n, "ETag": e} for n, e in enumerate(etags, 1)]
assert code(lambda: alice.complete_multipart_upload(
    Bucket="photos", Key="movie.mp4", UploadId=uid,
    MultipartUpload={"Parts": [done[1], done[0]]})) == "InvalidPartOrder"
assert code(lambda: alice.complete_multipart_upload(
    Bucket="photos", Key="movie.mp4", UploadId=uid,
    MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": '"00"'}]})) == "InvalidPart"
assert code(lambda: alice.complete_multipart_upload(
    Bucket="photos", Key="movie.mp4", UploadId=uid,
    MultipartUpload={"Parts": [done[2], {"PartNumber": 4, "ETag": etags[0]}]})) in (
        "InvalidPart", "EntityTooSmall")
r = alice.complete_multipart_upload(Bucket="photos", Key="movie.mp4", UploadId=uid,
                                    MultipartUpload={"Parts": done})
want = hashlib.md5(b"".join(hashlib.md5(c).digest() for c in chunks)).hexdigest() + "-3"
assert r["ETag"] == '"%s"' % want, (r["ETag"], want)
again = alice.complete_multipart_upload(Bucket="photos", Key="movie.mp4", UploadId=uid,
                                        MultipartUpload={"Parts": done})
assert again["ETag"] == r["ETag"]
g = alice.get_object(Bucket="photos", Key="movie.mp4")
assert g["Body"].read() == b"".join(chunks) and g["ContentType"] == "video/mp4"
assert g["Metadata"] == {"take": "2"}
got = alice.get_object(Bucket="photos", Key="movie.mp4", Range="bytes=5242870-5242890")["Body"].read()
assert got == b"".join(chunks)[5242870:5242891]
# One part at a time (?partNumber=N), its count in x-amz-mp-parts-count.
for n, c in enumerate(chunks, 1):
    p = alice.get_object(Bucket="photos", Key="movie.mp4", PartNumber=n)
    assert p["PartsCount"] == 3 and p["Body"].read() == c and p["ETag"] == r["ETag"]
    assert alice.head_object(Bucket="photos", Key="movie.mp4", PartNumber=n)["ContentLength"] == len(c)
assert code(lambda: alice.get_object(Bucket="photos", Key="movie.mp4", PartNumber=4)) == "InvalidPart"
a = alice.get_object_attributes(Bucket="photos", Key="movie.mp4", MaxParts=2,
                                ObjectAttributes=["ETag", "ObjectSize", "ObjectParts", "StorageClass"])
assert a["ObjectSize"] == sum(map(len, chunks)) and a["StorageClass"] == "STANDARD", a
assert a["ETag"] == r["ETag"].strip('"'), (a["ETag"], r["ETag"])  # unquoted, as AWS answers
op = a["ObjectParts"]
assert op["TotalPartsCount"] == 3 and op["IsTruncated"] and op["NextPartNumberMarker"] == 2, op
assert [(p["PartNumber"], p["Size"]) for p in op["Parts"]] == [(1, len(chunks[0])), (2, len(chunks[1]))]
assert alice.list_multipart_uploads(Bucket="photos").get("Uploads", []) == []
ab = alice.create_multipart_upload(Bucket="photos", Key="dropped")["UploadId"]
alice.upload_part(Bucket="photos", Key="dropped", UploadId=ab, PartNumber=1, Body=b"x" * 1000)
alice.abort_multipart_upload(Bucket="photos", Key="dropped", UploadId=ab)
assert code(lambda: alice.list_parts(Bucket="photos", Key="dropped", UploadId=ab)) == "NoSuchUpload"
assert code(lambda: alice.upload_part(Bucket="photos", Key="x", UploadId="nope", PartNumber=1,
                                      Body=b"x")) == "NoSuchUpload"
# Parts copied from an object (UploadPartCopy), whole and by range.
cp = alice.create_multipart_upload(Bucket="photos", Key="movie-copy.mp4")["UploadId"]
whole = b"".join(chunks)
e1 = alice.upload_part_copy(Bucket="photos", Key="movie-copy.mp4", UploadId=cp, PartNumber=1,
                            CopySource={"Bucket": "photos", "Key": "movie.mp4"},
                            CopySourceRange="bytes=0-5242879")["CopyPartResult"]["ETag"]
e2 = alice.upload_part_copy(Bucket="photos", Key="movie-copy.mp4", UploadId=cp, PartNumber=2,
                            CopySource={"Bucket": "photos", "Key": "movie.mp4"},
                            CopySourceRange="bytes=5242880-%d" % (len(whole) - 1))["CopyPartResult"]["ETag"]
# A copied range must lie inside the source (copies are never clamped).
assert code(lambda: alice.upload_part_copy(
    Bucket="photos", Key="movie-copy.mp4", UploadId=cp, PartNumber=3,
    CopySource={"Bucket": "photos", "Key": "movie.mp4"},
    CopySourceRange="bytes=0-%d" % len(whole))) == "InvalidRange"
alice.complete_multipart_upload(Bucket="photos", Key="movie-copy.mp4", UploadId=cp,
                                MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": e1},
                                                           {"PartNumber": 2, "ETag": e2}]})
assert alice.get_object(Bucket="photos", Key="movie-copy.mp4")["Body"].read() == whole
alice.delete_object(Bucket="photos", Key="movie-copy.mp4")
alice.delete_object(Bucket="photos", Key="movie.mp4")
# An overwrite replaces the bytes; an empty object is an object.
alice.put_object(Bucket="photos", Key="cat.jpg", Body=b"smaller")
assert alice.get_object(Bucket="photos", Key="cat.jpg")["Body"].read() == b"smaller"
alice.put_object(Bucket="photos", Key="empty", Body=b"")
assert alice.head_object(Bucket="photos", Key="empty")["ContentLength"] == 0

# Conditions, Content-MD5, copies.
import base64
import datetime
tag = alice.head_object(Bucket="photos", Key="cat.jpg")["ETag"]
assert code(lambda: alice.get_object(Bucket="photos", Key="cat.jpg", IfNoneMatch=tag)) == "304"
assert code(lambda: alice.get_object(Bucket="photos", Key="cat.jpg", IfMatch='"0000"')) == \
    "PreconditionFailed"
assert alice.get_object(Bucket="photos", Key="cat.jpg", IfMatch=tag)["Body"].read() == b"smaller"
future = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)
past = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(hours=1)
assert code(lambda: alice.head_object(Bucket="photos", Key="cat.jpg", IfModifiedSince=future)) \
    == "304"
assert alice.head_object(Bucket="photos", Key="cat.jpg", IfModifiedSince=past)["ETag"] == tag
assert code(lambda: alice.get_object(Bucket="photos", Key="cat.jpg",
                                     IfUnmodifiedSince=past)) == "PreconditionFailed"
assert code(lambda: alice.put_object(Bucket="photos", Key="cat.jpg", Body=b"x",
                                     IfNoneMatch="*")) == "PreconditionFailed"
alice.put_object(Bucket="photos", Key="fresh", Body=b"new", IfNoneMatch="*")
# A refused PUT leaves its keep-alive connection in step: the next request
# on it is answered as itself (a body left unread once answered for it).
for i in range(40):
    assert code(lambda: alice.put_object(Bucket="photos", Key="cat.jpg", Body=b"x" * 100,
                                         IfNoneMatch="*")) == "PreconditionFailed"
    alice.put_object(Bucket="photos", Key="fresh-%d" % i, Body=b"n", IfNoneMatch="*")
    alice.delete_object(Bucket="photos", Key="fresh-%d" % i)
good = base64.b64encode(hashlib.md5(b"checked").digest()).decode()
bad = base64.b64encode(hashlib.md5(b"other").digest()).decode()
alice.put_object(Bucket="photos", Key="fresh", Body=b"checked", ContentMD5=good)
assert code(lambda: alice.put_object(Bucket="photos", Key="fresh", Body=b"checked",
                                     ContentMD5=bad)) == "BadDigest"
assert alice.get_object(Bucket="photos", Key="fresh")["Body"].read() == b"checked"
alice.put_object(Bucket="photos", Key="fresh", Body=b"tagged", ContentType="text/x-tagged",
                 Metadata={"camera": "pinhole"})
r = alice.copy_object(Bucket="photos", Key="cat-copy.jpg", CopySource={"Bucket": "photos", "Key": "fresh"})
assert r["CopyObjectResult"]["ETag"] == '"%s"' % hashlib.md5(b"tagged").hexdigest()
c = alice.get_object(Bucket="photos", Key="cat-copy.jpg")
assert c["Body"].read() == b"tagged" and c["Metadata"] == {"camera": "pinhole"}
assert c["ContentType"] == "text/x-tagged"
alice.copy_object(Bucket="photos", Key="cat-copy.jpg", CopySource={"Bucket": "photos", "Key": "cat.jpg"},
                  MetadataDirective="REPLACE", Metadata={"copied": "yes"}, ContentType="text/plain")
c = alice.get_object(Bucket="photos", Key="cat-copy.jpg")
assert c["Metadata"] == {"copied": "yes"} and c["ContentType"] == "text/plain"
assert code(lambda: alice.copy_object(Bucket="photos", Key="cat.jpg",
                                      CopySource={"Bucket": "photos", "Key": "cat.jpg"})) == \
    "InvalidRequest"
assert code(lambda: alice.copy_object(Bucket="photos", Key="x",
                                      CopySource={"Bucket": "photos", "Key": "none"})) == "NoSuchKey"
r = alice.delete_objects(Bucket="photos", Delete={"Objects": [{"Key": "fresh"}, {"Key": "cat-copy.jpg"},
                                                             {"Key": "never"}]})
assert sorted(d["Key"] for d in r["Deleted"]) == ["cat-copy.jpg", "fresh", "never"], r

# Listings, v2 and v1, as AWS answers them.
keys = ["a/1", "a/2", "a/b/3", "b/1", "c", "d/", "unicode/\u00e5\u00e4\u00f6",
        "odd key+plus%25&amp;.txt"]
for k in keys:
    alice.put_object(Bucket="photos", Key=k, Body=k.encode())
everything = sorted(keys + ["cat.jpg", "empty"])
l = alice.list_objects_v2(Bucket="photos")
assert [o["Key"] for o in l["Contents"]] == everything, l["Contents"]
assert l["KeyCount"] == len(everything) and not l["IsTruncated"]
l = alice.list_objects_v2(Bucket="photos", Delimiter="/")
assert [o["Key"] for o in l["Contents"]] == ["c", "cat.jpg", "empty", "odd key+plus%25&amp;.txt"]
assert [p["Prefix"] for p in l["CommonPrefixes"]] == ["a/", "b/", "d/", "unicode/"]
l = alice.list_objects_v2(Bucket="photos", Prefix="a/", Delimiter="/")
assert [o["Key"] for o in l["Contents"]] == ["a/1", "a/2"]
assert [p["Prefix"] for p in l["CommonPrefixes"]] == ["a/b/"]
seen, token = [], None
while True:
    kw = {"ContinuationToken": token} if token else {}
    l = alice.list_objects_v2(Bucket="photos", MaxKeys=3, **kw)
    seen += [o["Key"] for o in l["Contents"]]
    if not l["IsTruncated"]:
        break
    token = l["NextContinuationToken"]
assert seen == everything, seen
l = alice.list_objects_v2(Bucket="photos", StartAfter="b/1")
assert [o["Key"] for o in l["Contents"]] == [k for k in everything if k > "b/1"]
l = alice.list_objects(Bucket="photos", Marker="a/2", MaxKeys=2)
assert [o["Key"] for o in l["Contents"]] == ["a/b/3", "b/1"] and l["IsTruncated"]
# The SDK asks for url-encoded keys and decodes them; the CLI too.
assert alice.get_object(Bucket="photos", Key="odd key+plus%25&amp;.txt")["Body"].read() == \
    b"odd key+plus%25&amp;.txt"
l = alice.list_objects(Bucket="photos", Delimiter="/", MaxKeys=2)
assert l["IsTruncated"] and l["NextMarker"] == "b/", l

# x-amz-checksum-*: verified whether given in a header or in the aws-chunked
# trailer boto3 sends, kept and answered to readers that ask.
import base64
import zlib
blob = os.urandom(70000)
sha = base64.b64encode(hashlib.sha256(blob).digest()).decode()
crc = base64.b64encode(zlib.crc32(blob).to_bytes(4, "big")).decode()
r = alice.put_object(Bucket="photos", Key="summed", Body=blob, ChecksumSHA256=sha)
assert r["ChecksumSHA256"] == sha, r
r = alice.put_object(Bucket="photos", Key="trailed", Body=blob, ChecksumAlgorithm="CRC32")
assert r["ChecksumCRC32"] == crc, r
h = alice.head_object(Bucket="photos", Key="trailed", ChecksumMode="ENABLED")
assert h["ChecksumCRC32"] == crc, h
assert "ChecksumCRC32" not in alice.head_object(Bucket="photos", Key="trailed")
assert code(lambda: alice.put_object(Bucket="photos", Key="bad-sum", Body=blob,
                                     ChecksumSHA256=crc * 2)) == "BadDigest"
assert code(lambda: alice.head_object(Bucket="photos", Key="bad-sum")) in ("404", "NoSuchKey")
alice.delete_objects(Bucket="photos", Delete={"Objects": [{"Key": "summed"}, {"Key": "trailed"}]})

# Non-ASCII metadata: the SDK refuses to send it, so raw bytes go in the
# header (as ceph/s3-tests does); the answer is RFC 2047, as AWS gives it.
import email.header


def latin1_meta(**kw):
    kw["params"]["headers"]["x-amz-meta-greeting"] = "Hello World\xe9"


alice.meta.events.register("before-call.s3.PutObject", latin1_meta)
alice.put_object(Bucket="photos", Key="unicode-meta", Body=b"x")
alice.meta.events.unregister("before-call.s3.PutObject", latin1_meta)
got = alice.head_object(Bucket="photos", Key="unicode-meta")["Metadata"]["greeting"]
(text, charset), = email.header.decode_header(got)
assert text.decode(charset) == "Hello World\xe9", got
alice.delete_object(Bucket="photos", Key="unicode-meta")

# Paging by common prefixes: a marker naming a prefix resumes past it (a
# client paging this way must not loop); max-keys=0 is an empty page.
alice.create_bucket(Bucket="pages")
for k in ["asdf", "boo/bar", "boo/baz/xyzzy", "cquux/thud", "cquux/bla"]:
    alice.put_object(Bucket="pages", Key=k, Body=b"")
seen, marker = [], ""
while True:
    r = alice.list_objects(Bucket="pages", Delimiter="/", Marker=marker, MaxKeys=1)
    seen += [o["Key"] for o in r.get("Contents", [])] + \
        [p["Prefix"] for p in r.get("CommonPrefixes", [])]
    if not r["IsTruncated"]:
        break
    marker = r["NextMarker"]
    assert len(seen) < 10, seen
assert seen == ["asdf", "boo/", "cquux/"], seen
r = alice.list_objects_v2(Bucket="pages", MaxKeys=0)
assert not r["IsTruncated"] and r["KeyCount"] == 0, r
assert "Owner" not in alice.list_objects_v2(Bucket="pages")["Contents"][0]
assert "Owner" in alice.list_objects_v2(Bucket="pages", FetchOwner=True)["Contents"][0]
# Conditional deletes and writes: a wrong ETag or size is 412 and deletes
# nothing; a write that must match an object that is not there is 404.
etag = alice.head_object(Bucket="pages", Key="asdf")["ETag"]
assert code(lambda: alice.delete_object(Bucket="pages", Key="asdf", IfMatch='"bad"')) == \
    "PreconditionFailed"
r = alice.delete_objects(Bucket="pages", Delete={"Objects": [{"Key": "asdf", "ETag": "bad"}]})
assert r["Errors"][0]["Code"] == "PreconditionFailed", r
alice.delete_object(Bucket="pages", Key="asdf", IfMatch=etag)
assert code(lambda: alice.put_object(Bucket="pages", Key="asdf", Body=b"x", IfMatch=etag)) == \
    "NoSuchKey"
everything = [{"Key": o["Key"]} for o in alice.list_objects_v2(Bucket="pages")["Contents"]]
alice.delete_objects(Bucket="pages", Delete={"Objects": everything})
alice.delete_bucket(Bucket="pages")

# Bucket listing pages; a bucket remembers its location; names as AWS allows.
names = sorted(b["Name"] for b in alice.list_buckets()["Buckets"])
r = alice.list_buckets(MaxBuckets=1)
assert [b["Name"] for b in r["Buckets"]] == names[:1] and r["ContinuationToken"], r
r = alice.list_buckets(MaxBuckets=len(names), ContinuationToken=r["ContinuationToken"])
assert [b["Name"] for b in r["Buckets"]] == names[1:] and "ContinuationToken" not in r, r
alice.create_bucket(Bucket="placed", CreateBucketConfiguration={"LocationConstraint": "eu-test"})
assert alice.get_bucket_location(Bucket="placed")["LocationConstraint"] == "eu-test"
alice.delete_bucket(Bucket="placed")
for bad in ["foo-.bar", "foo.-bar", "a..b", "192.168.5.4"]:
    assert code(lambda: alice.create_bucket(Bucket=bad)) == "InvalidBucketName", bad
long_url = alice.generate_presigned_url("get_object", Params={"Bucket": "photos", "Key": "c"},
                                        ExpiresIn=8 * 86400)
assert anon("GET", long_url)[0] == 403, "a presigned URL of more than seven days"

# Multipart uploads with checksums: each part's is verified and kept; the
# object's is made of them (COMPOSITE: the digest of the parts' digests,
# "-N"; FULL_OBJECT: the CRC of the whole object) and checked against one
# the complete gives.
p1, p2 = os.urandom(5 * 1024 * 1024), os.urandom(1000)
for algo, kind in [("SHA256", "COMPOSITE"), ("CRC32", "FULL_OBJECT")]:
    field = "Checksum" + algo
    up = alice.create_multipart_upload(Bucket="photos", Key="summed-mp", ChecksumAlgorithm=algo,
                                       ChecksumType=kind)
    assert up["ChecksumAlgorithm"] == algo and up["ChecksumType"] == kind, up
    parts = []
    for n, body in enumerate([p1, p2], 1):
        r = alice.upload_part(Bucket="photos", Key="summed-mp", UploadId=up["UploadId"],
                              PartNumber=n, Body=body, ChecksumAlgorithm=algo)
        parts.append({"PartNumber": n, "ETag": r["ETag"], field: r[field]})
    if kind == "COMPOSITE":
        raw = b"".join(hashlib.sha256(b).digest() for b in (p1, p2))
        whole = base64.b64encode(hashlib.sha256(raw).digest()).decode() + "-2"
    else:
        whole = base64.b64encode(zlib.crc32(p1 + p2).to_bytes(4, "big")).decode()
    assert code(lambda: alice.complete_multipart_upload(
        Bucket="photos", Key="summed-mp", UploadId=up["UploadId"],
        MultipartUpload={"Parts": parts}, **{field: "AAAAAA=="})) == "BadDigest"
    r = alice.complete_multipart_upload(Bucket="photos", Key="summed-mp", UploadId=up["UploadId"],
                                        MultipartUpload={"Parts": parts}, **{field: whole})
    assert r[field] == whole and r["ChecksumType"] == kind, (r, whole)
    h = alice.head_object(Bucket="photos", Key="summed-mp", ChecksumMode="ENABLED")
    assert h[field] == whole and h["ChecksumType"] == kind, h
    g = alice.get_object(Bucket="photos", Key="summed-mp", PartNumber=2)
    assert g[field] == parts[1][field] and g["Body"].read() == p2
    a = alice.get_object_attributes(Bucket="photos", Key="summed-mp",
                                    ObjectAttributes=["ObjectParts", "Checksum"])
    assert [p[field] for p in a["ObjectParts"]["Parts"]] == [p[field] for p in parts], a
    assert a["Checksum"][field] == whole, a
alice.delete_object(Bucket="photos", Key="summed-mp")

# A request that expects another bucket owner is refused.
assert code(lambda: alice.list_objects(Bucket="photos", ExpectedBucketOwner="bob")) == \
    "AccessDenied"
alice.list_objects(Bucket="photos", ExpectedBucketOwner="alice")

# Every answer names its request; an error's XML carries the same id.
try:
    alice.get_object(Bucket="photos", Key="no-such-key")
    raise AssertionError("a missing key was found")
except ClientError as e:
    rid = e.response["ResponseMetadata"]["RequestId"]
    assert e.response["Error"]["Code"] == "NoSuchKey"
    assert len(rid) == 16 and rid == e.response["ResponseMetadata"]["HTTPHeaders"][
        "x-amz-request-id"], e.response
assert alice.head_bucket(Bucket="photos")["ResponseMetadata"]["RequestId"]

# Who may do what: signatures, owners, canned ACLs, presigned URLs.
wrong = client(os.environ["GW_ALICE_KEY"], "not-the-secret")
assert code(lambda: wrong.list_buckets()) == "SignatureDoesNotMatch"
stranger = client("AKIANOSUCHKEY0000000", "whatever")
assert code(lambda: stranger.list_buckets()) == "InvalidAccessKeyId"
assert code(lambda: bob.get_object(Bucket="photos", Key="c")) == "AccessDenied"
assert code(lambda: bob.put_object(Bucket="photos", Key="x", Body=b"x")) == "AccessDenied"
assert code(lambda: bob.delete_bucket(Bucket="photos")) == "AccessDenied"
status, data = anon("GET", "%s/photos/c" % EP)
assert status == 403 and b"<Code>AccessDenied</Code>" in data, (status, data)
assert b"<RequestId>" in data, data
alice.put_object(Bucket="public-site", Key="index.html", Body=b"<h1>hi</h1>", ACL="public-read")
status, data = anon("GET", "%s/public-site/index.html" % EP)
assert (status, data) == (200, b"<h1>hi</h1>"), (status, data)
# Objects carry their own canned ACL: a private object in a public bucket
# is not readable by others, a public one in a private bucket is.
alice.put_object(Bucket="public-site", Key="draft.html", Body=b"draft")
assert anon("GET", "%s/public-site/draft.html" % EP)[0] == 403
assert code(lambda: bob.get_object(Bucket="public-site", Key="draft.html")) == "AccessDenied"
assert anon("GET", "%s/public-site/" % EP)[0] == 200, "a public-read bucket lists"
alice.put_object(Bucket="photos", Key="shared.jpg", Body=b"jpg", ACL="public-read")
assert anon("GET", "%s/photos/shared.jpg" % EP) == (200, b"jpg")
assert anon("GET", "%s/photos/" % EP)[0] == 403, "a private bucket does not list"
# Bucket and object ACLs read and set as grants.
acl = alice.get_bucket_acl(Bucket="public-site")
assert acl["Owner"]["ID"] == "alice"
assert sorted((g["Grantee"].get("URI", g["Grantee"].get("ID")), g["Permission"])
              for g in acl["Grants"]) == [
    ("alice", "FULL_CONTROL"), ("http://acs.amazonaws.com/groups/global/AllUsers", "READ")], acl
alice.put_bucket_acl(Bucket="public-site", ACL="private")
assert anon("GET", "%s/public-site/" % EP)[0] == 403
assert [g["Permission"] for g in alice.get_bucket_acl(Bucket="public-site")["Grants"]] == \
    ["FULL_CONTROL"]
alice.put_object_acl(Bucket="photos", Key="shared.jpg", ACL="authenticated-read")
assert anon("GET", "%s/photos/shared.jpg" % EP)[0] == 403
assert bob.get_object(Bucket="photos", Key="shared.jpg")["Body"].read() == b"jpg"
g = alice.get_object_acl(Bucket="photos", Key="shared.jpg")["Grants"]
assert ("http://acs.amazonaws.com/groups/global/AuthenticatedUsers", "READ") in \
    [(x["Grantee"].get("URI"), x["Permission"]) for x in g], g
assert code(lambda: bob.put_object_acl(Bucket="photos", Key="shared.jpg",
                                       ACL="public-read")) == "AccessDenied"
# Another user writing into a public-read-write bucket owns what it writes,
# and may grant the bucket's owner; its uploads name it as initiator.
alice.create_bucket(Bucket="dropbox", ACL="public-read-write")
bob.put_object(Bucket="dropbox", Key="from-bob", Body=b"b", ACL="bucket-owner-full-control")
g = alice.get_object_acl(Bucket="dropbox", Key="from-bob")
assert g["Owner"]["ID"] == "bob", g
assert sorted((x["Grantee"]["ID"], x["Permission"]) for x in g["Grants"]) == \
    [("alice", "FULL_CONTROL"), ("bob", "FULL_CONTROL")], g
up = bob.create_multipart_upload(Bucket="dropbox", Key="big")["UploadId"]
u = alice.list_multipart_uploads(Bucket="dropbox")["Uploads"][0]
assert u["Initiator"]["ID"] == "bob" and u["Owner"]["ID"] == "bob", u
bob.abort_multipart_upload(Bucket="dropbox", Key="big", UploadId=up)
alice.delete_object(Bucket="dropbox", Key="from-bob")
alice.delete_bucket(Bucket="dropbox")
alice.delete_objects(Bucket="public-site", Delete={"Objects": [{"Key": "draft.html"}]})
alice.delete_objects(Bucket="photos", Delete={"Objects": [{"Key": "shared.jpg"}]})
alice.put_bucket_acl(Bucket="public-site", ACL="public-read")
status, _ = anon("PUT", "%s/public-site/evil.html" % EP, data=b"x")
assert status == 403, status
url = alice.generate_presigned_url("get_object", Params={"Bucket": "photos", "Key": "c"},
                                   ExpiresIn=300)
assert anon("GET", url) == (200, b"c")
short = alice.generate_presigned_url("get_object", Params={"Bucket": "photos", "Key": "c"},
                                     ExpiresIn=1)
time.sleep(2)
assert anon("GET", short)[0] == 403

# Hostile requests get S3's errors (never a 500) and the gateway serves on.
import socket
host, port = EP.split("//")[1].split(":")


def raw(req, head=False):
    s = socket.create_connection((host, int(port)), timeout=10)
    s.sendall(req)
    data = b""
    while b"\r\n\r\n" not in data:
        c = s.recv(65536)
        if not c:
            break
        data += c
    s.close()
    return data.split(b"\r\n\r\n", 1)[0] if head else data.split(b"\r\n", 1)[0]


assert raw(b"GET /photos/c HTTP/1.1\r\nHost: x\r\nRange: bytes=zz\r\n\r\n").startswith(b"HTTP/1.1 4")
assert raw(b"GET /photos/c HTTP/1.1\r\nHost: x\r\nIf-Modified-Since: no date\r\n\r\n") \
    .startswith(b"HTTP/1.1 4")
assert raw(b"GET /photos/c HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 100000 + b"\r\n\r\n") \
    .startswith(b"HTTP/1.1 4"), "an oversized head"
assert raw(b"POST /photos?delete HTTP/1.1\r\nHost: x\r\nContent-Length: 9\r\n\r\n<Delete><") \
    .startswith(b"HTTP/1.1 4")
assert raw(b"NONSENSE / HTTP/1.1\r\nHost: x\r\n\r\n").startswith(b"HTTP/1.1 501")
# A refused PUT whose client waits for 100 Continue gets its 403 at once.
# It says the connection closes: whether the body follows is unknown, so
# the connection cannot be read in step again (botocore reusing it took
# the stale answer for the next request's).
head = raw(b"PUT /photos/x HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
           b"Expect: 100-continue\r\n\r\n", head=True)
assert head.startswith(b"HTTP/1.1 403"), head
assert b"connection: close" in head.lower(), head
assert raw(b"\x00\x01garbage\r\n\r\n").startswith(b"HTTP/1.1 400")
assert alice.get_object(Bucket="photos", Key="c")["Body"].read() == b"c"

# Versioning: enable and suspend, version ids, delete markers, listing of
# versions, GET, HEAD and DELETE by version id.
alice.create_bucket(Bucket="history")
alice.put_object(Bucket="history", Key="doc", Body=b"before versioning")
assert "Status" not in alice.get_bucket_versioning(Bucket="history")
alice.put_bucket_versioning(Bucket="history", VersioningConfiguration={"Status": "Enabled"})
assert alice.get_bucket_versioning(Bucket="history")["Status"] == "Enabled"
v1 = alice.put_object(Bucket="history", Key="doc", Body=b"one")["VersionId"]
v2 = alice.put_object(Bucket="history", Key="doc", Body=b"two")["VersionId"]
assert v1 != v2 and "null" not in (v1, v2)
assert alice.get_object(Bucket="history", Key="doc")["Body"].read() == b"two"
got = alice.get_object(Bucket="history", Key="doc", VersionId=v1)
assert got["Body"].read() == b"one" and got["VersionId"] == v1
assert alice.get_object(Bucket="history", Key="doc", VersionId="null")["Body"].read() == \
    b"before versioning"
assert alice.head_object(Bucket="history", Key="doc", VersionId=v2)["ContentLength"] == 3
assert code(lambda: alice.get_object(Bucket="history", Key="doc",
                                     VersionId="0" * 24)) == "NoSuchVersion"
vs = alice.list_object_versions(Bucket="history")
assert [(v["VersionId"], v["IsLatest"]) for v in vs["Versions"]] == \
    [(v2, True), (v1, False), ("null", False)], vs["Versions"]
# A delete makes a delete marker: the key is gone from listings and GETs,
# its versions stay.
d = alice.delete_object(Bucket="history", Key="doc")
marker = d["VersionId"]
assert d["DeleteMarker"] and marker not in (v1, v2)
assert code(lambda: alice.get_object(Bucket="history", Key="doc")) == "NoSuchKey"
try:
    alice.get_object(Bucket="history", Key="doc")
except ClientError as e:
    assert e.response["ResponseMetadata"]["HTTPHeaders"].get("x-amz-delete-marker") == "true"
assert "Contents" not in alice.list_objects_v2(Bucket="history")
assert code(lambda: alice.get_object(Bucket="history", Key="doc",
                                     VersionId=marker)) == "MethodNotAllowed"
vs = alice.list_object_versions(Bucket="history")
assert [(m["VersionId"], m["IsLatest"]) for m in vs["DeleteMarkers"]] == [(marker, True)]
assert [v["VersionId"] for v in vs["Versions"]] == [v2, v1, "null"]
assert code(lambda: alice.delete_bucket(Bucket="history")) == "BucketNotEmpty"
# Removing the marker brings the newest version back; removing that, the one before.
d = alice.delete_object(Bucket="history", Key="doc", VersionId=marker)
assert d["DeleteMarker"] and d["VersionId"] == marker
assert alice.get_object(Bucket="history", Key="doc")["Body"].read() == b"two"
alice.delete_object(Bucket="history", Key="doc", VersionId=v2)
assert alice.get_object(Bucket="history", Key="doc")["Body"].read() == b"one"
assert code(lambda: alice.get_object(Bucket="history", Key="doc",
                                     VersionId=v2)) == "NoSuchVersion"
# Paging through versions with key and version-id markers.
for i in range(3):
    alice.put_object(Bucket="history", Key="page", Body=b"%d" % i)
seen, km, vm = [], None, None
while True:
    kw = dict(Bucket="history", MaxKeys=2)
    if km:
        kw.update(KeyMarker=km, VersionIdMarker=vm)
    r = alice.list_object_versions(**kw)
    seen += [(v["Key"], v["VersionId"]) for v in r.get("Versions", [])]
    if not r["IsTruncated"]:
        break
    km, vm = r["NextKeyMarker"], r["NextVersionIdMarker"]
assert [k for k, _ in seen] == ["doc", "doc", "page", "page", "page"], seen
assert len(set(seen)) == 5
# Suspended: writes make the null version, replacing the one before.
alice.put_bucket_versioning(Bucket="history", VersioningConfiguration={"Status": "Suspended"})
assert alice.get_bucket_versioning(Bucket="history")["Status"] == "Suspended"
assert "VersionId" not in alice.put_object(Bucket="history", Key="doc", Body=b"s1")
alice.put_object(Bucket="history", Key="doc", Body=b"s2")
vs = [(v["VersionId"], v["IsLatest"]) for v in
      alice.list_object_versions(Bucket="history", Prefix="doc")["Versions"]]
assert vs == [("null", True), (v1, False)], vs
assert alice.get_object(Bucket="history", Key="doc", VersionId="null")["Body"].read() == b"s2"
# Copies name the version they read; multi-object delete takes version ids.
c = alice.copy_object(Bucket="history", Key="copy",
                      CopySource={"Bucket": "history", "Key": "doc", "VersionId": v1})
assert alice.get_object(Bucket="history", Key="copy")["Body"].read() == b"one"
assert c["CopySourceVersionId"] == v1
every = alice.list_object_versions(Bucket="history")
objs = [{"Key": v["Key"], "VersionId": v["VersionId"]}
        for v in every.get("Versions", []) + every.get("DeleteMarkers", [])]
r = alice.delete_objects(Bucket="history", Delete={"Objects": objs})
assert len(r["Deleted"]) == len(objs) and "Errors" not in r, r
assert "Versions" not in alice.list_object_versions(Bucket="history")
alice.delete_bucket(Bucket="history")

# The aws CLI: copy up and down, list.
env = dict(os.environ, AWS_ACCESS_KEY_ID=os.environ["GW_ALICE_KEY"],
           AWS_SECRET_ACCESS_KEY=os.environ["GW_ALICE_SECRET"], AWS_DEFAULT_REGION="us-east-1")
with tempfile.TemporaryDirectory() as d:
    src = os.path.join(d, "src.bin")
    dst = os.path.join(d, "dst.bin")
    blob = os.urandom(20 * 1024 * 1024 + 3)  # the CLI uploads it in parts
    open(src, "wb").write(blob)
    aws = ["aws", "--endpoint-url", EP, "s3"]
    subprocess.run(aws + ["cp", src, "s3://photos/cli/src.bin"], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    subprocess.run(aws + ["cp", "s3://photos/cli/src.bin", dst], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    assert open(dst, "rb").read() == blob
    ls = subprocess.run(aws + ["ls", "s3://photos/cli/"], env=env, check=True,
                        capture_output=True, text=True).stdout
    assert "src.bin" in ls and str(len(blob)) in ls, ls
    subprocess.run(aws + ["cp", "s3://photos/cli/src.bin", "s3://photos/cli/copy.bin"], env=env,
                   check=True, stdout=subprocess.DEVNULL)
    head = alice.head_object(Bucket="photos", Key="cli/copy.bin")
    assert head["ContentLength"] == len(blob)
    subprocess.run(aws + ["rm", "--recursive", "s3://photos/cli/"], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    assert "Contents" not in alice.list_objects_v2(Bucket="photos", Prefix="cli/")

# Deleting: a bucket only when empty.
assert code(lambda: alice.delete_bucket(Bucket="photos")) == "BucketNotEmpty"
for o in alice.list_objects_v2(Bucket="photos")["Contents"]:
    alice.delete_object(Bucket="photos", Key=o["Key"])
alice.delete_object(Bucket="photos", Key="never-was")  # deleting nothing is fine
alice.delete_bucket(Bucket="photos")
assert code(lambda: alice.head_bucket(Bucket="photos")) in ("404", "NoSuchBucket")
alice.delete_object(Bucket="public-site", Key="index.html")
alice.delete_bucket(Bucket="public-site")
assert alice.list_buckets()["Buckets"] == []
# Bob keeps one: the test then finds his removal refused.
bob.create_bucket(Bucket="bobs-bucket")
print("s3 clients: ok")
