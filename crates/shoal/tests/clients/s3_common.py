"""What the gateway's boto3 scripts share: a client for the endpoint in
GW_ENDPOINT (path-style, SigV4, one attempt; unsigned without keys) and
the error code a call fails with."""
import os

import boto3
from botocore import UNSIGNED
from botocore.config import Config
from botocore.exceptions import ClientError

EP = os.environ["GW_ENDPOINT"]


def client(key=None, secret=None):
    sig = UNSIGNED if key is None else "s3v4"
    return boto3.client(
        "s3", endpoint_url=EP, aws_access_key_id=key, aws_secret_access_key=secret,
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1},
                      signature_version=sig))


def code(f):
    """The error code `f()` fails with, or None if it succeeds."""
    try:
        f()
    except ClientError as e:
        return e.response["Error"]["Code"]
    return None
