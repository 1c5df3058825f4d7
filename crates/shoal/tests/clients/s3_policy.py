"""Bucket policies through boto3: set, read and removed by the bucket's
owner; anonymous reads allowed on one prefix and refused on another; an
explicit Deny beating an Allow (and the owner); conditions on the source
address, the listing prefix and the object's tags; malformed documents
refused with MalformedPolicy and nothing changed; an owner a policy locks
out can still remove it; public access blocks (each of their four
settings); grants to named users, by id and by e-mail address.

Run by crates/shoal/tests/gateway.rs with GW_ENDPOINT, GW_KEY, GW_SECRET (the
bucket owner, uid GW_UID) and GW_BOB_KEY, GW_BOB_SECRET (another user, uid
GW_BOB_UID). Exits non-zero with the failed check on the first failure.
"""
import json
import os

from s3_common import client, code

s3 = client(os.environ["GW_KEY"], os.environ["GW_SECRET"])
bob = client(os.environ["GW_BOB_KEY"], os.environ["GW_BOB_SECRET"])
anon = client()
BOB = os.environ["GW_BOB_UID"]
BOB_EMAIL = os.environ["GW_BOB_EMAIL"]


def policy(*statements):
    return json.dumps({"Version": "2012-10-17", "Statement": list(statements)})


def read(c, key):
    return c.get_object(Bucket=B, Key=key)["Body"].read()


B = "policed"
s3.create_bucket(Bucket=B)
for k in ["public/a", "private/a", "protected/a", "tagged/pub", "tagged/secret",
          "home/bob/x", "home/carol/x"]:
    s3.put_object(Bucket=B, Key=k, Body=k.encode())
s3.put_object_tagging(Bucket=B, Key="tagged/pub",
                      Tagging={"TagSet": [{"Key": "security", "Value": "public"}]})

# No policy: a private bucket, nothing for others.
assert code(lambda: s3.get_bucket_policy(Bucket=B)) == "NoSuchBucketPolicy"
assert code(lambda: read(anon, "public/a")) == "AccessDenied"
assert code(lambda: read(bob, "public/a")) == "AccessDenied"

doc = policy(
    {"Sid": "public-prefix", "Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
     "Resource": f"arn:aws:s3:::{B}/public/*"},
    {"Sid": "bob-everything", "Effect": "Allow", "Principal": {"AWS": [f"arn:aws:iam:::user/{BOB}"]},
     "Action": "s3:*", "Resource": [f"arn:aws:s3:::{B}", f"arn:aws:s3:::{B}/*"]},
    {"Sid": "bob-lists-his-home", "Effect": "Deny", "Principal": {"AWS": BOB},
     "Action": "s3:ListBucket", "Resource": f"arn:aws:s3:::{B}",
     "Condition": {"StringNotLike": {"s3:prefix": "home/bob/*"}}},
    {"Sid": "no-deletes-here", "Effect": "Deny", "Principal": "*", "Action": "s3:DeleteObject",
     "Resource": f"arn:aws:s3:::{B}/protected/*"},
    {"Sid": "from-loopback", "Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
     "Resource": f"arn:aws:s3:::{B}/tagged/*",
     "Condition": {"IpAddress": {"aws:SourceIp": "127.0.0.0/8"},
                   "StringEquals": {"s3:ExistingObjectTag/security": "public"}}},
)
s3.put_bucket_policy(Bucket=B, Policy=doc)
assert json.loads(s3.get_bucket_policy(Bucket=B)["Policy"]) == json.loads(doc)
# Only the owner reads or sets it (bob's s3:* aside: AWS keeps the policy
# calls to the owner's account; here the policy grants them too, so ask
# anonymously).
assert code(lambda: anon.get_bucket_policy(Bucket=B)) == "AccessDenied"
assert code(lambda: anon.put_bucket_policy(Bucket=B, Policy=doc)) == "AccessDenied"

# Anonymous reads: one prefix allowed, another refused; nothing else.
assert read(anon, "public/a") == b"public/a"
assert code(lambda: read(anon, "private/a")) == "AccessDenied"
assert code(lambda: anon.put_object(Bucket=B, Key="public/new", Body=b"x")) == "AccessDenied"
assert code(lambda: anon.list_objects_v2(Bucket=B)) == "AccessDenied"

# Whether the bucket is public, as its policy and ACL make it.
assert s3.get_bucket_policy_status(Bucket=B)["PolicyStatus"]["IsPublic"] is True

# Bob: everything the Allow grants, less what a Deny takes back.
assert read(bob, "private/a") == b"private/a"
bob.put_object(Bucket=B, Key="from-bob", Body=b"bob")
assert read(s3, "from-bob") == b"bob"
got = [o["Key"] for o in bob.list_objects_v2(Bucket=B, Prefix="home/bob/").get("Contents", [])]
assert got == ["home/bob/x"], got
assert code(lambda: bob.list_objects_v2(Bucket=B, Prefix="home/carol/")) == "AccessDenied"
assert code(lambda: bob.list_objects_v2(Bucket=B)) == "AccessDenied"
assert code(lambda: bob.delete_object(Bucket=B, Key="protected/a")) == "AccessDenied"
# A Deny beats the owner too.
assert code(lambda: s3.delete_object(Bucket=B, Key="protected/a")) == "AccessDenied"
assert read(s3, "protected/a") == b"protected/a"
bob.delete_object(Bucket=B, Key="from-bob")

# Conditions: the source address (loopback) and the object's tag.
assert read(anon, "tagged/pub") == b"tagged/pub"
assert code(lambda: read(anon, "tagged/secret")) == "AccessDenied"
ip_deny = policy(
    {"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
     "Resource": f"arn:aws:s3:::{B}/public/*"},
    {"Effect": "Deny", "Principal": "*", "Action": "s3:GetObject",
     "Resource": f"arn:aws:s3:::{B}/public/*",
     "Condition": {"NotIpAddress": {"aws:SourceIp": "10.0.0.0/8"}}})
s3.put_bucket_policy(Bucket=B, Policy=ip_deny)
assert code(lambda: read(anon, "public/a")) == "AccessDenied"
assert code(lambda: read(s3, "public/a")) == "AccessDenied"

# A missing object is NoSuchKey to whom may list the bucket under its
# name, AccessDenied to others (nothing learned of what is not there).
s3.put_bucket_policy(Bucket=B, Policy=policy(
    {"Effect": "Allow", "Principal": "*", "Action": "s3:ListBucket",
     "Resource": f"arn:aws:s3:::{B}", "Condition": {"StringLike": {"s3:prefix": "public/*"}}}))
assert code(lambda: anon.head_object(Bucket=B, Key="public/missing")) == "404"
assert code(lambda: anon.head_object(Bucket=B, Key="private/missing")) == "403"
assert code(lambda: read(anon, "public/a")) == "AccessDenied"
assert s3.get_bucket_policy_status(Bucket=B)["PolicyStatus"]["IsPublic"] is False
s3.put_bucket_policy(Bucket=B, Policy=ip_deny)

# Malformed documents: MalformedPolicy, and the policy set stays.
bad = {
    "not JSON": "{not json",
    "no Statement": json.dumps({"Version": "2012-10-17"}),
    "a bad Effect": policy({"Effect": "Perhaps", "Principal": "*", "Action": "s3:GetObject",
                            "Resource": f"arn:aws:s3:::{B}/*"}),
    "another bucket": policy({"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
                              "Resource": "arn:aws:s3:::someone-elses/*"}),
    "an unknown action": policy({"Effect": "Allow", "Principal": "*", "Action": "ec2:Run",
                                 "Resource": f"arn:aws:s3:::{B}/*"}),
    "an unknown operator": policy({"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
                                   "Resource": f"arn:aws:s3:::{B}/*",
                                   "Condition": {"Sometimes": {"aws:SourceIp": "1.2.3.4"}}}),
    "a bad address": policy({"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
                             "Resource": f"arn:aws:s3:::{B}/*",
                             "Condition": {"IpAddress": {"aws:SourceIp": "300.1.1.1/8"}}}),
}
for what, d in bad.items():
    got = code(lambda: s3.put_bucket_policy(Bucket=B, Policy=d))
    assert got == "MalformedPolicy", f"{what}: {got}"
    assert json.loads(s3.get_bucket_policy(Bucket=B)["Policy"]) == json.loads(ip_deny), what

# Locked out of everything, the owner still removes the policy.
s3.put_bucket_policy(Bucket=B, Policy=policy(
    {"Effect": "Deny", "Principal": "*", "Action": "s3:*",
     "Resource": [f"arn:aws:s3:::{B}", f"arn:aws:s3:::{B}/*"]}))
assert code(lambda: s3.list_objects_v2(Bucket=B)) == "AccessDenied"
assert code(lambda: read(s3, "private/a")) == "AccessDenied"
s3.delete_bucket_policy(Bucket=B)
assert code(lambda: s3.get_bucket_policy(Bucket=B)) == "NoSuchBucketPolicy"
assert read(s3, "private/a") == b"private/a"
assert code(lambda: read(anon, "public/a")) == "AccessDenied"

# Public access blocks: none until set; each setting as AWS defines it.
assert code(lambda: s3.get_public_access_block(Bucket=B)) == \
    "NoSuchPublicAccessBlockConfiguration"
public_doc = policy({"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
                     "Resource": f"arn:aws:s3:::{B}/public/*"})
s3.put_bucket_policy(Bucket=B, Policy=public_doc)
assert read(anon, "public/a") == b"public/a"
conf = {"BlockPublicAcls": False, "IgnorePublicAcls": False,
        "BlockPublicPolicy": False, "RestrictPublicBuckets": True}
s3.put_public_access_block(Bucket=B, PublicAccessBlockConfiguration=conf)
got = s3.get_public_access_block(Bucket=B)["PublicAccessBlockConfiguration"]
assert got == conf, got
# RestrictPublicBuckets: the public policy grants nothing to others now.
assert code(lambda: read(anon, "public/a")) == "AccessDenied"
assert read(s3, "public/a") == b"public/a"
# BlockPublicPolicy: a public policy cannot be set; one naming users can.
s3.put_public_access_block(Bucket=B, PublicAccessBlockConfiguration=dict(
    conf, BlockPublicPolicy=True, RestrictPublicBuckets=False))
assert code(lambda: s3.put_bucket_policy(Bucket=B, Policy=public_doc)) == "AccessDenied"
s3.put_bucket_policy(Bucket=B, Policy=policy(
    {"Effect": "Allow", "Principal": {"AWS": BOB}, "Action": "s3:GetObject",
     "Resource": f"arn:aws:s3:::{B}/*"}))
s3.delete_bucket_policy(Bucket=B)
# BlockPublicAcls: no public ACL on the bucket or its objects, in any call.
s3.put_public_access_block(Bucket=B, PublicAccessBlockConfiguration=dict(
    conf, BlockPublicAcls=True, RestrictPublicBuckets=False))
for acl in ["public-read", "public-read-write", "authenticated-read"]:
    assert code(lambda: s3.put_bucket_acl(Bucket=B, ACL=acl)) == "AccessDenied", acl
    assert code(lambda: s3.put_object(Bucket=B, Key="pub", Body=b"x", ACL=acl)) == \
        "AccessDenied", acl
    assert code(lambda: s3.put_object_acl(Bucket=B, Key="public/a", ACL=acl)) == \
        "AccessDenied", acl
assert code(lambda: s3.head_object(Bucket=B, Key="pub")) == "404"
s3.put_object(Bucket=B, Key="pub", Body=b"x", ACL="private")
# IgnorePublicAcls: public ACLs set before grant nothing.
s3.delete_public_access_block(Bucket=B)
s3.put_bucket_acl(Bucket=B, ACL="public-read")
s3.put_object_acl(Bucket=B, Key="pub", ACL="public-read")
assert read(anon, "pub") == b"x"
assert bob.list_objects_v2(Bucket=B)["KeyCount"] > 0
s3.put_public_access_block(Bucket=B, PublicAccessBlockConfiguration=dict(
    conf, IgnorePublicAcls=True, RestrictPublicBuckets=False))
assert code(lambda: read(anon, "pub")) == "AccessDenied"
assert code(lambda: bob.list_objects_v2(Bucket=B)) == "AccessDenied"
assert read(s3, "pub") == b"x"
s3.delete_public_access_block(Bucket=B)
assert code(lambda: s3.get_public_access_block(Bucket=B)) == \
    "NoSuchPublicAccessBlockConfiguration"
assert read(anon, "pub") == b"x"
s3.put_bucket_acl(Bucket=B, ACL="private")

# Grants to named users: by id and by e-mail address, in headers and in
# an AccessControlPolicy; each permission does what it says.
s3.put_object(Bucket=B, Key="granted", Body=b"g", GrantRead=f'id="{BOB}"')
assert read(bob, "granted") == b"g"
assert code(lambda: read(anon, "granted")) == "AccessDenied"
acl = s3.get_object_acl(Bucket=B, Key="granted")["Grants"]
assert {(g["Grantee"].get("ID"), g["Permission"]) for g in acl} >= {(BOB, "READ")}, acl
bob_grant = [g for g in acl if g["Grantee"].get("ID") == BOB][0]
assert bob_grant["Grantee"]["DisplayName"] == "Bob B.", bob_grant
# READ is not WRITE_ACP: bob may not change the ACL...
assert code(lambda: bob.put_object_acl(Bucket=B, Key="granted", ACL="private")) == "AccessDenied"
# ...until granted it, by e-mail address this time.
s3.put_object_acl(Bucket=B, Key="granted", GrantRead=f'id="{BOB}"',
                  GrantWriteACP=f'emailAddress="{BOB_EMAIL}"')
bob.put_object_acl(Bucket=B, Key="granted", ACL="private")
assert code(lambda: read(bob, "granted")) == "AccessDenied"
# Bucket grants: WRITE lets bob write, READ lets him list.
assert code(lambda: bob.put_object(Bucket=B, Key="by-bob", Body=b"b")) == "AccessDenied"
owner = s3.get_bucket_acl(Bucket=B)["Owner"]
s3.put_bucket_acl(Bucket=B, AccessControlPolicy={"Owner": owner, "Grants": [
    {"Grantee": {"Type": "CanonicalUser", "ID": owner["ID"]}, "Permission": "FULL_CONTROL"},
    {"Grantee": {"Type": "CanonicalUser", "ID": BOB}, "Permission": "WRITE"},
    {"Grantee": {"Type": "AmazonCustomerByEmail", "EmailAddress": BOB_EMAIL}, "Permission": "READ"}]})
got = {(g["Grantee"].get("ID"), g["Permission"]) for g in s3.get_bucket_acl(Bucket=B)["Grants"]}
assert got == {(owner["ID"], "FULL_CONTROL"), (BOB, "WRITE"), (BOB, "READ")}, got
bob.put_object(Bucket=B, Key="by-bob", Body=b"b")
assert "by-bob" in [o["Key"] for o in bob.list_objects_v2(Bucket=B)["Contents"]]
assert code(lambda: anon.list_objects_v2(Bucket=B)) == "AccessDenied"
# Unknown grantees are refused and change nothing.
assert code(lambda: s3.put_bucket_acl(Bucket=B, GrantRead='id="nobody-here"')) == "InvalidArgument"
assert code(lambda: s3.put_bucket_acl(
    Bucket=B, GrantRead='emailAddress="nobody@example.com"')) == "UnresolvableGrantByEmailAddress"
assert code(lambda: s3.put_bucket_acl(
    Bucket=B, GrantRead='uri="http://example.com/not-a-group"')) == "InvalidArgument"
got = {(g["Grantee"].get("ID"), g["Permission"]) for g in s3.get_bucket_acl(Bucket=B)["Grants"]}
assert (BOB, "WRITE") in got, got
# A grant to a group is public: a public access block refuses it.
s3.put_public_access_block(Bucket=B, PublicAccessBlockConfiguration=dict(
    conf, BlockPublicAcls=True, RestrictPublicBuckets=False))
assert code(lambda: s3.put_object(
    Bucket=B, Key="x", Body=b"x",
    GrantRead='uri="http://acs.amazonaws.com/groups/global/AllUsers"')) == "AccessDenied"
s3.delete_public_access_block(Bucket=B)
s3.put_bucket_acl(Bucket=B, ACL="private")
assert code(lambda: bob.put_object(Bucket=B, Key="by-bob", Body=b"b")) == "AccessDenied"

for o in s3.list_objects_v2(Bucket=B).get("Contents", []):
    s3.delete_object(Bucket=B, Key=o["Key"])
s3.delete_bucket(Bucket=B)
print("s3 policies: ok")
