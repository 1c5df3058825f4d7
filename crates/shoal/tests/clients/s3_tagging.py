"""Object and bucket tags through clients nobody here wrote: boto3 and the
aws CLI. Tags given with a PUT, a copy or a multipart upload; read, replaced
and removed, per version in a versioned bucket; AWS's limits (10 tags on an
object, 50 on a bucket, keys of 128 characters, values of 256, no key twice,
no `aws:` keys) refused with InvalidTag and nothing changed; who may change
them.

Run by crates/shoal/tests/gateway.rs with GW_ENDPOINT, GW_KEY, GW_SECRET (the
bucket owner) and GW_BOB_KEY, GW_BOB_SECRET (another user).
Exits non-zero with the failed check on the first failure.
"""
import json
import os
import subprocess

from s3_common import EP, client, code

s3 = client(os.environ["GW_KEY"], os.environ["GW_SECRET"])
bob = client(os.environ["GW_BOB_KEY"], os.environ["GW_BOB_SECRET"])


def tagset(d):
    return [{"Key": k, "Value": v} for k, v in d.items()]


def tags_of(bucket, key, **kw):
    got = s3.get_object_tagging(Bucket=bucket, Key=key, **kw)["TagSet"]
    return {t["Key"]: t["Value"] for t in got}


B = "tagged"
s3.create_bucket(Bucket=B)

# Given with a PUT (the x-amz-tagging header, URL-encoded), counted in GET.
s3.put_object(Bucket=B, Key="o", Body=b"data", Tagging="team=storage&cost%20centre=a%2Fb&empty=")
want = {"team": "storage", "cost centre": "a/b", "empty": ""}
assert tags_of(B, "o") == want, tags_of(B, "o")
assert s3.get_object(Bucket=B, Key="o")["TagCount"] == 3
head = s3.head_object(Bucket=B, Key="o")["ResponseMetadata"]["HTTPHeaders"]
assert head.get("x-amz-tagging-count") == "3", head
s3.put_object(Bucket=B, Key="plain", Body=b"p")
assert "TagCount" not in s3.get_object(Bucket=B, Key="plain")
assert tags_of(B, "plain") == {}

# Replaced whole, then removed.
s3.put_object_tagging(Bucket=B, Key="o", Tagging={"TagSet": tagset({"a": "1", "b": "2"})})
assert tags_of(B, "o") == {"a": "1", "b": "2"}
s3.delete_object_tagging(Bucket=B, Key="o")
assert tags_of(B, "o") == {}
assert "TagCount" not in s3.get_object(Bucket=B, Key="o")
assert s3.get_object(Bucket=B, Key="o")["Body"].read() == b"data"

# AWS's limits: at the limit accepted, past it InvalidTag and nothing changed.
s3.put_object_tagging(Bucket=B, Key="o", Tagging={"TagSet": tagset({"keep": "me"})})
ten = {f"k{i}": f"v{i}" for i in range(10)}
s3.put_object_tagging(Bucket=B, Key="o", Tagging={"TagSet": tagset(ten)})
assert tags_of(B, "o") == ten
longest = {"k" * 128: "v" * 256}
s3.put_object_tagging(Bucket=B, Key="o", Tagging={"TagSet": tagset(longest)})
assert tags_of(B, "o") == longest
bad_sets = {
    "11 tags": tagset({f"k{i}": "v" for i in range(11)}),
    "a key of 129": tagset({"k" * 129: "v"}),
    "a value of 257": tagset({"k": "v" * 257}),
    "an aws: key": tagset({"aws:cloudformation:stack": "v"}),
    "a key twice": [{"Key": "k", "Value": "1"}, {"Key": "k", "Value": "2"}],
}
for what, ts in bad_sets.items():
    got = code(lambda: s3.put_object_tagging(Bucket=B, Key="o", Tagging={"TagSet": ts}))
    assert got == "InvalidTag", f"{what}: {got}"
    assert tags_of(B, "o") == longest, what
for what, header in {"11 tags": "&".join(f"k{i}=v" for i in range(11)),
                     "a key twice": "k=1&k=2", "an aws: key": "aws%3Ax=1"}.items():
    got = code(lambda: s3.put_object(Bucket=B, Key="refused", Body=b"x", Tagging=header))
    assert got == "InvalidTag", f"PUT with {what}: {got}"
got = code(lambda: s3.put_object(Bucket=B, Key="refused", Body=b"x", Tagging="a=%zz"))
assert got == "InvalidArgument", got
assert code(lambda: s3.head_object(Bucket=B, Key="refused")) == "404"
assert code(lambda: s3.get_object_tagging(Bucket=B, Key="absent")) == "NoSuchKey"
assert code(lambda: s3.put_object_tagging(
    Bucket=B, Key="absent", Tagging={"TagSet": tagset({"a": "1"})})) == "NoSuchKey"

# Copies keep the source's tags unless told to replace them.
s3.put_object_tagging(Bucket=B, Key="o", Tagging={"TagSet": tagset({"src": "yes"})})
s3.copy_object(Bucket=B, Key="copy", CopySource={"Bucket": B, "Key": "o"})
assert tags_of(B, "copy") == {"src": "yes"}
s3.copy_object(Bucket=B, Key="copy2", CopySource={"Bucket": B, "Key": "o"},
               TaggingDirective="REPLACE", Tagging="dst=1")
assert tags_of(B, "copy2") == {"dst": "1"}
s3.copy_object(Bucket=B, Key="copy3", CopySource={"Bucket": B, "Key": "o"},
               TaggingDirective="REPLACE")
assert tags_of(B, "copy3") == {}

# A multipart upload's tags are the object's once complete.
up = s3.create_multipart_upload(Bucket=B, Key="mp", Tagging="part=of-it")["UploadId"]
p = s3.upload_part(Bucket=B, Key="mp", UploadId=up, PartNumber=1, Body=b"m" * 1024)
s3.complete_multipart_upload(Bucket=B, Key="mp", UploadId=up, MultipartUpload={
    "Parts": [{"PartNumber": 1, "ETag": p["ETag"]}]})
assert tags_of(B, "mp") == {"part": "of-it"}

# Who may: another user neither reads nor changes a private object's tags.
assert code(lambda: bob.get_object_tagging(Bucket=B, Key="o")) == "AccessDenied"
assert code(lambda: bob.put_object_tagging(
    Bucket=B, Key="o", Tagging={"TagSet": tagset({"x": "y"})})) == "AccessDenied"
assert code(lambda: bob.delete_object_tagging(Bucket=B, Key="o")) == "AccessDenied"
assert code(lambda: bob.get_bucket_tagging(Bucket=B)) == "AccessDenied"
assert code(lambda: bob.put_bucket_tagging(
    Bucket=B, Tagging={"TagSet": tagset({"x": "y"})})) == "AccessDenied"
assert tags_of(B, "o") == {"src": "yes"}

# Versions carry their own tags.
V = "tagged-versions"
s3.create_bucket(Bucket=V)
s3.put_bucket_versioning(Bucket=V, VersioningConfiguration={"Status": "Enabled"})
v1 = s3.put_object(Bucket=V, Key="k", Body=b"1", Tagging="gen=1")["VersionId"]
v2 = s3.put_object(Bucket=V, Key="k", Body=b"2", Tagging="gen=2")["VersionId"]
assert tags_of(V, "k") == {"gen": "2"}
assert tags_of(V, "k", VersionId=v1) == {"gen": "1"}
r = s3.put_object_tagging(Bucket=V, Key="k", VersionId=v1,
                          Tagging={"TagSet": tagset({"gen": "one"})})
assert r["VersionId"] == v1, r
assert tags_of(V, "k", VersionId=v1) == {"gen": "one"}
assert tags_of(V, "k") == {"gen": "2"}
r = s3.get_object_tagging(Bucket=V, Key="k")
assert r["VersionId"] == v2, r
r = s3.delete_object_tagging(Bucket=V, Key="k", VersionId=v2)
assert r["VersionId"] == v2, r
assert tags_of(V, "k") == {} and tags_of(V, "k", VersionId=v1) == {"gen": "one"}
assert code(lambda: s3.get_object_tagging(Bucket=V, Key="k", VersionId="nope")) in (
    "NoSuchVersion", "InvalidArgument")

# Buckets: none until set, 50 at most, removed again.
assert code(lambda: s3.get_bucket_tagging(Bucket=B)) == "NoSuchTagSet"
fifty = {f"b{i}": str(i) for i in range(50)}
s3.put_bucket_tagging(Bucket=B, Tagging={"TagSet": tagset(fifty)})
got = {t["Key"]: t["Value"] for t in s3.get_bucket_tagging(Bucket=B)["TagSet"]}
assert got == fifty, got
for what, ts in {"51 tags": tagset({f"b{i}": "v" for i in range(51)}),
                 "an aws: key": tagset({"aws:x": "v"}),
                 "a key twice": [{"Key": "k", "Value": "1"}, {"Key": "k", "Value": "2"}]}.items():
    got = code(lambda: s3.put_bucket_tagging(Bucket=B, Tagging={"TagSet": ts}))
    assert got == "InvalidTag", f"bucket, {what}: {got}"
assert len(s3.get_bucket_tagging(Bucket=B)["TagSet"]) == 50
s3.delete_bucket_tagging(Bucket=B)
assert code(lambda: s3.get_bucket_tagging(Bucket=B)) == "NoSuchTagSet"

# The aws CLI, its own way.
env = dict(os.environ, AWS_ACCESS_KEY_ID=os.environ["GW_KEY"],
           AWS_SECRET_ACCESS_KEY=os.environ["GW_SECRET"], AWS_DEFAULT_REGION="us-east-1")


def aws(*args):
    out = subprocess.run(["aws", "--endpoint-url", EP, "s3api", *args], env=env,
                         check=True, capture_output=True, text=True, timeout=60).stdout
    return json.loads(out) if out.strip() else None


aws("put-object-tagging", "--bucket", B, "--key", "plain",
    "--tagging", json.dumps({"TagSet": tagset({"cli": "yes"})}))
assert aws("get-object-tagging", "--bucket", B, "--key", "plain")["TagSet"] == [
    {"Key": "cli", "Value": "yes"}]
aws("put-bucket-tagging", "--bucket", B, "--tagging", json.dumps({"TagSet": tagset({"env": "ci"})}))
assert aws("get-bucket-tagging", "--bucket", B)["TagSet"] == [{"Key": "env", "Value": "ci"}]

for o in s3.list_objects_v2(Bucket=B).get("Contents", []):
    s3.delete_object(Bucket=B, Key=o["Key"])
s3.delete_bucket(Bucket=B)
vs = s3.list_object_versions(Bucket=V)
for v in vs.get("Versions", []) + vs.get("DeleteMarkers", []):
    s3.delete_object(Bucket=V, Key=v["Key"], VersionId=v["VersionId"])
s3.delete_bucket(Bucket=V)
print("s3 tagging: ok")
