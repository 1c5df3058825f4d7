"""Malformed configuration bodies, each refused as AWS refuses them and
changing nothing: every configuration call a client may make of a bucket
or an object (tags, ACLs, public access blocks, object lock, retention,
legal hold, versioning) sent with a cut-short XML body gets MalformedXML;
a policy that is not JSON gets MalformedPolicy.

Run by crates/shoal/tests/gateway.rs with GW_ENDPOINT, GW_KEY, GW_SECRET.
Exits non-zero with the failed check on the first failure.
"""
import os

from s3_common import client, code

s3 = client(os.environ["GW_KEY"], os.environ["GW_SECRET"])
GARBAGE = None


def cut_body(request, **_):
    # Replaces the body boto3 built with its first half, unclosed, before
    # the request is signed (so the signature holds; the digests boto3
    # added for the whole body go).
    if GARBAGE is None:
        return
    request.data = GARBAGE
    for h in list(request.headers.keys()):
        if h.lower() == "content-md5" or h.lower().startswith("x-amz-checksum-") \
                or h.lower() == "x-amz-sdk-checksum-algorithm":
            del request.headers[h]


s3.meta.events.register("before-sign.s3.*", cut_body)

B = "malformed"
s3.create_bucket(Bucket=B, ObjectLockEnabledForBucket=True)
s3.put_object(Bucket=B, Key="o", Body=b"o")
s3.put_object_tagging(Bucket=B, Key="o", Tagging={"TagSet": [{"Key": "k", "Value": "v"}]})
before = {
    "tags": s3.get_object_tagging(Bucket=B, Key="o")["TagSet"],
    "acl": s3.get_bucket_acl(Bucket=B)["Grants"],
    "lock": s3.get_object_lock_configuration(Bucket=B)["ObjectLockConfiguration"],
    "versioning": s3.get_bucket_versioning(Bucket=B)["Status"],
}
calls = {
    "PutObjectTagging": lambda: s3.put_object_tagging(
        Bucket=B, Key="o", Tagging={"TagSet": [{"Key": "a", "Value": "b"}]}),
    "PutBucketTagging": lambda: s3.put_bucket_tagging(
        Bucket=B, Tagging={"TagSet": [{"Key": "a", "Value": "b"}]}),
    "PutBucketAcl": lambda: s3.put_bucket_acl(Bucket=B, AccessControlPolicy={
        "Owner": {"ID": "x"}, "Grants": []}),
    "PutPublicAccessBlock": lambda: s3.put_public_access_block(
        Bucket=B, PublicAccessBlockConfiguration={"BlockPublicAcls": True}),
    "PutObjectLockConfiguration": lambda: s3.put_object_lock_configuration(
        Bucket=B, ObjectLockConfiguration={"ObjectLockEnabled": "Enabled", "Rule": {
            "DefaultRetention": {"Mode": "GOVERNANCE", "Days": 1}}}),
    "PutObjectRetention": lambda: s3.put_object_retention(
        Bucket=B, Key="o", Retention={"Mode": "GOVERNANCE",
                                      "RetainUntilDate": "2031-01-01T00:00:00Z"}),
    "PutObjectLegalHold": lambda: s3.put_object_legal_hold(
        Bucket=B, Key="o", LegalHold={"Status": "ON"}),
    "PutBucketVersioning": lambda: s3.put_bucket_versioning(
        Bucket=B, VersioningConfiguration={"Status": "Enabled"}),
    "PutBucketEncryption": lambda: s3.put_bucket_encryption(
        Bucket=B, ServerSideEncryptionConfiguration={"Rules": [
            {"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]}),
}
for what, f in calls.items():
    for body in [b"<Tagging><TagSet><Tag><Key>a</Key>", b"not xml at all", b"<?xml"]:
        GARBAGE = body
        got = code(f)
        GARBAGE = None
        assert got == "MalformedXML", f"{what} with {body!r}: {got}"
GARBAGE = b"{not json"
got = code(lambda: s3.put_bucket_policy(Bucket=B, Policy="{}"))
GARBAGE = None
assert got == "MalformedPolicy", got
after = {
    "tags": s3.get_object_tagging(Bucket=B, Key="o")["TagSet"],
    "acl": s3.get_bucket_acl(Bucket=B)["Grants"],
    "lock": s3.get_object_lock_configuration(Bucket=B)["ObjectLockConfiguration"],
    "versioning": s3.get_bucket_versioning(Bucket=B)["Status"],
}
assert after == before, (before, after)
assert code(lambda: s3.get_public_access_block(Bucket=B)) == \
    "NoSuchPublicAccessBlockConfiguration"
assert code(lambda: s3.get_bucket_tagging(Bucket=B)) == "NoSuchTagSet"
assert code(lambda: s3.get_bucket_policy(Bucket=B)) == "NoSuchBucketPolicy"
assert code(lambda: s3.get_bucket_encryption(Bucket=B)) == \
    "ServerSideEncryptionConfigurationNotFoundError"
r = s3.get_object_legal_hold(Bucket=B, Key="o")["LegalHold"]["Status"]
assert r == "OFF", r

vs = s3.list_object_versions(Bucket=B)
for x in vs.get("Versions", []) + vs.get("DeleteMarkers", []):
    s3.delete_object(Bucket=B, Key=x["Key"], VersionId=x["VersionId"])
s3.delete_bucket(Bucket=B)
print("s3 malformed bodies: ok")
