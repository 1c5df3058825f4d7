"""Uploads against a gateway that is SIGKILLed midway (by the caller).

`write`: PUTs and multipart uploads of random objects until the gateway
stops answering; each acknowledged one is appended to GW_LOG as
`key md5` once its response came. `check` (against a restarted gateway):
every acknowledged object reads back whole with its MD5, and every listed
object reads back whole (its size and, for single PUTs, its ETag agree
with its data) — nothing half-written is listed.
"""
import hashlib
import os
import sys

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

s3 = boto3.client(
    "s3", endpoint_url=os.environ["GW_ENDPOINT"], aws_access_key_id=os.environ["GW_KEY"],
    aws_secret_access_key=os.environ["GW_SECRET"], region_name="us-east-1",
    config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1},
                  connect_timeout=2, read_timeout=10))
LOG = os.environ["GW_LOG"]

if sys.argv[1] == "write":
    s3.create_bucket(Bucket="killed")
    n = 0
    with open(LOG, "a") as log:
        while True:
            n += 1
            key = "obj-%05d" % n
            try:
                if n % 3 == 0:
                    parts = [os.urandom(5 * 1024 * 1024), os.urandom(1000 + n)]
                    u = s3.create_multipart_upload(Bucket="killed", Key=key)["UploadId"]
                    done = []
                    for i, p in enumerate(parts, 1):
                        e = s3.upload_part(Bucket="killed", Key=key, UploadId=u, PartNumber=i,
                                           Body=p)["ETag"]
                        done.append({"PartNumber": i, "ETag": e})
                    s3.complete_multipart_upload(Bucket="killed", Key=key, UploadId=u,
                                                 MultipartUpload={"Parts": done})
                    data = b"".join(parts)
                else:
                    data = os.urandom(1 + (n * 7919) % (9 * 1024 * 1024))
                    s3.put_object(Bucket="killed", Key=key, Body=data)
            except (BotoCoreError, ClientError):
                break
            log.write("%s %s\n" % (key, hashlib.md5(data).hexdigest()))
            log.flush()
    sys.exit(0)

acked = dict(line.split() for line in open(LOG) if line.strip())
assert len(acked) >= 2, "the gateway died before two uploads: %d" % len(acked)
listed = {}
token = None
while True:
    kw = {"ContinuationToken": token} if token else {}
    page = s3.list_objects_v2(Bucket="killed", **kw)
    for o in page.get("Contents", []):
        listed[o["Key"]] = o
    if not page["IsTruncated"]:
        break
    token = page["NextContinuationToken"]
for key, md5 in acked.items():
    data = s3.get_object(Bucket="killed", Key=key)["Body"].read()
    assert hashlib.md5(data).hexdigest() == md5, "acknowledged %s lost or changed" % key
for key, o in listed.items():
    data = s3.get_object(Bucket="killed", Key=key)["Body"].read()
    assert len(data) == o["Size"], "%s listed at %d bytes, reads %d" % (key, o["Size"], len(data))
    etag = o["ETag"].strip('"')
    if "-" not in etag:
        assert hashlib.md5(data).hexdigest() == etag, "%s reads other than its ETag" % key
print("acknowledged %d, listed %d: ok" % (len(acked), len(listed)))
