"""What the gateway does not do, it refuses: boto3 asks for every kind of
protection or behaviour the gateway lacks (SSE-KMS, lifecycle,
replication, storage classes other than STANDARD, requester pays,
website, logging, MFA delete; object lock in a bucket made without it;
SSE-C over plain HTTP), and each request must fail with NotImplemented
(or the error AWS documents for the case) and leave nothing stored.

Run by crates/shoal/tests/gateway.rs with GW_ENDPOINT, GW_KEY, GW_SECRET.
Exits non-zero with the failed check on the first failure.
"""
import os

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

EP = os.environ["GW_ENDPOINT"]
s3 = boto3.client(
    "s3", endpoint_url=EP, aws_access_key_id=os.environ["GW_KEY"],
    aws_secret_access_key=os.environ["GW_SECRET"], region_name="us-east-1",
    config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1},
                  signature_version="s3v4"))

B = "refusals"
s3.create_bucket(Bucket=B)
s3.put_object(Bucket=B, Key="plain", Body=b"plain")


def refused(what, f, want=("NotImplemented",)):
    try:
        f()
    except ClientError as e:
        got = e.response["Error"]["Code"]
        assert got in want, f"{what}: answered {got}, not {want}: {e}"
        return
    raise SystemExit(f"{what}: accepted, though the gateway does not do it")


def keys():
    return sorted(o["Key"] for o in s3.list_objects_v2(Bucket=B).get("Contents", []))


customer_key = os.urandom(32)
SSEC = dict(SSECustomerAlgorithm="AES256", SSECustomerKey=customer_key)
LOCK_UNTIL = "2031-01-01T00:00:00Z"

# Objects: each PUT is refused and nothing is stored under its key.
puts = {
    # SSE-C's key would cross plain HTTP in the clear (`s3_sse.py` has
    # it over HTTPS); no KMS is offered.
    "sse-c": (SSEC, "InvalidRequest"),
    "sse-kms": (dict(ServerSideEncryption="aws:kms", SSEKMSKeyId="some-key"), "InvalidArgument"),
    "website-redirect": (dict(WebsiteRedirectLocation="/elsewhere"), "NotImplemented"),
}
for name, (extra, want) in puts.items():
    refused(f"PutObject with {name}",
            lambda: s3.put_object(Bucket=B, Key=name, Body=b"x", **extra), (want,))
# Object lock on a bucket made without it: InvalidRequest, nothing stored.
for name, extra in {"lock-retention": dict(ObjectLockMode="COMPLIANCE",
                                           ObjectLockRetainUntilDate=LOCK_UNTIL),
                    "lock-legal-hold": dict(ObjectLockLegalHoldStatus="ON")}.items():
    refused(f"PutObject with {name} in a bucket without object lock",
            lambda: s3.put_object(Bucket=B, Key=name, Body=b"x", **extra), ("InvalidRequest",))
for sc in ["GLACIER", "STANDARD_IA", "REDUCED_REDUNDANCY", "DEEP_ARCHIVE"]:
    refused(f"PutObject with storage class {sc}",
            lambda: s3.put_object(Bucket=B, Key=sc, Body=b"x", StorageClass=sc),
            ("InvalidStorageClass",))
s3.put_object(Bucket=B, Key="standard", Body=b"s", StorageClass="STANDARD")
assert keys() == ["plain", "standard"], keys()

# The same asked of multipart uploads and copies.
refused("CreateMultipartUpload with SSE-C over HTTP",
        lambda: s3.create_multipart_upload(Bucket=B, Key="mp", **SSEC), ("InvalidRequest",))
refused("CreateMultipartUpload with SSE-KMS",
        lambda: s3.create_multipart_upload(Bucket=B, Key="mp", ServerSideEncryption="aws:kms"),
        ("InvalidArgument",))
refused("CreateMultipartUpload with a retention",
        lambda: s3.create_multipart_upload(Bucket=B, Key="mp", ObjectLockMode="GOVERNANCE",
                                           ObjectLockRetainUntilDate=LOCK_UNTIL),
        ("InvalidRequest",))
refused("CreateMultipartUpload in GLACIER",
        lambda: s3.create_multipart_upload(Bucket=B, Key="mp", StorageClass="GLACIER"),
        ("InvalidStorageClass",))
up = s3.create_multipart_upload(Bucket=B, Key="mp")["UploadId"]
refused("UploadPart with SSE-C to an upload begun without",
        lambda: s3.upload_part(Bucket=B, Key="mp", UploadId=up, PartNumber=1, Body=b"p", **SSEC),
        ("InvalidRequest",))
s3.abort_multipart_upload(Bucket=B, Key="mp", UploadId=up)
assert s3.list_multipart_uploads(Bucket=B).get("Uploads", []) == []
refused("CopyObject with SSE-KMS",
        lambda: s3.copy_object(Bucket=B, Key="copy", CopySource={"Bucket": B, "Key": "plain"},
                               ServerSideEncryption="aws:kms"), ("InvalidArgument",))
refused("CopyObject with a legal hold",
        lambda: s3.copy_object(Bucket=B, Key="copy", CopySource={"Bucket": B, "Key": "plain"},
                               ObjectLockLegalHoldStatus="ON"), ("InvalidRequest",))
refused("CopyObject into GLACIER",
        lambda: s3.copy_object(Bucket=B, Key="copy", CopySource={"Bucket": B, "Key": "plain"},
                               StorageClass="GLACIER"), ("InvalidStorageClass",))
assert keys() == ["plain", "standard"], keys()

# A key to read a plaintext object with: refused, never the plaintext.
refused("GetObject with an SSE-C key", lambda: s3.get_object(Bucket=B, Key="plain", **SSEC),
        ("InvalidRequest", "400"))
refused("HeadObject with an SSE-C key", lambda: s3.head_object(Bucket=B, Key="plain", **SSEC),
        ("InvalidRequest", "400"))

# Object-level protection requests.
refused("PutObjectRetention", lambda: s3.put_object_retention(
    Bucket=B, Key="plain", Retention={"Mode": "COMPLIANCE", "RetainUntilDate": LOCK_UNTIL}),
    ("InvalidRequest",))
refused("PutObjectLegalHold", lambda: s3.put_object_legal_hold(
    Bucket=B, Key="plain", LegalHold={"Status": "ON"}), ("InvalidRequest",))

# Buckets: every configuration the gateway lacks.
refused("CreateBucket with BucketOwnerEnforced",
        lambda: s3.create_bucket(Bucket="owned-bucket", ObjectOwnership="BucketOwnerEnforced"))
names = [b["Name"] for b in s3.list_buckets()["Buckets"]]
assert "owned-bucket" not in names, names

bucket_configs = {
    "PutBucketLifecycleConfiguration": lambda: s3.put_bucket_lifecycle_configuration(
        Bucket=B, LifecycleConfiguration={"Rules": [
            {"ID": "expire", "Status": "Enabled", "Filter": {"Prefix": ""},
             "Expiration": {"Days": 1}}]}),
    "PutBucketReplication": lambda: s3.put_bucket_replication(
        Bucket=B, ReplicationConfiguration={
            "Role": "arn:aws:iam::123456789012:role/r",
            "Rules": [{"Status": "Enabled", "Prefix": "",
                       "Destination": {"Bucket": "arn:aws:s3:::elsewhere"}}]}),
    "PutBucketRequestPayment": lambda: s3.put_bucket_request_payment(
        Bucket=B, RequestPaymentConfiguration={"Payer": "Requester"}),
    "PutBucketWebsite": lambda: s3.put_bucket_website(
        Bucket=B, WebsiteConfiguration={"IndexDocument": {"Suffix": "index.html"}}),
    "PutBucketLogging": lambda: s3.put_bucket_logging(
        Bucket=B, BucketLoggingStatus={"LoggingEnabled": {
            "TargetBucket": B, "TargetPrefix": "logs/"}}),
    "PutBucketCors": lambda: s3.put_bucket_cors(
        Bucket=B, CORSConfiguration={"CORSRules": [
            {"AllowedMethods": ["GET"], "AllowedOrigins": ["*"]}]}),
    "PutBucketNotificationConfiguration": lambda: s3.put_bucket_notification_configuration(
        Bucket=B, NotificationConfiguration={"QueueConfigurations": [
            {"QueueArn": "arn:aws:sqs:us-east-1:123456789012:q", "Events": ["s3:ObjectCreated:*"]}]}),
    "PutBucketOwnershipControls": lambda: s3.put_bucket_ownership_controls(
        Bucket=B, OwnershipControls={"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]}),
    "PutBucketVersioning with MFA delete": lambda: s3.put_bucket_versioning(
        Bucket=B, MFA="serial 123456",
        VersioningConfiguration={"Status": "Enabled", "MFADelete": "Enabled"}),
}
for what, f in bucket_configs.items():
    refused(what, f)
# Nothing of it took: the bucket is as it was, unversioned and private,
# and reading its configurations says they are not there to read.
assert "Status" not in s3.get_bucket_versioning(Bucket=B)
acl = s3.get_bucket_acl(Bucket=B)["Grants"]
assert [g["Permission"] for g in acl] == ["FULL_CONTROL"], acl
refused("GetBucketLifecycleConfiguration",
        lambda: s3.get_bucket_lifecycle_configuration(Bucket=B))
assert s3.get_object(Bucket=B, Key="plain")["Body"].read() == b"plain"
assert keys() == ["plain", "standard"], keys()

for k in keys():
    s3.delete_object(Bucket=B, Key=k)
s3.delete_bucket(Bucket=B)
print("s3 refusals: ok")
