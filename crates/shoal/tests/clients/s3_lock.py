"""Object lock through boto3: a bucket made with it is versioned for good;
COMPLIANCE versions stay until their date whoever asks (the owner
bypassing governance included), GOVERNANCE ones yield only to the owner
bypassing governance, a legal hold to nobody until lifted; retentions are
extended, never shortened; a bucket's default retention is given to new
objects; malformed configurations and retentions are refused and change
nothing.

Run by crates/shoal/tests/gateway.rs with GW_ENDPOINT, GW_KEY, GW_SECRET.
Exits non-zero with the failed check on the first failure.
"""
import datetime
import os
import time

from s3_common import client, code

s3 = client(os.environ["GW_KEY"], os.environ["GW_SECRET"])


def after(seconds):
    return datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=seconds)


B = "locked"
s3.create_bucket(Bucket=B, ObjectLockEnabledForBucket=True)
assert s3.get_bucket_versioning(Bucket=B)["Status"] == "Enabled"
cfg = s3.get_object_lock_configuration(Bucket=B)["ObjectLockConfiguration"]
assert cfg == {"ObjectLockEnabled": "Enabled"}, cfg
assert code(lambda: s3.put_bucket_versioning(
    Bucket=B, VersioningConfiguration={"Status": "Suspended"})) == "InvalidBucketState"

# COMPLIANCE: nobody deletes the version before its date, nobody shortens
# it; a delete without a version id only lays a delete marker.
until = after(12)
v = s3.put_object(Bucket=B, Key="c", Body=b"kept", ObjectLockMode="COMPLIANCE",
                  ObjectLockRetainUntilDate=until)["VersionId"]
head = s3.head_object(Bucket=B, Key="c")
assert head["ObjectLockMode"] == "COMPLIANCE", head
r = s3.get_object_retention(Bucket=B, Key="c", VersionId=v)["Retention"]
assert r["Mode"] == "COMPLIANCE", r
assert code(lambda: s3.delete_object(Bucket=B, Key="c", VersionId=v)) == "AccessDenied"
assert code(lambda: s3.delete_object(Bucket=B, Key="c", VersionId=v,
                                     BypassGovernanceRetention=True)) == "AccessDenied"
got = s3.delete_objects(Bucket=B, Delete={"Objects": [{"Key": "c", "VersionId": v}]})
assert [e["Code"] for e in got.get("Errors", [])] == ["AccessDenied"], got
assert code(lambda: s3.put_object_retention(
    Bucket=B, Key="c", VersionId=v, BypassGovernanceRetention=True,
    Retention={"Mode": "COMPLIANCE", "RetainUntilDate": after(5)})) == "AccessDenied"
assert code(lambda: s3.put_object_retention(
    Bucket=B, Key="c", VersionId=v, BypassGovernanceRetention=True,
    Retention={"Mode": "GOVERNANCE", "RetainUntilDate": after(60)})) == "AccessDenied"
# Extending it is allowed (by a second: the test waits it out below).
longer = until + datetime.timedelta(seconds=1)
s3.put_object_retention(Bucket=B, Key="c", VersionId=v,
                        Retention={"Mode": "COMPLIANCE", "RetainUntilDate": longer})
marker = s3.delete_object(Bucket=B, Key="c")
assert marker["DeleteMarker"] is True, marker
assert s3.get_object(Bucket=B, Key="c", VersionId=v)["Body"].read() == b"kept"

# GOVERNANCE: only bypassing governance, as the owner, deletes or shortens.
g = s3.put_object(Bucket=B, Key="g", Body=b"g", ObjectLockMode="GOVERNANCE",
                  ObjectLockRetainUntilDate=after(3600))["VersionId"]
assert code(lambda: s3.delete_object(Bucket=B, Key="g", VersionId=g)) == "AccessDenied"
assert code(lambda: s3.put_object_retention(
    Bucket=B, Key="g", VersionId=g,
    Retention={"Mode": "GOVERNANCE", "RetainUntilDate": after(60)})) == "AccessDenied"
s3.put_object_retention(Bucket=B, Key="g", VersionId=g, BypassGovernanceRetention=True,
                        Retention={"Mode": "GOVERNANCE", "RetainUntilDate": after(60)})
s3.delete_object(Bucket=B, Key="g", VersionId=g, BypassGovernanceRetention=True)
assert code(lambda: s3.head_object(Bucket=B, Key="g", VersionId=g)) in ("404", "NoSuchVersion")

# A legal hold: no delete, bypass or not, until lifted.
h = s3.put_object(Bucket=B, Key="h", Body=b"h", ObjectLockLegalHoldStatus="ON")["VersionId"]
assert s3.get_object_legal_hold(Bucket=B, Key="h")["LegalHold"]["Status"] == "ON"
assert code(lambda: s3.delete_object(Bucket=B, Key="h", VersionId=h,
                                     BypassGovernanceRetention=True)) == "AccessDenied"
s3.put_object_legal_hold(Bucket=B, Key="h", VersionId=h, LegalHold={"Status": "OFF"})
s3.delete_object(Bucket=B, Key="h", VersionId=h)

# A default retention for new objects; malformed ones refused.
for what, bad, want in [
    ("Days and Years", {"Mode": "GOVERNANCE", "Days": 1, "Years": 1}, "MalformedXML"),
    ("no period", {"Mode": "GOVERNANCE"}, "MalformedXML"),
    ("zero days", {"Mode": "GOVERNANCE", "Days": 0}, "InvalidRetentionPeriod"),
    ("a bad mode", {"Mode": "FOREVER", "Days": 1}, "MalformedXML"),
]:
    got = code(lambda: s3.put_object_lock_configuration(Bucket=B, ObjectLockConfiguration={
        "ObjectLockEnabled": "Enabled", "Rule": {"DefaultRetention": bad}}))
    assert got == want, f"{what}: {got}"
assert s3.get_object_lock_configuration(Bucket=B)["ObjectLockConfiguration"] == \
    {"ObjectLockEnabled": "Enabled"}
s3.put_object_lock_configuration(Bucket=B, ObjectLockConfiguration={
    "ObjectLockEnabled": "Enabled", "Rule": {"DefaultRetention": {"Mode": "GOVERNANCE", "Days": 1}}})
d = s3.put_object(Bucket=B, Key="d", Body=b"d")["VersionId"]
r = s3.get_object_retention(Bucket=B, Key="d", VersionId=d)["Retention"]
assert r["Mode"] == "GOVERNANCE" and r["RetainUntilDate"] > after(23 * 3600), r
s3.delete_object(Bucket=B, Key="d", VersionId=d, BypassGovernanceRetention=True)
assert code(lambda: s3.put_object(Bucket=B, Key="x", Body=b"x", ObjectLockMode="COMPLIANCE",
                                  ObjectLockRetainUntilDate=after(-60))) == "InvalidArgument"

# Once its date has passed, the COMPLIANCE version goes like any other.
time.sleep(max(0.0, (longer - after(0)).total_seconds()) + 1.5)
s3.delete_object(Bucket=B, Key="c", VersionId=v)
vs = s3.list_object_versions(Bucket=B)
for x in vs.get("Versions", []) + vs.get("DeleteMarkers", []):
    s3.delete_object(Bucket=B, Key=x["Key"], VersionId=x["VersionId"])
s3.delete_bucket(Bucket=B)
print("s3 object lock: ok")
