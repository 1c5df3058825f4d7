//! The S3 operations (on s3s's typed requests): buckets and objects kept
//! as `meta.rs` lays them out, with each request's user from its
//! signature (s3s checks SigV4 and SigV2, in headers and presigned URLs,
//! and streaming `aws-chunked` bodies) and the bucket's canned ACL deciding
//! what an anonymous request may do.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use s3s::dto::{
    AbortMultipartUploadInput, AbortMultipartUploadOutput, Bucket as S3Bucket, CommonPrefix,
    CompleteMultipartUploadInput, CompleteMultipartUploadOutput, CopyObjectInput, CopyObjectOutput,
    CopyObjectResult, CopyPartResult, CopySource, CreateBucketInput, CreateBucketOutput,
    CreateMultipartUploadInput, CreateMultipartUploadOutput, DeleteBucketInput, DeleteBucketOutput,
    DeleteObjectInput, DeleteObjectOutput, DeleteObjectsInput, DeleteObjectsOutput, DeletedObject,
    ETag, ETagCondition, Error as S3ListError, GetBucketLocationInput, GetBucketLocationOutput,
    GetObjectInput, GetObjectOutput, HeadBucketInput, HeadBucketOutput, HeadObjectInput,
    HeadObjectOutput, ListBucketsInput, ListBucketsOutput, ListMultipartUploadsInput,
    ListMultipartUploadsOutput, ListObjectsInput, ListObjectsOutput, ListObjectsV2Input,
    ListObjectsV2Output, ListPartsInput, ListPartsOutput, MultipartUpload, Object, Owner,
    Part as S3Part, PutObjectInput, PutObjectOutput, StreamingBlob, Timestamp, UploadPartCopyInput,
    UploadPartCopyOutput, UploadPartInput, UploadPartOutput,
};
use s3s::{S3, S3Error, S3ErrorCode, S3Request, S3Response, S3Result, s3_error};

use crate::acl::{self, Perm};
use crate::lock::{self, LockConfig};
use crate::meta::{
    Bucket, Checksums, Entry, Meta, MetaError, Upload, User, chunks, md5_check, now_ms,
};
use crate::policy::Decision;
use crate::sse::{self, Asked, Which};
use crate::tags::{self, Scope};
use crate::versions::{self, Version};

/// Largest object a single PUT stores (AWS's limit).
pub const PUT_MAX: u64 = 5 << 30;
/// Keys a listing answers at most (AWS's limit).
const LIST_MAX: i32 = 1000;

/// The gateway's S3 implementation.
#[derive(Debug, Clone)]
pub struct Gateway {
    meta: Meta,
    keys: std::sync::Arc<Keys>,
}

/// What server-side encryption needs besides the records.
#[derive(Debug, Default)]
struct Keys {
    /// The SSE-S3 master key, fetched from the monitors at first use.
    master: tokio::sync::OnceCell<sse::Key>,
    /// SSE-C taken over plain HTTP (for tests on loopback).
    sse_c_over_http: bool,
}

impl Gateway {
    /// A gateway over `meta`'s records; SSE-C only over HTTPS unless
    /// `sse_c_over_http`.
    pub fn new(meta: Meta, sse_c_over_http: bool) -> Gateway {
        Gateway {
            meta,
            keys: std::sync::Arc::new(Keys {
                master: tokio::sync::OnceCell::new(),
                sse_c_over_http,
            }),
        }
    }
}

fn internal(e: MetaError) -> S3Error {
    match e {
        MetaError::Missing(m) => s3_error!(NoSuchKey, "{m}"),
        MetaError::BadKey(m) => s3_error!(KeyTooLongError, "{m}"),
        // A full cluster: 507, as MinIO and radosgw answer it.
        MetaError::Cluster(shoal_client::Error::NoSpace(m)) => {
            let mut e = S3Error::with_message(
                S3ErrorCode::Custom("InsufficientStorage".into()),
                format!("the cluster is full: {m}; delete objects to make room"),
            );
            e.set_status_code(hyper::http::StatusCode::INSUFFICIENT_STORAGE);
            e
        }
        other => S3Error::with_message(S3ErrorCode::InternalError, other.to_string()),
    }
}

/// A GET's or HEAD's answer for the object `entry` describes: its
/// stored headers, ETag, mtime and user metadata, and the given fields.
macro_rules! object_output {
    ($ty:ident, $entry:expr, { $($f:ident: $v:expr),* $(,)? }) => {{
        let e: &Entry = $entry;
        let h = |n: &str| e.headers.get(n).cloned();
        $ty {
            $($f: $v,)*
            accept_ranges: Some("bytes".into()),
            // Given none at upload, AWS answers binary/octet-stream.
            content_type: h("content-type")
                .or_else(|| Some("binary/octet-stream".to_string()))
                .and_then(|c| c.parse().ok()),
            content_encoding: h("content-encoding"),
            content_disposition: h("content-disposition"),
            content_language: h("content-language"),
            cache_control: h("cache-control"),
            e_tag: Some(etag(e)),
            last_modified: Some(timestamp(e.mtime_ms)),
            expires: h("expires").and_then(|v| v.parse::<u64>().ok()).map(timestamp),
            metadata: (!e.meta.is_empty()).then(|| e.meta.clone().into_iter().collect()),
            object_lock_mode: e.retention.map(|r| r.mode.as_str().to_string().into()),
            object_lock_retain_until_date: e.retention.map(|r| timestamp(r.until_ms)),
            object_lock_legal_hold_status: e
                .retention
                .is_some()
                .then_some(())
                .or(e.legal_hold.then_some(()))
                .map(|_| if e.legal_hold { "ON" } else { "OFF" }.to_string().into()),
            version_id: e.version_id.clone(),
            ..$ty::default()
        }
    }};
}

/// Sets an answer's encryption headers from an entry's record (`sse`):
/// `x-amz-server-side-encryption` for SSE-S3, the customer key's
/// algorithm and MD5 for SSE-C (`s3` only: answers without those fields).
macro_rules! with_sse {
    ($out:expr, $sse:expr) => {{
        match $sse {
            Some(sse::Sse::S3 { .. }) => $out.server_side_encryption = Some(aes256()),
            Some(sse::Sse::Customer { key_md5, .. }) => {
                $out.sse_customer_algorithm = Some("AES256".to_string());
                $out.sse_customer_key_md5 = Some(key_md5.clone());
            }
            None => {}
        }
    }};
    ($out:expr, $sse:expr, s3) => {{
        if let Some(sse::Sse::S3 { .. }) = $sse {
            $out.server_side_encryption = Some(aes256());
        }
    }};
}

/// An answer whose output has no SSE-C fields (CompleteMultipartUpload's)
/// given the SSE-C headers of `e` as AWS answers them.
fn customer_headers<T>(mut resp: S3Response<T>, e: &Entry) -> S3Response<T> {
    if let Some(sse::Sse::Customer { key_md5, .. }) = &e.sse {
        let h = &mut resp.headers;
        h.insert(
            "x-amz-server-side-encryption-customer-algorithm",
            hyper::http::HeaderValue::from_static(sse::AES256),
        );
        if let Ok(v) = hyper::http::HeaderValue::from_str(key_md5) {
            h.insert("x-amz-server-side-encryption-customer-key-md5", v);
        }
    }
    resp
}

fn aes256() -> s3s::dto::ServerSideEncryption {
    s3s::dto::ServerSideEncryption::from_static(s3s::dto::ServerSideEncryption::AES256)
}

/// Sets an answer's `checksum_*` fields from the entry's checksums.
macro_rules! with_sums {
    ($out:expr, $sums:expr) => {{
        let sums: &Checksums = $sums;
        let sum = |a: &str| sums.get(a).cloned();
        $out.checksum_crc32 = sum("crc32");
        $out.checksum_crc32c = sum("crc32c");
        $out.checksum_crc64nvme = sum("crc64nvme");
        $out.checksum_sha1 = sum("sha1");
        $out.checksum_sha256 = sum("sha256");
    }};
}

/// A copy's source, readable by the signer and meeting the request's
/// copy-source preconditions: its bucket, key and entry.
macro_rules! copy_from {
    ($gw:expr, $req:expr) => {{
        let i = &$req.input;
        let (src_bucket, src_key, src_vid) = copy_source(&i.copy_source)?;
        let (sb, _, src) = $gw
            .object_of(&$req, &src_bucket, &src_key, src_vid.as_deref())
            .await?;
        Conditions {
            if_match: i.copy_source_if_match.as_ref(),
            if_none_match: i.copy_source_if_none_match.as_ref(),
            if_modified_since: i.copy_source_if_modified_since.as_ref(),
            if_unmodified_since: i.copy_source_if_unmodified_since.as_ref(),
        }
        .check(Some(&src), false)?;
        (sb, src_key, src)
    }};
}

/// The object a GET or HEAD reads, if its signer may and its
/// preconditions hold.
macro_rules! readable {
    ($gw:expr, $req:expr) => {{
        let i = &$req.input;
        let (_, _, e) = $gw
            .object_of(&$req, &i.bucket, &i.key, i.version_id.as_deref())
            .await?;
        Conditions {
            if_match: i.if_match.as_ref(),
            if_none_match: i.if_none_match.as_ref(),
            if_modified_since: i.if_modified_since.as_ref(),
            if_unmodified_since: i.if_unmodified_since.as_ref(),
        }
        .check(Some(&e), true)?;
        e
    }};
}

fn timestamp(ms: u64) -> Timestamp {
    Timestamp::from(SystemTime::UNIX_EPOCH + Duration::from_millis(ms))
}

fn etag(e: &Entry) -> ETag {
    ETag::Strong(e.etag.clone())
}

/// What a request may do to a bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Need {
    /// Only that the bucket exists (an object's own ACL decides).
    Exists,
    Read,
    Write,
    /// Read its ACL.
    ReadAcp,
    /// Change its ACL.
    WriteAcp,
    Owner,
}

impl Gateway {
    /// The user who signed `req` (`None`: anonymous).
    async fn who<T>(&self, req: &S3Request<T>) -> S3Result<Option<User>> {
        let Some(c) = &req.credentials else {
            return Ok(None);
        };
        match self
            .meta
            .user_by_key(&c.access_key)
            .await
            .map_err(internal)?
        {
            Some(u) => Ok(Some(u)),
            None => Err(s3_error!(InvalidAccessKeyId)),
        }
    }

    /// Bucket `name`, if `req`'s user may do `need` to it.
    async fn bucket<T>(&self, req: &S3Request<T>, name: &str, need: Need) -> S3Result<Bucket> {
        self.bucket_as(req, name, need).await.map(|(b, _)| b)
    }

    /// Bucket `name` and `req`'s user (none: anonymous), if the user may
    /// do `need` to it: its owner anything, others what its ACL grants.
    async fn bucket_as<T>(
        &self,
        req: &S3Request<T>,
        name: &str,
        need: Need,
    ) -> S3Result<(Bucket, Option<User>)> {
        let user = self.who(req).await?;
        let b = self
            .meta
            .bucket(name)
            .await
            .map_err(internal)?
            .ok_or_else(|| s3_error!(NoSuchBucket, "bucket {name} does not exist"))?;
        // A request naming another owner than the bucket's is refused,
        // whoever signs it.
        if let Some(expected) = req.headers.get("x-amz-expected-bucket-owner")
            && expected.as_bytes() != b.owner.as_bytes()
        {
            return Err(s3_error!(
                AccessDenied,
                "the bucket's owner is not the one expected"
            ));
        }
        let owner = user.as_ref().is_some_and(|u| u.uid == b.owner);
        let allowed = owner
            || policy_allows(req, &b.name, None)
            || match need {
                Need::Exists => true,
                Need::Read => bucket_allows(&b, user.as_ref(), Perm::Read),
                Need::Write => bucket_allows(&b, user.as_ref(), Perm::Write),
                Need::ReadAcp => bucket_allows(&b, user.as_ref(), Perm::ReadAcp),
                Need::WriteAcp => bucket_allows(&b, user.as_ref(), Perm::WriteAcp),
                Need::Owner => false,
            };
        if allowed {
            Ok((b, user))
        } else {
            Err(s3_error!(AccessDenied))
        }
    }

    /// The object `key` (version `vid`) of bucket `bucket`, if `req`'s
    /// signer may read it; the bucket and the signer too.
    async fn object_of<T>(
        &self,
        req: &S3Request<T>,
        bucket: &str,
        key: &str,
        vid: Option<&str>,
    ) -> S3Result<(Bucket, Option<User>, Entry)> {
        self.object_as(req, bucket, key, vid, Perm::Read).await
    }

    /// [`Gateway::object_of`], if `req`'s signer may do `perm` to it.
    async fn object_as<T>(
        &self,
        req: &S3Request<T>,
        bucket: &str,
        key: &str,
        vid: Option<&str>,
        perm: Perm,
    ) -> S3Result<(Bucket, Option<User>, Entry)> {
        let (b, user) = self.bucket_as(req, bucket, Need::Exists).await?;
        // The request's own object was decided in the access step; another
        // (a copy's source) is read as a GET of it would be.
        let granted = if policy_allows(req, &b.name, Some(key)) {
            true
        } else if b.policy.is_empty() {
            false
        } else {
            let action = crate::policy::action_of("GetObject", vid.is_some());
            let ctx = policy_context(&req.uri, &req.headers, req.extensions.get(), user.as_ref());
            match decide(&self.meta, &b, user.as_ref(), &action, Some(key), vid, ctx).await? {
                Decision::Deny => return Err(s3_error!(AccessDenied, "a bucket policy denies it")),
                Decision::Allow => true,
                Decision::Default => false,
            }
        };
        // Whether a missing object is NoSuchKey or AccessDenied: who may
        // list the bucket under its name learns that it is missing.
        let may_list = !b.policy.is_empty() && {
            let mut ctx =
                policy_context(&req.uri, &req.headers, req.extensions.get(), user.as_ref());
            ctx.insert("s3:prefix".into(), key.to_string());
            decide(
                &self.meta,
                &b,
                user.as_ref(),
                "s3:ListBucket",
                None,
                None,
                ctx,
            )
            .await?
                == Decision::Allow
        };
        // The bucket's owner and the object's may, others as its ACL
        // grants. A missing object is AccessDenied to whom may not list
        // the bucket.
        let uid = user.as_ref().map(|u| u.uid.as_str());
        let owner = granted || uid == Some(b.owner.as_str());
        let e = match self.found(&b, key, vid).await {
            Ok(e) => e,
            Err(e) if !owner && !may_list && !bucket_allows(&b, user.as_ref(), Perm::Read) => {
                tracing::debug!("{key}: {e}; denied to a reader of a bucket it may not list");
                return Err(s3_error!(AccessDenied));
            }
            Err(e) => return Err(e),
        };
        // An object another user wrote keeps its ACL from the bucket's
        // owner, unless it grants READ_ACP (AWS's ObjectWriter ownership).
        let others = !e.owner.is_empty() && uid != Some(e.owner.as_str());
        let owner = owner && !(perm == Perm::ReadAcp && others && !granted);
        if owner
            || (uid.is_some() && uid == Some(e.owner.as_str()))
            || object_allows(&b, &e, user.as_ref(), perm)
        {
            Ok((b, user, e))
        } else {
            Err(s3_error!(AccessDenied))
        }
    }

    /// Replaces the tags of object `key` (version `vid`) of `bucket`, if
    /// `req`'s signer owns the bucket or the object; the version changed.
    async fn set_object_tags<T>(
        &self,
        req: &S3Request<T>,
        bucket: &str,
        key: &str,
        vid: Option<&str>,
        tags: tags::Tags,
    ) -> S3Result<Option<String>> {
        let (b, user, e) = self.object_of(req, bucket, key, vid).await?;
        may_change(&b, user.as_ref(), &e, policy_allows(req, bucket, Some(key)))?;
        let changed = self
            .change_object(&b, key, vid, |e| e.tags = tags.clone())
            .await?;
        Ok(changed.version_id.filter(|v| v != versions::NULL))
    }

    /// The grants `named` gives, its grantees looked up: an id must be a
    /// user's, an e-mail address a user's (else
    /// UnresolvableGrantByEmailAddress), a uri one of the groups.
    async fn resolve(&self, named: Vec<(acl::Named, Perm)>) -> S3Result<Vec<acl::AclGrant>> {
        let mut out = Vec::new();
        for (who, permission) in named {
            let grantee = match who {
                acl::Named::Id(id) => match self.meta.user(&id).await.map_err(internal)? {
                    Some(u) => acl::Grantee::User(u.uid),
                    None => return Err(s3_error!(InvalidArgument, "Invalid id: no user {id:?}")),
                },
                acl::Named::Email(email) => {
                    match self.meta.user_by_email(&email).await.map_err(internal)? {
                        Some(u) => acl::Grantee::User(u.uid),
                        None => {
                            return Err(s3_error!(
                                UnresolvableGrantByEmailAddress,
                                "no user has the e-mail address {email:?}"
                            ));
                        }
                    }
                }
                acl::Named::Uri(uri) => acl::group(&uri)?,
            };
            let g = acl::AclGrant {
                grantee,
                permission,
            };
            if !out.contains(&g) {
                out.push(g);
            }
        }
        Ok(out)
    }

    /// `grants` as S3 lists them, users with their display names.
    async fn named_grants(&self, grants: &[acl::AclGrant]) -> S3Result<Vec<s3s::dto::Grant>> {
        use s3s::dto::{Grant, Grantee, Permission, Type};
        let mut out = Vec::new();
        for g in grants {
            let grantee = match &g.grantee {
                acl::Grantee::User(uid) => {
                    let name = self
                        .meta
                        .user(uid)
                        .await
                        .map_err(internal)?
                        .map_or_else(|| uid.clone(), |u| u.display_name);
                    Grantee {
                        display_name: Some(name),
                        email_address: None,
                        id: Some(uid.clone()),
                        type_: Type::from_static(Type::CANONICAL_USER),
                        uri: None,
                    }
                }
                group => Grantee {
                    display_name: None,
                    email_address: None,
                    id: None,
                    type_: Type::from_static(Type::GROUP),
                    uri: Some(
                        match group {
                            acl::Grantee::AllUsers => acl::ALL_USERS,
                            _ => acl::AUTHENTICATED_USERS,
                        }
                        .to_string(),
                    ),
                },
            };
            out.push(Grant {
                grantee: Some(grantee),
                permission: Some(Permission::from(g.permission.as_str().to_string())),
            });
        }
        Ok(out)
    }

    /// Changes object `key` (version `vid`) of `b` in place with `change`
    /// (its ACL, tags, retention or legal hold); NoSuchKey if gone.
    async fn change_object(
        &self,
        b: &Bucket,
        key: &str,
        vid: Option<&str>,
        change: impl Fn(&mut Entry),
    ) -> S3Result<Entry> {
        self.meta
            .update_object(b, key, vid, change)
            .await
            .map_err(internal)?
            .ok_or_else(|| s3_error!(NoSuchKey, "{key} does not exist in bucket {}", b.name))
    }

    /// Changes bucket `name`'s record with `change`, if `req`'s signer
    /// owns it (a configuration call: tags, policy, public access block).
    async fn change_bucket<T>(
        &self,
        req: &S3Request<T>,
        name: &str,
        change: impl FnOnce(&mut Bucket),
    ) -> S3Result<()> {
        let b = self.bucket(req, name, Need::Owner).await?;
        self.meta.update_bucket(&b, change).await.map_err(internal)
    }

    async fn signed<T>(&self, req: &S3Request<T>) -> S3Result<User> {
        self.who(req).await?.ok_or_else(|| s3_error!(AccessDenied))
    }

    /// The object `key` (version `vid`) of `b`: a missing one is
    /// NoSuchKey (NoSuchVersion), a delete marker says so in its headers.
    async fn found(&self, b: &Bucket, key: &str, vid: Option<&str>) -> S3Result<Entry> {
        let Some(vid) = vid else {
            if let Some(e) = self.meta.entry(b, key).await.map_err(internal)? {
                return Ok(e);
            }
            let mut err = s3_error!(NoSuchKey, "{key} does not exist in bucket {}", b.name);
            if !b.versioning.is_empty()
                && self.meta.latest_is_marker(b, key).await.map_err(internal)?
            {
                err.set_headers(marker_headers(None));
            }
            return Err(err);
        };
        if !versions::valid_vid(vid) {
            return Err(s3_error!(InvalidArgument, "Invalid version id specified"));
        }
        let e = self
            .meta
            .version(b, key, vid)
            .await
            .map_err(internal)?
            .ok_or_else(|| s3_error!(NoSuchVersion, "{key} has no version {vid}"))?;
        if e.delete_marker {
            let mut err = s3_error!(
                MethodNotAllowed,
                "version {vid} of {key} is a delete marker"
            );
            err.set_headers(marker_headers(Some(vid)));
            return Err(err);
        }
        Ok(e)
    }

    /// Who wrote an object or began an upload (`uid`; empty: anonymous,
    /// named as the bucket's owner), with its display name.
    async fn writer(&self, b: &Bucket, uid: &str) -> S3Result<Owner> {
        if uid.is_empty() || uid == b.owner {
            return Ok(self.owner(b));
        }
        Ok(match self.meta.user(uid).await.map_err(internal)? {
            Some(u) => owner_of(&u.uid, &u.display_name),
            None => owner_of(uid, ""),
        })
    }

    /// A bucket's owner as listings name it.
    fn owner(&self, b: &Bucket) -> Owner {
        owner_of(&b.owner, &b.owner_name)
    }

    /// One page of a listing: the objects after `after` (and the common
    /// prefixes under `delimiter`), at most `max` of both together; the
    /// last key or prefix counted and whether more follow.
    async fn page(
        &self,
        b: &Bucket,
        prefix: &str,
        delimiter: Option<&str>,
        after: &str,
        max: i32,
    ) -> S3Result<(Vec<Object>, Vec<CommonPrefix>, Option<String>, bool)> {
        let max = max.clamp(0, LIST_MAX) as usize;
        if max == 0 {
            return Ok((Vec::new(), Vec::new(), None, false));
        }
        let mut objects = Vec::new();
        let mut prefixes: Vec<CommonPrefix> = Vec::new();
        let mut cursor = after.to_string();
        let mut last = None;
        let delimiter = delimiter.filter(|d| !d.is_empty());
        loop {
            let (entries, more) = self
                .meta
                .list(b, &cursor, prefix, 1000)
                .await
                .map_err(internal)?;
            if entries.is_empty() {
                return Ok((objects, prefixes, last, false));
            }
            let mut jumped = false;
            for (key, e) in entries {
                if objects.len() + prefixes.len() >= max {
                    return Ok((objects, prefixes, last, true));
                }
                let rest = key.get(prefix.len()..).unwrap_or("");
                if let Some(d) = delimiter
                    && let Some(at) = rest.find(d)
                {
                    // Every key under a common prefix rolls into it: the
                    // next page starts past them.
                    let cp = format!("{prefix}{}", &rest[..at + d.len()]);
                    cursor = format!("{cp}\u{10ffff}");
                    // A marker naming the prefix itself was past it already.
                    if cp.as_str() > after {
                        last = Some(cp.clone());
                        prefixes.push(CommonPrefix { prefix: Some(cp) });
                    }
                    jumped = true;
                    break;
                }
                cursor = key.clone();
                last = Some(key.clone());
                objects.push(Object {
                    key: Some(key),
                    size: Some(e.size as i64),
                    e_tag: Some(etag(&e)),
                    last_modified: Some(timestamp(e.mtime_ms)),
                    owner: Some(self.owner(b)),
                    storage_class: Some(s3s::dto::ObjectStorageClass::from_static(
                        s3s::dto::ObjectStorageClass::STANDARD,
                    )),
                    ..Object::default()
                });
            }
            if !jumped && !more {
                return Ok((objects, prefixes, last, false));
            }
        }
    }
}

/// A GET's body (see [`crate::meta::chunks`]); a read that fails ends it
/// with the error (the client sees a short body).
fn streamed(meta: Meta, pieces: Vec<(String, u64, u64)>, open: Option<sse::Key>) -> StreamingBlob {
    StreamingBlob::wrap(crate::meta::chunks(meta, pieces, open))
}

#[async_trait::async_trait]
impl S3 for Gateway {
    async fn list_buckets(
        &self,
        req: S3Request<ListBucketsInput>,
    ) -> S3Result<S3Response<ListBucketsOutput>> {
        let user = self.signed(&req).await?;
        let i = &req.input;
        let prefix = i.prefix.clone().unwrap_or_default();
        let after = i.continuation_token.clone().unwrap_or_default();
        let max = i.max_buckets.unwrap_or(10_000).clamp(1, 10_000) as usize;
        let mine: Vec<Bucket> = self
            .meta
            .buckets()
            .await
            .map_err(internal)?
            .into_iter()
            .filter(|b| b.owner == user.uid && b.name.starts_with(&prefix) && b.name > after)
            .collect();
        let more = mine.len() > max;
        let buckets: Vec<S3Bucket> = mine
            .into_iter()
            .take(max)
            .map(|b| S3Bucket {
                name: Some(b.name),
                creation_date: Some(timestamp(b.created_ms)),
                ..S3Bucket::default()
            })
            .collect();
        let token = more
            .then(|| buckets.last().and_then(|b| b.name.clone()))
            .flatten();
        Ok(S3Response::new(ListBucketsOutput {
            buckets: Some(buckets),
            continuation_token: token,
            owner: Some(owner_of(&user.uid, &user.display_name)),
            prefix: i.prefix.clone(),
        }))
    }

    async fn create_bucket(
        &self,
        req: S3Request<CreateBucketInput>,
    ) -> S3Result<S3Response<CreateBucketOutput>> {
        let user = self.signed(&req).await?;
        let name = req.input.bucket.clone();
        let acl = req
            .input
            .acl
            .as_ref()
            .map_or("private".to_string(), |a| a.as_str().to_string());
        canned(&acl)?;
        let named = match acl::from_headers(&req.headers)? {
            Some(named) => Some(self.resolve(named).await?),
            None => None,
        };
        let location = req
            .input
            .create_bucket_configuration
            .as_ref()
            .and_then(|c| c.location_constraint.as_ref())
            .map(|l| l.as_str().to_string())
            .unwrap_or_default();
        match self.meta.bucket_create(&name, &user, &acl, &location).await {
            Ok(b) => {
                let locked = req.input.object_lock_enabled_for_bucket == Some(true);
                if named.is_some() || locked {
                    self.meta
                        .update_bucket(&b, |nb| {
                            if let Some(named) = named {
                                nb.acl = acl::CUSTOM.to_string();
                                nb.grants = named;
                            }
                            // Object lock needs versions, for good.
                            if locked {
                                nb.object_lock = Some(LockConfig::default());
                                nb.versioning = "Enabled".to_string();
                            }
                        })
                        .await
                        .map_err(internal)?;
                }
                Ok(S3Response::new(CreateBucketOutput {
                    location: Some(format!("/{name}")),
                }))
            }
            Err(MetaError::Exists(_)) => Err(s3_error!(BucketAlreadyExists)),
            Err(e) => Err(internal(e)),
        }
    }

    async fn head_bucket(
        &self,
        req: S3Request<HeadBucketInput>,
    ) -> S3Result<S3Response<HeadBucketOutput>> {
        self.bucket(&req, &req.input.bucket, Need::Read).await?;
        Ok(S3Response::new(HeadBucketOutput::default()))
    }

    async fn get_bucket_location(
        &self,
        req: S3Request<GetBucketLocationInput>,
    ) -> S3Result<S3Response<GetBucketLocationOutput>> {
        let b = self.bucket(&req, &req.input.bucket, Need::Owner).await?;
        Ok(S3Response::new(GetBucketLocationOutput {
            location_constraint: (!b.location.is_empty())
                .then(|| s3s::dto::BucketLocationConstraint::from(b.location.clone())),
        }))
    }

    async fn delete_bucket(
        &self,
        req: S3Request<DeleteBucketInput>,
    ) -> S3Result<S3Response<DeleteBucketOutput>> {
        let b = self.bucket(&req, &req.input.bucket, Need::Owner).await?;
        match self.meta.freeing().bucket_remove(&b).await {
            Ok(()) => Ok(S3Response::new(DeleteBucketOutput::default())),
            Err(MetaError::NotEmpty(_)) => Err(s3_error!(BucketNotEmpty)),
            Err(e) => Err(internal(e)),
        }
    }

    async fn put_object(
        &self,
        mut req: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        // A request refused before its body is read still has it read (and
        // dropped), so that the connection stays in step for the next one.
        let body = req.input.body.take();
        let ready = async {
            let (b, entry, seal) = self.put_checks(&req).await?;
            let i = &req.input;
            let sums = Sums::of(
                &req.headers,
                req.trailing_headers.clone(),
                "",
                i.content_md5.as_deref(),
            )?;
            S3Result::Ok((b, entry, seal, sums))
        };
        let (b, entry, seal, sums) = match ready.await {
            Ok(ready) => ready,
            Err(e) => {
                drain(body, &req.headers).await;
                return Err(e);
            }
        };
        let input = req.input;
        let body = sums.observe(body.unwrap_or_else(|| StreamingBlob::from(s3s::Body::empty())));
        let check = |m: &[u8; 16]| sums.check(m);
        let e = match self
            .meta
            .put_sealed(&b, &input.key, body, PUT_MAX, check, entry, seal.as_ref())
            .await
        {
            Ok(e) => e,
            Err(MetaError::BadDigest) => return Err(s3_error!(BadDigest)),
            Err(MetaError::BadChecksum(m)) => {
                return Err(s3_error!(
                    BadDigest,
                    "the {m} you specified did not match the calculated checksum"
                ));
            }
            Err(MetaError::TooLarge(n)) => {
                return Err(s3_error!(
                    EntityTooLarge,
                    "a single PUT is at most {n} bytes"
                ));
            }
            Err(MetaError::Invalid(m)) => return Err(s3_error!(IncompleteBody, "{m}")),
            Err(e) => return Err(internal(e)),
        };
        let mut out = PutObjectOutput {
            e_tag: Some(etag(&e)),
            // The null version (a suspended bucket's) is not named.
            version_id: e.version_id.clone().filter(|v| v != versions::NULL),
            ..PutObjectOutput::default()
        };
        with_sums!(out, &e.checksums);
        with_sse!(out, &e.sse);
        Ok(S3Response::new(out))
    }

    async fn get_object(
        &self,
        req: S3Request<GetObjectInput>,
    ) -> S3Result<S3Response<GetObjectOutput>> {
        let e = readable!(self, req);
        let part = part_range(&e, req.input.part_number)?;
        let open = self
            .opener(&req.headers, &req.extensions, Which::Object, &e)
            .await?;
        let (range, partial) = match (&req.input.range, &part) {
            (_, Some((r, _))) => (r.clone(), true),
            (Some(r), None) => {
                let r = r
                    .check(e.size)
                    .map_err(|_| s3_error!(InvalidRange, "the object is {} bytes", e.size))?;
                (r, true)
            }
            (None, None) => (0..e.size, false),
        };
        let pieces = Meta::pieces(&e, range.start, range.end);
        let data = streamed(self.meta.clone(), pieces, open);
        let content_range = partial.then(|| {
            format!(
                "bytes {}-{}/{}",
                range.start,
                range.end.saturating_sub(1),
                e.size
            )
        });
        let mut out = object_output!(GetObjectOutput, &e, {
            body: Some(data),
            content_length: Some((range.end - range.start) as i64),
            content_range: content_range,
            parts_count: part.and_then(|(_, n)| n),
            tag_count: (!e.tags.is_empty()).then_some(e.tags.len() as i32),
        });
        with_sse!(out, &e.sse);
        let sums = answered_sums(&e, req.input.part_number, req.input.checksum_mode.as_ref());
        if let Some(sums) = sums.filter(|_| !partial || req.input.part_number.is_some()) {
            with_sums!(out, &sums);
            out.checksum_type = sum_type(&e);
        }
        Ok(S3Response::new(out))
    }

    async fn head_object(
        &self,
        req: S3Request<HeadObjectInput>,
    ) -> S3Result<S3Response<HeadObjectOutput>> {
        let e = readable!(self, req);
        let part = part_range(&e, req.input.part_number)?;
        // (The key is checked: HEAD answers as GET would.)
        self.opener(&req.headers, &req.extensions, Which::Object, &e)
            .await?;
        let mut out = object_output!(HeadObjectOutput, &e, {
            content_length: Some(part.as_ref().map_or(e.size, |(r, _)| r.end - r.start) as i64),
            parts_count: part.and_then(|(_, n)| n),
        });
        with_sse!(out, &e.sse);
        if let Some(sums) =
            answered_sums(&e, req.input.part_number, req.input.checksum_mode.as_ref())
        {
            with_sums!(out, &sums);
            out.checksum_type = sum_type(&e);
        }
        let mut resp = S3Response::new(out);
        // HEAD counts tags as GET does (radosgw does; s3s's HEAD output
        // has no field for it).
        if !e.tags.is_empty() {
            resp.headers
                .insert("x-amz-tagging-count", e.tags.len().into());
        }
        Ok(resp)
    }

    async fn delete_object(
        &self,
        req: S3Request<DeleteObjectInput>,
    ) -> S3Result<S3Response<DeleteObjectOutput>> {
        let (b, user) = self.bucket_as(&req, &req.input.bucket, Need::Write).await?;
        let i = &req.input;
        let guard = DeleteGuard {
            etag: i.if_match.as_ref().map(|c| match c {
                ETagCondition::Any => None,
                ETagCondition::ETag(t) => Some(t.value().to_string()),
            }),
            size: i.if_match_size,
            mtime: i.if_match_last_modified_time.clone(),
            bypass: bypasses(&req.headers, &b, user.as_ref()),
        };
        let (marker, version_id) = self
            .remove(&b, &i.key, i.version_id.as_deref(), &guard)
            .await?;
        Ok(S3Response::new(DeleteObjectOutput {
            delete_marker: marker.then_some(true),
            version_id,
            ..DeleteObjectOutput::default()
        }))
    }

    async fn delete_objects(
        &self,
        req: S3Request<DeleteObjectsInput>,
    ) -> S3Result<S3Response<DeleteObjectsOutput>> {
        let (b, user) = self.bucket_as(&req, &req.input.bucket, Need::Write).await?;
        let bypass = bypasses(&req.headers, &b, user.as_ref());
        let d = req.input.delete;
        if d.objects.len() > 1000 {
            return Err(s3_error!(MalformedXML, "at most 1000 keys per request"));
        }
        let quiet = d.quiet.unwrap_or(false);
        let (mut deleted, mut errors) = (Vec::new(), Vec::new());
        for o in d.objects {
            let guard = DeleteGuard {
                etag: o.e_tag.as_ref().map(|t| Some(t.value().to_string())),
                size: o.size,
                mtime: o.last_modified_time.clone(),
                bypass,
            };
            match self
                .remove(&b, &o.key, o.version_id.as_deref(), &guard)
                .await
            {
                Ok(_) if quiet => {}
                Ok((marker, vid)) => deleted.push(DeletedObject {
                    key: Some(o.key),
                    delete_marker: marker.then_some(true),
                    // A delete marker made now is named by its own field.
                    delete_marker_version_id: vid.clone().filter(|_| o.version_id.is_none()),
                    version_id: o.version_id,
                }),
                Err(e) => errors.push(S3ListError {
                    code: Some(e.code().as_str().to_string()),
                    key: Some(o.key),
                    message: e.message().map(str::to_string),
                    version_id: o.version_id,
                }),
            }
        }
        Ok(S3Response::new(DeleteObjectsOutput {
            deleted: Some(deleted),
            errors: (!errors.is_empty()).then_some(errors),
            ..DeleteObjectsOutput::default()
        }))
    }

    async fn copy_object(
        &self,
        req: S3Request<CopyObjectInput>,
    ) -> S3Result<S3Response<CopyObjectOutput>> {
        let (sb, src_key, src) = copy_from!(self, req);
        let (b, user) = self.bucket_as(&req, &req.input.bucket, Need::Write).await?;
        let i = req.input;
        let replace = i
            .metadata_directive
            .as_ref()
            .is_some_and(|d| d.as_str() == s3s::dto::MetadataDirective::REPLACE);
        let open = self
            .opener(&req.headers, &req.extensions, Which::CopySource, &src)
            .await?;
        let seal = self.seal_new(&req.headers, &req.extensions, &b).await?;
        let reencrypts = sse::asked(&req.headers, Which::Object)? != Asked::Nothing;
        if !replace && !reencrypts && sb.id == b.id && src_key == i.key {
            return Err(s3_error!(
                InvalidRequest,
                "copying an object to itself changes nothing: give the REPLACE metadata directive"
            ));
        }
        let mut entry = match replace {
            true => new_entry(
                i.content_type.map(|c| c.to_string()),
                i.content_encoding,
                i.content_disposition,
                i.content_language,
                i.cache_control,
                i.metadata,
            ),
            false => Entry {
                headers: src.headers.clone(),
                meta: src.meta.clone(),
                ..Entry::default()
            },
        };
        let expires = if replace { i.expires.as_ref() } else { None };
        stamp(&mut entry, i.acl.as_ref(), user.as_ref(), expires)?;
        if let Some(named) = acl::from_headers(&req.headers)? {
            entry.acl = acl::CUSTOM.to_string();
            entry.grants = self.resolve(named).await?;
        }
        check_acl_allowed(&b, &entry.acl, &entry.grants)?;
        lock_new(&b, &mut entry, &req.headers)?;
        // The source's tags, unless the request replaces them.
        entry.tags = match i.tagging_directive.as_ref().map(|d| d.as_str()) {
            None | Some("COPY") => src.tags.clone(),
            Some("REPLACE") => match &i.tagging {
                Some(t) => tags::from_header(t, Scope::Object)?,
                None => tags::Tags::new(),
            },
            Some(d) => {
                return Err(s3_error!(
                    InvalidArgument,
                    "unknown x-amz-tagging-directive {d:?}: COPY or REPLACE"
                ));
            }
        };
        entry.sse = seal.as_ref().map(|(_, s)| s.clone());
        let seal = seal.map(|(k, _)| k);
        let e = self
            .meta
            .copy(&src, open, &b, &i.key, entry, seal.as_ref())
            .await
            .map_err(internal)?;
        let mut out = CopyObjectOutput {
            copy_object_result: Some(CopyObjectResult {
                e_tag: Some(etag(&e)),
                last_modified: Some(timestamp(e.mtime_ms)),
                ..CopyObjectResult::default()
            }),
            copy_source_version_id: src.version_id.clone(),
            version_id: e.version_id.clone(),
            ..CopyObjectOutput::default()
        };
        with_sse!(out, &e.sse);
        Ok(S3Response::new(out))
    }

    async fn upload_part_copy(
        &self,
        req: S3Request<UploadPartCopyInput>,
    ) -> S3Result<S3Response<UploadPartCopyOutput>> {
        let (_, _, src) = copy_from!(self, req);
        let b = self.bucket(&req, &req.input.bucket, Need::Write).await?;
        let i = req.input;
        let u = self.upload_of(&b, &i.key, &i.upload_id).await?;
        let range = match &i.copy_source_range {
            Some(r) => copy_range(r, src.size)
                .ok_or_else(|| s3_error!(InvalidRange, "{r} of an object of {} bytes", src.size))?,
            None => 0..src.size,
        };
        let number = u32::try_from(i.part_number)
            .map_err(|_| s3_error!(InvalidArgument, "part number {}", i.part_number))?;
        let open = self
            .opener(&req.headers, &req.extensions, Which::CopySource, &src)
            .await?;
        let seal = self.part_key(&req.headers, &req.extensions, &u).await?;
        let body = chunks(
            self.meta.clone(),
            Meta::pieces(&src, range.start, range.end),
            open,
        );
        let p = self
            .meta
            .upload_part(&b, &u, number, body, md5_check(None), seal.as_ref())
            .await
            .map_err(upload_error)?;
        let mut out = UploadPartCopyOutput {
            copy_part_result: Some(CopyPartResult {
                e_tag: Some(ETag::Strong(p.etag)),
                last_modified: Some(timestamp(p.mtime_ms)),
                ..CopyPartResult::default()
            }),
            ..UploadPartCopyOutput::default()
        };
        with_sse!(out, &u.entry.sse);
        Ok(S3Response::new(out))
    }

    async fn create_multipart_upload(
        &self,
        req: S3Request<CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        let (b, user) = self.bucket_as(&req, &req.input.bucket, Need::Write).await?;
        let i = req.input;
        let mut entry = new_entry(
            i.content_type.map(|c| c.to_string()),
            i.content_encoding,
            i.content_disposition,
            i.content_language,
            i.cache_control,
            i.metadata,
        );
        stamp(
            &mut entry,
            i.acl.as_ref(),
            user.as_ref(),
            i.expires.as_ref(),
        )?;
        if let Some(t) = &i.tagging {
            entry.tags = tags::from_header(t, Scope::Object)?;
        }
        if let Some(named) = acl::from_headers(&req.headers)? {
            entry.acl = acl::CUSTOM.to_string();
            entry.grants = self.resolve(named).await?;
        }
        check_acl_allowed(&b, &entry.acl, &entry.grants)?;
        lock_new(&b, &mut entry, &req.headers)?;
        // The parts are sealed with the data key this records.
        entry.sse = self
            .seal_new(&req.headers, &req.extensions, &b)
            .await?
            .map(|(_, s)| s);
        let alg = i
            .checksum_algorithm
            .as_ref()
            .map(|a| a.as_str().to_ascii_lowercase())
            .unwrap_or_default();
        let checksum = match alg.as_str() {
            "" => None,
            a if SUM_ALGORITHMS.contains(&a) => {
                let kind =
                    crate::checksum::resolve_type(a, i.checksum_type.as_ref().map(|t| t.as_str()))
                        .map_err(|m| s3_error!(InvalidRequest, "{m}"))?;
                Some((a, kind))
            }
            a => return Err(s3_error!(InvalidRequest, "checksum algorithm {a}")),
        };
        let u = self
            .meta
            .upload_create(&b, &i.key, entry, checksum)
            .await
            .map_err(internal)?;
        let mut out = CreateMultipartUploadOutput {
            bucket: Some(b.name),
            key: Some(i.key),
            upload_id: Some(u.upload_id),
            checksum_algorithm: i.checksum_algorithm,
            checksum_type: checksum.map(|(_, k)| s3s::dto::ChecksumType::from(k.to_string())),
            ..CreateMultipartUploadOutput::default()
        };
        with_sse!(out, &u.entry.sse);
        Ok(S3Response::new(out))
    }

    async fn upload_part(
        &self,
        mut req: S3Request<UploadPartInput>,
    ) -> S3Result<S3Response<UploadPartOutput>> {
        let body = req.input.body.take();
        let checked = async {
            let b = self.bucket(&req, &req.input.bucket, Need::Write).await?;
            crate::unsupported::check("UploadPart", &req.headers)?;
            let i = &req.input;
            let u = self.upload_of(&b, &i.key, &i.upload_id).await?;
            let seal = self.part_key(&req.headers, &req.extensions, &u).await?;
            let number = u32::try_from(i.part_number)
                .map_err(|_| s3_error!(InvalidArgument, "part number {}", i.part_number))?;
            // The upload's checksum algorithm is computed even when not given.
            let sums = Sums::of(
                &req.headers,
                req.trailing_headers.clone(),
                &u.checksum_algorithm,
                i.content_md5.as_deref(),
            )?;
            S3Result::Ok((b, u, number, sums, seal))
        };
        let (b, u, number, sums, seal) = match checked.await {
            Ok(ready) => ready,
            Err(e) => {
                drain(body, &req.headers).await;
                return Err(e);
            }
        };
        let body = sums.observe(body.unwrap_or_else(|| StreamingBlob::from(s3s::Body::empty())));
        let check = |m: &[u8; 16]| sums.check(m);
        let p = self
            .meta
            .upload_part(&b, &u, number, body, check, seal.as_ref())
            .await
            .map_err(upload_error)?;
        let mut out = UploadPartOutput {
            e_tag: Some(ETag::Strong(p.etag.clone())),
            ..UploadPartOutput::default()
        };
        with_sums!(out, &p.checksums);
        with_sse!(out, &u.entry.sse);
        Ok(S3Response::new(out))
    }

    async fn complete_multipart_upload(
        &self,
        req: S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        let b = self.bucket(&req, &req.input.bucket, Need::Write).await?;
        let i = req.input;
        let answer = |e: &Entry| {
            let mut out = CompleteMultipartUploadOutput {
                bucket: Some(b.name.clone()),
                key: Some(i.key.clone()),
                e_tag: Some(etag(e)),
                location: Some(format!("/{}/{}", b.name, i.key)),
                version_id: e.version_id.clone().filter(|v| v != versions::NULL),
                checksum_type: sum_type(e),
                ..CompleteMultipartUploadOutput::default()
            };
            with_sums!(out, &e.checksums);
            with_sse!(out, &e.sse, s3);
            out
        };
        let u = match self.meta.upload(&b, &i.key, &i.upload_id).await {
            Ok(u) => u,
            Err(MetaError::Missing(m)) => {
                // A repeated complete of an upload that completed answers
                // as the first one did while the object is what it made.
                return match self
                    .meta
                    .upload_completed(&b, &i.key, &i.upload_id)
                    .await
                    .map_err(internal)?
                {
                    Some(e) => Ok(customer_headers(S3Response::new(answer(&e)), &e)),
                    None => Err(s3_error!(NoSuchUpload, "{m}")),
                };
            }
            Err(e) => return Err(internal(e)),
        };
        // An upload encrypted with a customer key completes with that key.
        self.part_key(&req.headers, &req.extensions, &u).await?;
        if i.if_match.is_some() || i.if_none_match.is_some() {
            let current = self.meta.entry(&b, &i.key).await.map_err(internal)?;
            Conditions {
                if_match: i.if_match.as_ref(),
                if_none_match: i.if_none_match.as_ref(),
                ..Conditions::default()
            }
            .check(current.as_ref(), false)?;
        }
        let mut chosen = Vec::new();
        for p in i
            .multipart_upload
            .as_ref()
            .and_then(|m| m.parts.as_ref())
            .into_iter()
            .flatten()
        {
            let n = p
                .part_number
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| s3_error!(InvalidPart, "a part without its number"))?;
            let tag = match &p.e_tag {
                Some(ETag::Strong(t) | ETag::Weak(t)) => t.clone(),
                None => return Err(s3_error!(InvalidPart, "part {n} without its ETag")),
            };
            let given = pick_sum(
                &u.checksum_algorithm,
                [
                    &p.checksum_crc32,
                    &p.checksum_crc32c,
                    &p.checksum_crc64nvme,
                    &p.checksum_sha1,
                    &p.checksum_sha256,
                ],
            );
            chosen.push((n, tag, given));
        }
        let want = pick_sum(
            &u.checksum_algorithm,
            [
                &i.checksum_crc32,
                &i.checksum_crc32c,
                &i.checksum_crc64nvme,
                &i.checksum_sha1,
                &i.checksum_sha256,
            ],
        );
        if chosen.is_empty() {
            return Err(s3_error!(MalformedXML, "the upload names no parts"));
        }
        let e = self
            .meta
            .upload_complete(&b, &u, &chosen, want.as_deref())
            .await
            .map_err(upload_error)?;
        Ok(customer_headers(S3Response::new(answer(&e)), &e))
    }

    async fn abort_multipart_upload(
        &self,
        req: S3Request<AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
        let b = self.bucket(&req, &req.input.bucket, Need::Write).await?;
        let u = self
            .upload_of(&b, &req.input.key, &req.input.upload_id)
            .await?;
        self.meta
            .freeing()
            .upload_abort(&b, &u)
            .await
            .map_err(internal)?;
        Ok(S3Response::new(AbortMultipartUploadOutput::default()))
    }

    async fn list_parts(
        &self,
        req: S3Request<ListPartsInput>,
    ) -> S3Result<S3Response<ListPartsOutput>> {
        let b = self.bucket(&req, &req.input.bucket, Need::Read).await?;
        let i = req.input;
        let u = self.upload_of(&b, &i.key, &i.upload_id).await?;
        let after = i.part_number_marker.unwrap_or(0);
        let max = i.max_parts.unwrap_or(1000).clamp(0, 1000);
        let all = self.meta.upload_parts(&b, &u).await.map_err(internal)?;
        let rest: Vec<_> = all
            .into_iter()
            .filter(|p| i64::from(p.number) > i64::from(after))
            .collect();
        let truncated = rest.len() > max as usize;
        let page: Vec<S3Part> = rest
            .into_iter()
            .take(max as usize)
            .map(|p| S3Part {
                part_number: Some(p.number as i32),
                size: Some(p.run.size as i64),
                e_tag: Some(ETag::Strong(p.etag)),
                last_modified: Some(timestamp(p.mtime_ms)),
                ..S3Part::default()
            })
            .collect();
        let next = page.last().and_then(|p| p.part_number);
        Ok(S3Response::new(ListPartsOutput {
            bucket: Some(b.name),
            key: Some(i.key),
            upload_id: Some(i.upload_id),
            part_number_marker: Some(after),
            max_parts: Some(max),
            is_truncated: Some(truncated),
            next_part_number_marker: truncated.then_some(next).flatten(),
            parts: Some(page),
            ..ListPartsOutput::default()
        }))
    }

    async fn list_multipart_uploads(
        &self,
        req: S3Request<ListMultipartUploadsInput>,
    ) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
        let b = self.bucket(&req, &req.input.bucket, Need::Read).await?;
        let i = req.input;
        let prefix = i.prefix.clone().unwrap_or_default();
        let max = i.max_uploads.unwrap_or(1000).clamp(0, 1000) as usize;
        let all = self.meta.uploads(&b, &prefix).await.map_err(internal)?;
        let after = (
            i.key_marker.clone().unwrap_or_default(),
            i.upload_id_marker.clone().unwrap_or_default(),
        );
        let rest: Vec<Upload> = all
            .into_iter()
            .filter(|u| after.0.is_empty() || (u.key.clone(), u.upload_id.clone()) > after)
            .collect();
        let truncated = rest.len() > max;
        let page: Vec<Upload> = rest.into_iter().take(max).collect();
        let mut writers: BTreeMap<String, Owner> = BTreeMap::new();
        for u in &page {
            if !writers.contains_key(&u.entry.owner) {
                let w = self.writer(&b, &u.entry.owner).await?;
                writers.insert(u.entry.owner.clone(), w);
            }
        }
        let last = page.last().map(|u| (u.key.clone(), u.upload_id.clone()));
        Ok(S3Response::new(ListMultipartUploadsOutput {
            bucket: Some(b.name.clone()),
            prefix: Some(prefix),
            key_marker: i.key_marker,
            upload_id_marker: i.upload_id_marker,
            max_uploads: Some(max as i32),
            is_truncated: Some(truncated),
            next_key_marker: truncated.then(|| last.clone().map(|l| l.0)).flatten(),
            next_upload_id_marker: truncated.then(|| last.map(|l| l.1)).flatten(),
            uploads: Some(
                page.into_iter()
                    .map(|u| {
                        let who = writers
                            .get(&u.entry.owner)
                            .cloned()
                            .unwrap_or_else(|| self.owner(&b));
                        MultipartUpload {
                            key: Some(u.key),
                            upload_id: Some(u.upload_id),
                            initiated: Some(timestamp(u.initiated_ms)),
                            initiator: Some(s3s::dto::Initiator {
                                display_name: who.display_name.clone(),
                                id: who.id.clone(),
                            }),
                            owner: Some(who),
                            ..MultipartUpload::default()
                        }
                    })
                    .collect(),
            ),
            ..ListMultipartUploadsOutput::default()
        }))
    }

    async fn get_object_attributes(
        &self,
        req: S3Request<s3s::dto::GetObjectAttributesInput>,
    ) -> S3Result<S3Response<s3s::dto::GetObjectAttributesOutput>> {
        let i = &req.input;
        let (_, _, e) = self
            .object_of(&req, &i.bucket, &i.key, i.version_id.as_deref())
            .await?;
        self.opener(&req.headers, &req.extensions, Which::Object, &e)
            .await?;
        // One header may list several, comma-separated.
        let want = |a: &str| {
            i.object_attributes
                .iter()
                .flat_map(|x| x.as_str().split(','))
                .any(|x| x.trim() == a)
        };
        let sum = |a: &str| e.checksums.get(a).cloned();
        let checksum = (want("Checksum") && !e.checksums.is_empty()).then(|| s3s::dto::Checksum {
            checksum_crc32: sum("crc32"),
            checksum_crc32c: sum("crc32c"),
            checksum_crc64nvme: sum("crc64nvme"),
            checksum_sha1: sum("sha1"),
            checksum_sha256: sum("sha256"),
            checksum_type: sum_type(&e),
        });
        // Parts, for an object a multipart upload made.
        let object_parts = (want("ObjectParts") && e.etag.contains('-')).then(|| {
            let after = i.part_number_marker.unwrap_or(0).max(0) as usize;
            let max = i.max_parts.unwrap_or(1000).clamp(0, 1000) as usize;
            let rest: Vec<s3s::dto::ObjectPart> = e
                .parts
                .iter()
                .enumerate()
                .skip(after)
                .map(|(n, p)| {
                    let mut part = s3s::dto::ObjectPart {
                        part_number: Some(n as i32 + 1),
                        size: Some(p.size as i64),
                        ..s3s::dto::ObjectPart::default()
                    };
                    if let (Some(alg), Some(sum)) = (e.checksums.keys().next(), &p.checksum) {
                        with_sums!(part, &Checksums::from([(alg.clone(), sum.clone())]));
                    }
                    part
                })
                .collect();
            let truncated = rest.len() > max;
            let page: Vec<_> = rest.into_iter().take(max).collect();
            s3s::dto::GetObjectAttributesParts {
                is_truncated: Some(truncated),
                max_parts: Some(max as i32),
                next_part_number_marker: truncated
                    .then(|| page.last().and_then(|p| p.part_number))
                    .flatten(),
                part_number_marker: i.part_number_marker,
                total_parts_count: Some(e.parts.len() as i32),
                parts: Some(page),
            }
        });
        Ok(S3Response::new(s3s::dto::GetObjectAttributesOutput {
            checksum,
            e_tag: want("ETag").then(|| etag(&e)),
            last_modified: Some(timestamp(e.mtime_ms)),
            object_parts,
            object_size: want("ObjectSize").then_some(e.size as i64),
            storage_class: want("StorageClass")
                .then(|| s3s::dto::StorageClass::from_static(s3s::dto::StorageClass::STANDARD)),
            version_id: e.version_id.clone(),
            ..s3s::dto::GetObjectAttributesOutput::default()
        }))
    }

    async fn get_bucket_acl(
        &self,
        req: S3Request<s3s::dto::GetBucketAclInput>,
    ) -> S3Result<S3Response<s3s::dto::GetBucketAclOutput>> {
        let b = self.bucket(&req, &req.input.bucket, Need::ReadAcp).await?;
        let owner = self.owner(&b);
        let mut list = grants(&b.acl, &owner, None);
        list.extend(self.named_grants(&b.grants).await?);
        Ok(S3Response::new(s3s::dto::GetBucketAclOutput {
            grants: Some(list),
            owner: Some(owner),
        }))
    }

    async fn put_bucket_acl(
        &self,
        req: S3Request<s3s::dto::PutBucketAclInput>,
    ) -> S3Result<S3Response<s3s::dto::PutBucketAclOutput>> {
        let b = self.bucket(&req, &req.input.bucket, Need::WriteAcp).await?;
        let i = &req.input;
        let (acl, named) = wanted_acl(
            i.acl.as_ref().map(|a| a.as_str()),
            i.access_control_policy.as_ref(),
            acl::from_headers(&req.headers)?,
            &self.owner(&b),
            false,
        )?;
        let named = self.resolve(named).await?;
        check_acl_allowed(&b, &acl, &named)?;
        self.meta
            .update_bucket(&b, |nb| {
                nb.acl = acl;
                nb.grants = named;
            })
            .await
            .map_err(internal)?;
        Ok(S3Response::new(s3s::dto::PutBucketAclOutput::default()))
    }

    async fn get_object_acl(
        &self,
        req: S3Request<s3s::dto::GetObjectAclInput>,
    ) -> S3Result<S3Response<s3s::dto::GetObjectAclOutput>> {
        let i = &req.input;
        let (b, _, e) = self
            .object_as(
                &req,
                &i.bucket,
                &i.key,
                i.version_id.as_deref(),
                Perm::ReadAcp,
            )
            .await?;
        let owner = self.writer(&b, &e.owner).await?;
        let mut list = grants(&e.acl, &owner, Some(&self.owner(&b)));
        list.extend(self.named_grants(&e.grants).await?);
        Ok(S3Response::new(s3s::dto::GetObjectAclOutput {
            grants: Some(list),
            owner: Some(owner),
            ..s3s::dto::GetObjectAclOutput::default()
        }))
    }

    async fn put_object_acl(
        &self,
        req: S3Request<s3s::dto::PutObjectAclInput>,
    ) -> S3Result<S3Response<s3s::dto::PutObjectAclOutput>> {
        let i = &req.input;
        let (b, user, e) = self
            .object_as(
                &req,
                &i.bucket,
                &i.key,
                i.version_id.as_deref(),
                Perm::WriteAcp,
            )
            .await?;
        let granted = policy_allows(&req, &b.name, Some(&i.key))
            || object_allows(&b, &e, user.as_ref(), Perm::WriteAcp);
        may_change(&b, user.as_ref(), &e, granted)?;
        let (acl, named) = wanted_acl(
            i.acl.as_ref().map(|a| a.as_str()),
            i.access_control_policy.as_ref(),
            acl::from_headers(&req.headers)?,
            &owner_of(
                if e.owner.is_empty() {
                    &b.owner
                } else {
                    &e.owner
                },
                "",
            ),
            true,
        )?;
        let named = self.resolve(named).await?;
        check_acl_allowed(&b, &acl, &named)?;
        self.change_object(&b, &i.key, i.version_id.as_deref(), |e| {
            e.acl = acl.clone();
            e.grants = named.clone();
        })
        .await?;
        Ok(S3Response::new(s3s::dto::PutObjectAclOutput::default()))
    }

    async fn get_object_tagging(
        &self,
        req: S3Request<s3s::dto::GetObjectTaggingInput>,
    ) -> S3Result<S3Response<s3s::dto::GetObjectTaggingOutput>> {
        let i = &req.input;
        let (_, _, e) = self
            .object_of(&req, &i.bucket, &i.key, i.version_id.as_deref())
            .await?;
        Ok(S3Response::new(s3s::dto::GetObjectTaggingOutput {
            tag_set: tags::to_set(&e.tags),
            version_id: e.version_id.filter(|v| v != versions::NULL),
        }))
    }

    async fn put_object_tagging(
        &self,
        req: S3Request<s3s::dto::PutObjectTaggingInput>,
    ) -> S3Result<S3Response<s3s::dto::PutObjectTaggingOutput>> {
        let i = &req.input;
        let tags = tags::from_set(&i.tagging.tag_set, Scope::Object)?;
        let version_id = self
            .set_object_tags(&req, &i.bucket, &i.key, i.version_id.as_deref(), tags)
            .await?;
        Ok(S3Response::new(s3s::dto::PutObjectTaggingOutput {
            version_id,
        }))
    }

    async fn delete_object_tagging(
        &self,
        req: S3Request<s3s::dto::DeleteObjectTaggingInput>,
    ) -> S3Result<S3Response<s3s::dto::DeleteObjectTaggingOutput>> {
        let i = &req.input;
        let version_id = self
            .set_object_tags(
                &req,
                &i.bucket,
                &i.key,
                i.version_id.as_deref(),
                tags::Tags::new(),
            )
            .await?;
        Ok(S3Response::new(s3s::dto::DeleteObjectTaggingOutput {
            version_id,
        }))
    }

    async fn get_bucket_tagging(
        &self,
        req: S3Request<s3s::dto::GetBucketTaggingInput>,
    ) -> S3Result<S3Response<s3s::dto::GetBucketTaggingOutput>> {
        let b = self.bucket(&req, &req.input.bucket, Need::Owner).await?;
        if b.tags.is_empty() {
            return Err(s3_error!(NoSuchTagSet, "bucket {} has no tags", b.name));
        }
        Ok(S3Response::new(s3s::dto::GetBucketTaggingOutput {
            tag_set: tags::to_set(&b.tags),
        }))
    }

    async fn put_bucket_tagging(
        &self,
        req: S3Request<s3s::dto::PutBucketTaggingInput>,
    ) -> S3Result<S3Response<s3s::dto::PutBucketTaggingOutput>> {
        let b = self.bucket(&req, &req.input.bucket, Need::Owner).await?;
        let tags = tags::from_set(&req.input.tagging.tag_set, Scope::Bucket)?;
        self.meta
            .update_bucket(&b, |nb| nb.tags = tags)
            .await
            .map_err(internal)?;
        Ok(S3Response::new(s3s::dto::PutBucketTaggingOutput::default()))
    }

    async fn delete_bucket_tagging(
        &self,
        req: S3Request<s3s::dto::DeleteBucketTaggingInput>,
    ) -> S3Result<S3Response<s3s::dto::DeleteBucketTaggingOutput>> {
        self.change_bucket(&req, &req.input.bucket, |nb| nb.tags.clear())
            .await?;
        Ok(S3Response::new(
            s3s::dto::DeleteBucketTaggingOutput::default(),
        ))
    }

    async fn get_public_access_block(
        &self,
        req: S3Request<s3s::dto::GetPublicAccessBlockInput>,
    ) -> S3Result<S3Response<s3s::dto::GetPublicAccessBlockOutput>> {
        let b = self.bucket(&req, &req.input.bucket, Need::Owner).await?;
        let Some(p) = b.public_access_block else {
            return Err(not_found(
                "NoSuchPublicAccessBlockConfiguration",
                format!("bucket {} has no public access block", b.name),
            ));
        };
        Ok(S3Response::new(s3s::dto::GetPublicAccessBlockOutput {
            public_access_block_configuration: Some(s3s::dto::PublicAccessBlockConfiguration {
                block_public_acls: Some(p.block_public_acls),
                ignore_public_acls: Some(p.ignore_public_acls),
                block_public_policy: Some(p.block_public_policy),
                restrict_public_buckets: Some(p.restrict_public_buckets),
            }),
        }))
    }

    async fn put_public_access_block(
        &self,
        req: S3Request<s3s::dto::PutPublicAccessBlockInput>,
    ) -> S3Result<S3Response<s3s::dto::PutPublicAccessBlockOutput>> {
        let b = self.bucket(&req, &req.input.bucket, Need::Owner).await?;
        let c = &req.input.public_access_block_configuration;
        let p = crate::meta::PublicAccessBlock {
            block_public_acls: c.block_public_acls.unwrap_or(false),
            ignore_public_acls: c.ignore_public_acls.unwrap_or(false),
            block_public_policy: c.block_public_policy.unwrap_or(false),
            restrict_public_buckets: c.restrict_public_buckets.unwrap_or(false),
        };
        self.meta
            .update_bucket(&b, |nb| nb.public_access_block = Some(p))
            .await
            .map_err(internal)?;
        Ok(S3Response::new(
            s3s::dto::PutPublicAccessBlockOutput::default(),
        ))
    }

    async fn delete_public_access_block(
        &self,
        req: S3Request<s3s::dto::DeletePublicAccessBlockInput>,
    ) -> S3Result<S3Response<s3s::dto::DeletePublicAccessBlockOutput>> {
        self.change_bucket(&req, &req.input.bucket, |nb| nb.public_access_block = None)
            .await?;
        Ok(S3Response::new(
            s3s::dto::DeletePublicAccessBlockOutput::default(),
        ))
    }

    async fn get_bucket_encryption(
        &self,
        req: S3Request<s3s::dto::GetBucketEncryptionInput>,
    ) -> S3Result<S3Response<s3s::dto::GetBucketEncryptionOutput>> {
        let b = self.bucket(&req, &req.input.bucket, Need::Owner).await?;
        if b.encryption.is_empty() {
            return Err(not_found(
                "ServerSideEncryptionConfigurationNotFoundError",
                format!("bucket {} has no default encryption", b.name),
            ));
        }
        let rule = s3s::dto::ServerSideEncryptionRule {
            apply_server_side_encryption_by_default: Some(
                s3s::dto::ServerSideEncryptionByDefault {
                    kms_master_key_id: None,
                    sse_algorithm: aes256(),
                },
            ),
            bucket_key_enabled: Some(false),
        };
        Ok(S3Response::new(s3s::dto::GetBucketEncryptionOutput {
            server_side_encryption_configuration: Some(
                s3s::dto::ServerSideEncryptionConfiguration { rules: vec![rule] },
            ),
        }))
    }

    async fn put_bucket_encryption(
        &self,
        req: S3Request<s3s::dto::PutBucketEncryptionInput>,
    ) -> S3Result<S3Response<s3s::dto::PutBucketEncryptionOutput>> {
        let b = self.bucket(&req, &req.input.bucket, Need::Owner).await?;
        let rules = &req.input.server_side_encryption_configuration.rules;
        let [rule] = rules.as_slice() else {
            return Err(s3_error!(
                MalformedXML,
                "a default encryption has exactly one rule, not {}",
                rules.len()
            ));
        };
        let Some(by_default) = &rule.apply_server_side_encryption_by_default else {
            return Err(s3_error!(
                MalformedXML,
                "the rule has no ApplyServerSideEncryptionByDefault"
            ));
        };
        match by_default.sse_algorithm.as_str() {
            sse::AES256 if by_default.kms_master_key_id.is_none() => {}
            sse::AES256 => {
                return Err(s3_error!(
                    InvalidArgument,
                    "a KMS key id is given with SSE-S3 (AES256)"
                ));
            }
            "aws:kms" | "aws:kms:dsse" => {
                return Err(s3_error!(
                    InvalidArgument,
                    "SSE-KMS is not offered: no KMS is configured (use AES256)"
                ));
            }
            other => {
                return Err(s3_error!(
                    MalformedXML,
                    "the encryption algorithm {other:?} is not valid: AES256"
                ));
            }
        }
        // The master key must be there before objects count on it.
        self.master().await?;
        self.meta
            .update_bucket(&b, |nb| nb.encryption = sse::AES256.to_string())
            .await
            .map_err(internal)?;
        Ok(S3Response::new(
            s3s::dto::PutBucketEncryptionOutput::default(),
        ))
    }

    async fn delete_bucket_encryption(
        &self,
        req: S3Request<s3s::dto::DeleteBucketEncryptionInput>,
    ) -> S3Result<S3Response<s3s::dto::DeleteBucketEncryptionOutput>> {
        self.change_bucket(&req, &req.input.bucket, |nb| nb.encryption.clear())
            .await?;
        Ok(S3Response::new(
            s3s::dto::DeleteBucketEncryptionOutput::default(),
        ))
    }

    async fn get_object_lock_configuration(
        &self,
        req: S3Request<s3s::dto::GetObjectLockConfigurationInput>,
    ) -> S3Result<S3Response<s3s::dto::GetObjectLockConfigurationOutput>> {
        use s3s::dto::{DefaultRetention, ObjectLockConfiguration, ObjectLockRule};
        let b = self.bucket(&req, &req.input.bucket, Need::Owner).await?;
        let Some(cfg) = b.object_lock else {
            return Err(not_found(
                "ObjectLockConfigurationNotFoundError",
                format!("bucket {} has no object lock configuration", b.name),
            ));
        };
        Ok(S3Response::new(
            s3s::dto::GetObjectLockConfigurationOutput {
                object_lock_configuration: Some(ObjectLockConfiguration {
                    object_lock_enabled: Some("Enabled".to_string().into()),
                    rule: cfg.default.map(|d| ObjectLockRule {
                        default_retention: Some(DefaultRetention {
                            mode: Some(d.mode.as_str().to_string().into()),
                            days: (!d.years).then_some(d.days as i32),
                            years: d.years.then_some(d.days as i32),
                        }),
                    }),
                }),
            },
        ))
    }

    async fn put_object_lock_configuration(
        &self,
        req: S3Request<s3s::dto::PutObjectLockConfigurationInput>,
    ) -> S3Result<S3Response<s3s::dto::PutObjectLockConfigurationOutput>> {
        let b = self.bucket(&req, &req.input.bucket, Need::Owner).await?;
        let c = req
            .input
            .object_lock_configuration
            .as_ref()
            .ok_or_else(|| s3_error!(MalformedXML, "no ObjectLockConfiguration"))?;
        if c.object_lock_enabled.as_ref().map(|e| e.as_str()) != Some("Enabled") {
            return Err(s3_error!(MalformedXML, "ObjectLockEnabled must be Enabled"));
        }
        if b.object_lock.is_none() && b.versioning != "Enabled" {
            let mut e = s3_error!(
                InvalidBucketState,
                "object lock needs versioning Enabled on the bucket"
            );
            e.set_status_code(hyper::http::StatusCode::CONFLICT);
            return Err(e);
        }
        let default = match c.rule.as_ref().and_then(|r| r.default_retention.as_ref()) {
            None => None,
            Some(d) => {
                let mode = d
                    .mode
                    .as_ref()
                    .and_then(|m| lock::Mode::parse(m.as_str()))
                    .ok_or_else(|| {
                        s3_error!(
                            MalformedXML,
                            "a default retention needs a Mode: GOVERNANCE or COMPLIANCE"
                        )
                    })?;
                let (n, years) = match (d.days, d.years) {
                    (Some(n), None) => (n, false),
                    (None, Some(n)) => (n, true),
                    _ => {
                        return Err(s3_error!(
                            MalformedXML,
                            "a default retention gives Days or Years, one of them"
                        ));
                    }
                };
                if n <= 0 {
                    let mut e = S3Error::with_message(
                        S3ErrorCode::Custom("InvalidRetentionPeriod".into()),
                        "a default retention period must be a positive integer",
                    );
                    e.set_status_code(hyper::http::StatusCode::BAD_REQUEST);
                    return Err(e);
                }
                Some(lock::DefaultRetention {
                    mode,
                    days: n as u32,
                    years,
                })
            }
        };
        self.meta
            .update_bucket(&b, |nb| {
                nb.object_lock = Some(LockConfig { default });
                nb.versioning = "Enabled".to_string();
            })
            .await
            .map_err(internal)?;
        Ok(S3Response::new(
            s3s::dto::PutObjectLockConfigurationOutput::default(),
        ))
    }

    async fn get_object_retention(
        &self,
        req: S3Request<s3s::dto::GetObjectRetentionInput>,
    ) -> S3Result<S3Response<s3s::dto::GetObjectRetentionOutput>> {
        let i = &req.input;
        let (b, _, e) = self
            .object_of(&req, &i.bucket, &i.key, i.version_id.as_deref())
            .await?;
        locked_bucket(&b)?;
        let r = e.retention.ok_or_else(|| {
            not_found(
                "NoSuchObjectLockConfiguration",
                "the object has no retention".to_string(),
            )
        })?;
        Ok(S3Response::new(s3s::dto::GetObjectRetentionOutput {
            retention: Some(s3s::dto::ObjectLockRetention {
                mode: Some(r.mode.as_str().to_string().into()),
                retain_until_date: Some(timestamp(r.until_ms)),
            }),
        }))
    }

    async fn put_object_retention(
        &self,
        req: S3Request<s3s::dto::PutObjectRetentionInput>,
    ) -> S3Result<S3Response<s3s::dto::PutObjectRetentionOutput>> {
        let i = &req.input;
        let (b, user, e) = self
            .object_of(&req, &i.bucket, &i.key, i.version_id.as_deref())
            .await?;
        locked_bucket(&b)?;
        may_change(
            &b,
            user.as_ref(),
            &e,
            policy_allows(&req, &b.name, Some(&i.key)),
        )?;
        let now = now_ms();
        let new = match i.retention.as_ref() {
            Some(r) => match (&r.mode, &r.retain_until_date) {
                (Some(m), _) if lock::Mode::parse(m.as_str()).is_none() => {
                    return Err(s3_error!(
                        MalformedXML,
                        "a retention Mode is GOVERNANCE or COMPLIANCE, not {:?}",
                        m.as_str()
                    ));
                }
                (Some(m), Some(u)) => Some(retention(m.as_str(), ms_of(u), now)?),
                (None, None) => None,
                _ => {
                    return Err(s3_error!(
                        MalformedXML,
                        "a Retention gives Mode and RetainUntilDate together"
                    ));
                }
            },
            None => None,
        };
        let bypass = i.bypass_governance_retention == Some(true)
            && user.as_ref().is_some_and(|u| u.uid == b.owner);
        lock::may_change(e.retention.as_ref(), new.as_ref(), now, bypass)
            .map_err(|m| s3_error!(AccessDenied, "{m}"))?;
        self.change_object(&b, &i.key, i.version_id.as_deref(), |e| e.retention = new)
            .await?;
        Ok(S3Response::new(
            s3s::dto::PutObjectRetentionOutput::default(),
        ))
    }

    async fn get_object_legal_hold(
        &self,
        req: S3Request<s3s::dto::GetObjectLegalHoldInput>,
    ) -> S3Result<S3Response<s3s::dto::GetObjectLegalHoldOutput>> {
        let i = &req.input;
        let (b, _, e) = self
            .object_of(&req, &i.bucket, &i.key, i.version_id.as_deref())
            .await?;
        locked_bucket(&b)?;
        Ok(S3Response::new(s3s::dto::GetObjectLegalHoldOutput {
            legal_hold: Some(s3s::dto::ObjectLockLegalHold {
                status: Some(if e.legal_hold { "ON" } else { "OFF" }.to_string().into()),
            }),
        }))
    }

    async fn put_object_legal_hold(
        &self,
        req: S3Request<s3s::dto::PutObjectLegalHoldInput>,
    ) -> S3Result<S3Response<s3s::dto::PutObjectLegalHoldOutput>> {
        let i = &req.input;
        let (b, user, e) = self
            .object_of(&req, &i.bucket, &i.key, i.version_id.as_deref())
            .await?;
        locked_bucket(&b)?;
        may_change(
            &b,
            user.as_ref(),
            &e,
            policy_allows(&req, &b.name, Some(&i.key)),
        )?;
        let on = match i
            .legal_hold
            .as_ref()
            .and_then(|h| h.status.as_ref())
            .map(|s| s.as_str())
        {
            Some("ON") => true,
            Some("OFF") => false,
            other => {
                return Err(s3_error!(
                    MalformedXML,
                    "a LegalHold Status is ON or OFF, not {other:?}"
                ));
            }
        };
        self.change_object(&b, &i.key, i.version_id.as_deref(), |e| e.legal_hold = on)
            .await?;
        Ok(S3Response::new(
            s3s::dto::PutObjectLegalHoldOutput::default(),
        ))
    }

    async fn get_bucket_policy_status(
        &self,
        req: S3Request<s3s::dto::GetBucketPolicyStatusInput>,
    ) -> S3Result<S3Response<s3s::dto::GetBucketPolicyStatusOutput>> {
        let b = self.bucket(&req, &req.input.bucket, Need::Owner).await?;
        // Public: an ACL granting all users or all signed users, or a
        // policy allowing anyone without a condition.
        let acl_public = !ignores_public(&b) && acl::is_public(&b.acl, &b.grants);
        let policy_public =
            !b.policy.is_empty() && crate::policy::Policy::parse(&b.policy, &b.name)?.is_public();
        Ok(S3Response::new(s3s::dto::GetBucketPolicyStatusOutput {
            policy_status: Some(s3s::dto::PolicyStatus {
                is_public: Some(acl_public || policy_public),
            }),
        }))
    }

    async fn get_bucket_policy(
        &self,
        req: S3Request<s3s::dto::GetBucketPolicyInput>,
    ) -> S3Result<S3Response<s3s::dto::GetBucketPolicyOutput>> {
        let b = self.bucket(&req, &req.input.bucket, Need::Owner).await?;
        if b.policy.is_empty() {
            return Err(s3_error!(
                NoSuchBucketPolicy,
                "bucket {} has no policy",
                b.name
            ));
        }
        Ok(S3Response::new(s3s::dto::GetBucketPolicyOutput {
            policy: Some(b.policy),
        }))
    }

    async fn put_bucket_policy(
        &self,
        req: S3Request<s3s::dto::PutBucketPolicyInput>,
    ) -> S3Result<S3Response<s3s::dto::PutBucketPolicyOutput>> {
        let b = self.bucket(&req, &req.input.bucket, Need::Owner).await?;
        let doc = req.input.policy.trim();
        let parsed = crate::policy::Policy::parse(doc, &b.name)?;
        if b.public_access_block.is_some_and(|p| p.block_public_policy) && parsed.is_public() {
            return Err(s3_error!(
                AccessDenied,
                "the bucket's public access block refuses a public policy"
            ));
        }
        self.meta
            .update_bucket(&b, |nb| nb.policy = doc.to_string())
            .await
            .map_err(internal)?;
        let mut resp = S3Response::new(s3s::dto::PutBucketPolicyOutput::default());
        resp.status = Some(hyper::http::StatusCode::NO_CONTENT);
        Ok(resp)
    }

    async fn delete_bucket_policy(
        &self,
        req: S3Request<s3s::dto::DeleteBucketPolicyInput>,
    ) -> S3Result<S3Response<s3s::dto::DeleteBucketPolicyOutput>> {
        self.change_bucket(&req, &req.input.bucket, |nb| nb.policy.clear())
            .await?;
        Ok(S3Response::new(
            s3s::dto::DeleteBucketPolicyOutput::default(),
        ))
    }

    async fn put_bucket_versioning(
        &self,
        req: S3Request<s3s::dto::PutBucketVersioningInput>,
    ) -> S3Result<S3Response<s3s::dto::PutBucketVersioningOutput>> {
        let b = self.bucket(&req, &req.input.bucket, Need::Owner).await?;
        let status = req
            .input
            .versioning_configuration
            .status
            .as_ref()
            .map(|s| s.as_str().to_string())
            .ok_or_else(|| s3_error!(MalformedXML, "no versioning Status given"))?;
        if req
            .input
            .versioning_configuration
            .mfa_delete
            .as_ref()
            .is_some_and(|m| m.as_str() == "Enabled")
        {
            return Err(s3_error!(NotImplemented, "MFA delete is not supported"));
        }
        if b.object_lock.is_some() && status != "Enabled" {
            let mut e = s3_error!(
                InvalidBucketState,
                "versioning cannot be suspended on a bucket with object lock"
            );
            e.set_status_code(hyper::http::StatusCode::CONFLICT);
            return Err(e);
        }
        match self.meta.set_versioning(&b, &status).await {
            Ok(_) => Ok(S3Response::new(
                s3s::dto::PutBucketVersioningOutput::default(),
            )),
            Err(MetaError::Invalid(m)) => Err(s3_error!(MalformedXML, "{m}")),
            Err(e) => Err(internal(e)),
        }
    }

    async fn get_bucket_versioning(
        &self,
        req: S3Request<s3s::dto::GetBucketVersioningInput>,
    ) -> S3Result<S3Response<s3s::dto::GetBucketVersioningOutput>> {
        let b = self.bucket(&req, &req.input.bucket, Need::Owner).await?;
        Ok(S3Response::new(s3s::dto::GetBucketVersioningOutput {
            status: (!b.versioning.is_empty())
                .then(|| s3s::dto::BucketVersioningStatus::from(b.versioning.clone())),
            ..s3s::dto::GetBucketVersioningOutput::default()
        }))
    }

    async fn list_object_versions(
        &self,
        req: S3Request<s3s::dto::ListObjectVersionsInput>,
    ) -> S3Result<S3Response<s3s::dto::ListObjectVersionsOutput>> {
        let b = self.bucket(&req, &req.input.bucket, Need::Read).await?;
        let i = req.input;
        let prefix = i.prefix.clone().unwrap_or_default();
        let max = i.max_keys.unwrap_or(LIST_MAX);
        let key_marker = i.key_marker.clone().unwrap_or_default();
        let vid_marker = i.version_id_marker.clone().unwrap_or_default();
        if !b.versioning.is_empty() && !b.versions_recorded {
            // A turn-on cut short: finish recording the older objects.
            self.meta.record_unversioned(&b).await.map_err(internal)?;
        }
        let (objects, markers, prefixes, last, truncated) = if b.versioning.is_empty() {
            // Never versioned: each object is its own null version.
            let (objects, prefixes, last, truncated) = self
                .page(&b, &prefix, i.delimiter.as_deref(), &key_marker, max)
                .await?;
            let objects = objects
                .into_iter()
                .map(|o| s3s::dto::ObjectVersion {
                    e_tag: o.e_tag,
                    is_latest: Some(true),
                    key: o.key,
                    last_modified: o.last_modified,
                    owner: o.owner,
                    size: o.size,
                    storage_class: Some(s3s::dto::ObjectVersionStorageClass::from_static(
                        s3s::dto::ObjectVersionStorageClass::STANDARD,
                    )),
                    version_id: Some(versions::NULL.to_string()),
                    ..s3s::dto::ObjectVersion::default()
                })
                .collect();
            let last = last.map(|k| (k, versions::NULL.to_string()));
            (objects, Vec::new(), prefixes, last, truncated)
        } else {
            let cursor = self
                .meta
                .version_cursor(&b, &key_marker, &vid_marker)
                .await
                .map_err(|e| match e {
                    MetaError::Invalid(m) => s3_error!(InvalidArgument, "{m}"),
                    e => internal(e),
                })?;
            let prev = (!vid_marker.is_empty()).then(|| key_marker.clone());
            self.version_page(
                &b,
                &prefix,
                i.delimiter.as_deref(),
                cursor,
                prev,
                max.clamp(0, LIST_MAX) as usize,
            )
            .await?
        };
        let enc = Encode::of(i.encoding_type.as_ref());
        let mut objects = objects;
        for o in &mut objects {
            o.key = o.key.take().map(|k| enc.one(k));
        }
        let mut markers = markers;
        for m in &mut markers {
            m.key = m.key.take().map(|k| enc.one(k));
        }
        let (_, prefixes) = enc.listing(Vec::new(), prefixes);
        let (next_key, next_vid) = match (truncated, last) {
            (true, Some((k, v))) => (Some(enc.one(k)), (!v.is_empty()).then_some(v)),
            _ => (None, None),
        };
        Ok(S3Response::new(s3s::dto::ListObjectVersionsOutput {
            name: Some(b.name.clone()),
            prefix: Some(enc.one(prefix)),
            delimiter: i.delimiter.filter(|d| !d.is_empty()).map(|d| enc.one(d)),
            key_marker: Some(enc.one(key_marker)),
            version_id_marker: Some(vid_marker),
            max_keys: Some(max),
            is_truncated: Some(truncated),
            next_key_marker: next_key,
            next_version_id_marker: next_vid,
            versions: (!objects.is_empty()).then_some(objects),
            delete_markers: (!markers.is_empty()).then_some(markers),
            common_prefixes: (!prefixes.is_empty()).then_some(prefixes),
            encoding_type: i.encoding_type,
            ..s3s::dto::ListObjectVersionsOutput::default()
        }))
    }

    async fn list_objects_v2(
        &self,
        req: S3Request<ListObjectsV2Input>,
    ) -> S3Result<S3Response<ListObjectsV2Output>> {
        let b = self.bucket(&req, &req.input.bucket, Need::Read).await?;
        let i = req.input;
        let prefix = i.prefix.clone().unwrap_or_default();
        let max = i.max_keys.unwrap_or(LIST_MAX);
        let after = match (&i.continuation_token, &i.start_after) {
            (Some(t), _) => decode_token(t)?,
            (None, Some(s)) => s.clone(),
            (None, None) => String::new(),
        };
        let (objects, prefixes, last, truncated) = self
            .page(&b, &prefix, i.delimiter.as_deref(), &after, max)
            .await?;
        let count = (objects.len() + prefixes.len()) as i32;
        let enc = Encode::of(i.encoding_type.as_ref());
        let (mut objects, prefixes) = enc.listing(objects, prefixes);
        if i.fetch_owner != Some(true) {
            // v2 names owners only when asked.
            for o in &mut objects {
                o.owner = None;
            }
        }
        Ok(S3Response::new(ListObjectsV2Output {
            name: Some(b.name.clone()),
            prefix: Some(enc.one(prefix)),
            delimiter: i.delimiter.filter(|d| !d.is_empty()).map(|d| enc.one(d)),
            max_keys: Some(max),
            key_count: Some(count),
            is_truncated: Some(truncated),
            continuation_token: i.continuation_token,
            next_continuation_token: truncated.then(|| last.map(|l| encode_token(&l))).flatten(),
            start_after: i.start_after.map(|a| enc.one(a)),
            contents: Some(objects),
            common_prefixes: (!prefixes.is_empty()).then_some(prefixes),
            encoding_type: i.encoding_type,
            ..ListObjectsV2Output::default()
        }))
    }

    async fn list_objects(
        &self,
        req: S3Request<ListObjectsInput>,
    ) -> S3Result<S3Response<ListObjectsOutput>> {
        let b = self.bucket(&req, &req.input.bucket, Need::Read).await?;
        let i = req.input;
        let prefix = i.prefix.clone().unwrap_or_default();
        let max = i.max_keys.unwrap_or(LIST_MAX);
        let after = i.marker.clone().unwrap_or_default();
        let (objects, prefixes, last, truncated) = self
            .page(&b, &prefix, i.delimiter.as_deref(), &after, max)
            .await?;
        let enc = Encode::of(i.encoding_type.as_ref());
        let (objects, prefixes) = enc.listing(objects, prefixes);
        Ok(S3Response::new(ListObjectsOutput {
            name: Some(b.name.clone()),
            // v1 answers its Prefix as given (the SDKs decode the rest only).
            prefix: Some(prefix),
            marker: Some(enc.one(after)),
            delimiter: i
                .delimiter
                .clone()
                .filter(|d| !d.is_empty())
                .map(|d| enc.one(d)),
            max_keys: Some(max),
            is_truncated: Some(truncated),
            // AWS gives NextMarker only with a delimiter.
            next_marker: (truncated && i.delimiter.is_some())
                .then_some(last)
                .flatten()
                .map(|m| enc.one(m)),
            contents: Some(objects),
            common_prefixes: (!prefixes.is_empty()).then_some(prefixes),
            encoding_type: i.encoding_type,
            ..ListObjectsOutput::default()
        }))
    }
}

/// An object's entry-to-be from the headers of its upload.
fn new_entry(
    content_type: Option<String>,
    content_encoding: Option<String>,
    content_disposition: Option<String>,
    content_language: Option<String>,
    cache_control: Option<String>,
    metadata: Option<s3s::dto::Metadata>,
) -> Entry {
    let mut headers = BTreeMap::new();
    // `aws-chunked` names how the body came, not how the object is encoded.
    let content_encoding = content_encoding.and_then(|c| {
        let kept: Vec<&str> = c
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty() && !e.eq_ignore_ascii_case("aws-chunked"))
            .collect();
        (!kept.is_empty()).then(|| kept.join(", "))
    });
    for (name, v) in [
        ("content-type", content_type),
        ("content-encoding", content_encoding),
        ("content-disposition", content_disposition),
        ("content-language", content_language),
        ("cache-control", cache_control),
    ] {
        if let Some(v) = v {
            headers.insert(name.to_string(), v);
        }
    }
    Entry {
        headers,
        meta: metadata.unwrap_or_default().into_iter().collect(),
        ..Entry::default()
    }
}

fn upload_error(e: MetaError) -> S3Error {
    match e {
        MetaError::Missing(m) => s3_error!(NoSuchUpload, "{m}"),
        MetaError::Order => s3_error!(InvalidPartOrder),
        MetaError::BadPart(n) => s3_error!(InvalidPart, "part {n} was not uploaded with that ETag"),
        MetaError::PartTooSmall(n) => s3_error!(EntityTooSmall, "part {n} is smaller than 5 MiB"),
        MetaError::TooLarge(n) => s3_error!(EntityTooLarge, "a part is at most {n} bytes"),
        MetaError::Invalid(m) => s3_error!(InvalidArgument, "{m}"),
        MetaError::BadDigest => s3_error!(BadDigest),
        MetaError::BadChecksum(m) => s3_error!(
            BadDigest,
            "the {m} you specified did not match the calculated checksum"
        ),
        other => internal(other),
    }
}

/// Server-side encryption (`sse.rs`): the keys a request's object is
/// sealed or opened with.
impl Gateway {
    /// The SSE-S3 master key: the key of [`sse::MASTER_ENTITY`], which the
    /// monitors make the first time a gateway asks and keep.
    async fn master(&self) -> S3Result<sse::Key> {
        let fetch = || async {
            use shoal_monclient::Command;
            use shoal_monclient::replies::{AuthKey, AuthReply};
            let monc = self.meta.pool().client().mon_client();
            let entity = sse::MASTER_ENTITY.to_string();
            let made = Command::AuthGetOrCreate {
                entity: entity.clone(),
                caps: BTreeMap::new(),
            };
            // A gateway that may not write to the monitors reads it (made
            // by `shoal auth get-or-create` or another gateway).
            let reply: AuthReply = match monc.command_as(&made).await {
                Ok(r) => r,
                Err(_) => monc
                    .command_as(&Command::AuthGet {
                        entity: entity.clone(),
                    })
                    .await
                    .map_err(|e| format!("{e}"))?,
            };
            let key = AuthKey::of(&reply, &entity)
                .ok_or_else(|| format!("the monitors' record of {entity} has no key"))?;
            sse::Key::master(key).map_err(|e| e.to_string())
        };
        self.keys
            .master
            .get_or_try_init(fetch)
            .await
            .cloned()
            .map_err(|m: String| {
                s3_error!(
                    ServiceUnavailable,
                    "SSE-S3 needs the gateways' master key from the monitors: {m}"
                )
            })
    }

    /// Refuses SSE-C over plain HTTP, as AWS does (unless the gateway was
    /// told to take it: tests on loopback).
    fn customer_key_over_tls(&self, ext: &hyper::http::Extensions) -> S3Result<()> {
        let tls = ext.get::<Origin>().is_some_and(|o| o.tls);
        if tls || self.keys.sse_c_over_http {
            return Ok(());
        }
        Err(s3_error!(
            InvalidRequest,
            "requests specifying server-side encryption with customer-provided keys must be made over a secure connection (HTTPS)"
        ))
    }

    /// The encryption of an object `req` writes into `b`: what its
    /// headers ask for, else the bucket's default; its record and data
    /// key.
    async fn seal_new(
        &self,
        headers: &hyper::http::HeaderMap,
        ext: &hyper::http::Extensions,
        b: &Bucket,
    ) -> S3Result<Option<(sse::Key, sse::Sse)>> {
        let made = match sse::asked(headers, Which::Object)? {
            Asked::Customer { key, key_md5 } => {
                self.customer_key_over_tls(ext)?;
                sse::Key::from_bytes(key).new_customer(&key_md5)
            }
            Asked::S3 => self.master().await?.new_s3(),
            Asked::Nothing if b.encryption == sse::AES256 => self.master().await?.new_s3(),
            Asked::Nothing => return Ok(None),
        };
        made.map(Some).map_err(|e| s3_error!(InternalError, "{e}"))
    }

    /// The data key to read `e` with (none: stored as sent), from what
    /// `req`'s headers (`which` object's) give: an SSE-C object needs its
    /// key, any other none.
    async fn opener(
        &self,
        headers: &hyper::http::HeaderMap,
        ext: &hyper::http::Extensions,
        which: Which,
        e: &Entry,
    ) -> S3Result<Option<sse::Key>> {
        let asked = sse::asked(headers, which)?;
        match (&e.sse, asked) {
            (_, Asked::S3) => Err(s3_error!(
                InvalidArgument,
                "x-amz-server-side-encryption is given when writing, not reading: an SSE-S3 object is read without it"
            )),
            (None, Asked::Nothing) => Ok(None),
            (None | Some(sse::Sse::S3 { .. }), Asked::Customer { .. }) => Err(s3_error!(
                InvalidRequest,
                "the encryption parameters are not applicable to this object: it is not encrypted with a customer key"
            )),
            (Some(sse::Sse::S3 { wrapped }), Asked::Nothing) => self.unwrapped(wrapped).await,
            (Some(sse::Sse::Customer { .. }), Asked::Nothing) => Err(s3_error!(
                InvalidRequest,
                "the object was stored using server-side encryption with a customer key: give the key to read it"
            )),
            (
                Some(sse::Sse::Customer { key_md5, salt }),
                Asked::Customer {
                    key,
                    key_md5: given,
                },
            ) => self.customer_data_key(ext, key, &given, key_md5, salt),
        }
    }

    /// An SSE-S3 data key, unwrapped by the master key.
    async fn unwrapped(&self, wrapped: &str) -> S3Result<Option<sse::Key>> {
        let master = self.master().await?;
        master
            .unwrap_s3(wrapped)
            .map(Some)
            .map_err(|err| s3_error!(InternalError, "a data key does not open: {err}"))
    }

    /// The data key of an SSE-C object or upload (its client key's MD5
    /// `key_md5`, its `salt`) from the key `req` gives (`key`, MD5 `given`).
    fn customer_data_key(
        &self,
        ext: &hyper::http::Extensions,
        key: [u8; 32],
        given: &str,
        key_md5: &str,
        salt: &str,
    ) -> S3Result<Option<sse::Key>> {
        self.customer_key_over_tls(ext)?;
        if given != key_md5 {
            return Err(s3_error!(
                InvalidArgument,
                "the customer key is not the one the object (or upload) was encrypted with"
            ));
        }
        sse::Key::from_bytes(key)
            .customer_data_key(salt)
            .map(Some)
            .map_err(|err| s3_error!(InternalError, "{err}"))
    }

    /// The data key the parts of upload `u` are sealed with, checked
    /// against what `req`'s headers give (SSE-C: the upload's key again).
    async fn part_key(
        &self,
        headers: &hyper::http::HeaderMap,
        ext: &hyper::http::Extensions,
        u: &Upload,
    ) -> S3Result<Option<sse::Key>> {
        match (&u.entry.sse, sse::asked(headers, Which::Object)?) {
            (Some(sse::Sse::Customer { .. }), Asked::Nothing) => Err(s3_error!(
                InvalidRequest,
                "the upload is encrypted with a customer key: give it with each part"
            )),
            (_, Asked::S3) => Err(s3_error!(
                InvalidArgument,
                "x-amz-server-side-encryption is given when the upload begins, not with its parts"
            )),
            (
                Some(sse::Sse::Customer { key_md5, salt }),
                Asked::Customer {
                    key,
                    key_md5: given,
                },
            ) => self.customer_data_key(ext, key, &given, key_md5, salt),
            (None | Some(sse::Sse::S3 { .. }), Asked::Customer { .. }) => Err(s3_error!(
                InvalidRequest,
                "the upload was not begun with a customer key"
            )),
            (None, Asked::Nothing) => Ok(None),
            (Some(sse::Sse::S3 { wrapped }), Asked::Nothing) => self.unwrapped(wrapped).await,
        }
    }
}

impl Gateway {
    /// What a PUT checks before it reads its body: the bucket, the
    /// preconditions and the Content-MD5 header; the entry-to-be.
    async fn put_checks(
        &self,
        req: &S3Request<PutObjectInput>,
    ) -> S3Result<(Bucket, Entry, Option<sse::Key>)> {
        let input = &req.input;
        let (b, user) = self.bucket_as(req, &input.bucket, Need::Write).await?;
        crate::unsupported::check("PutObject", &req.headers)?;
        // The current entry is read only for a conditional PUT.
        if input.if_match.is_some() || input.if_none_match.is_some() {
            let current = self.meta.entry(&b, &input.key).await.map_err(internal)?;
            Conditions {
                if_match: input.if_match.as_ref(),
                if_none_match: input.if_none_match.as_ref(),
                ..Conditions::default()
            }
            .check(current.as_ref(), false)?;
        }
        let mut entry = new_entry(
            input.content_type.as_ref().map(|c| c.to_string()),
            input.content_encoding.clone(),
            input.content_disposition.clone(),
            input.content_language.clone(),
            input.cache_control.clone(),
            input.metadata.clone(),
        );
        stamp(
            &mut entry,
            input.acl.as_ref(),
            user.as_ref(),
            input.expires.as_ref(),
        )?;
        if let Some(t) = &input.tagging {
            entry.tags = tags::from_header(t, Scope::Object)?;
        }
        if let Some(named) = acl::from_headers(&req.headers)? {
            entry.acl = acl::CUSTOM.to_string();
            entry.grants = self.resolve(named).await?;
        }
        check_acl_allowed(&b, &entry.acl, &entry.grants)?;
        lock_new(&b, &mut entry, &req.headers)?;
        let seal = self.seal_new(&req.headers, &req.extensions, &b).await?;
        entry.sse = seal.as_ref().map(|(_, s)| s.clone());
        Ok((b, entry, seal.map(|(k, _)| k)))
    }

    async fn upload_of(&self, b: &Bucket, key: &str, upload_id: &str) -> S3Result<Upload> {
        self.meta
            .upload(b, key, upload_id)
            .await
            .map_err(upload_error)
    }
}

/// A request's preconditions (RFC 9110 as S3 applies them).
#[derive(Debug, Default)]
struct Conditions<'a> {
    if_match: Option<&'a ETagCondition>,
    if_none_match: Option<&'a ETagCondition>,
    if_modified_since: Option<&'a Timestamp>,
    if_unmodified_since: Option<&'a Timestamp>,
}

fn seconds(t: &Timestamp) -> i64 {
    time::OffsetDateTime::from(t.clone()).unix_timestamp()
}

fn matches(c: &ETagCondition, e: Option<&Entry>) -> bool {
    match (c, e) {
        (ETagCondition::Any, Some(_)) => true,
        (ETagCondition::ETag(t), Some(e)) => t.value() == e.etag,
        (_, None) => false,
    }
}

impl Conditions<'_> {
    /// Whether the request may go on against `e` (the object, or none):
    /// a failed If-Match or If-Unmodified-Since is 412; for a read, a
    /// matched If-None-Match or an unmet If-Modified-Since is 304 (412
    /// for a write).
    fn check(&self, e: Option<&Entry>, read: bool) -> S3Result<()> {
        let mtime = e.map(|e| (e.mtime_ms / 1000) as i64);
        if !read && e.is_none() && self.if_match.is_some() {
            // A conditional write to an object that is not there.
            return Err(s3_error!(NoSuchKey));
        }
        if let Some(c) = self.if_match {
            if !matches(c, e) {
                return Err(s3_error!(PreconditionFailed));
            }
        } else if let (Some(t), Some(m)) = (self.if_unmodified_since, mtime)
            && m > seconds(t)
        {
            return Err(s3_error!(PreconditionFailed));
        }
        if let Some(c) = self.if_none_match {
            if matches(c, e) {
                return Err(match read {
                    true => not_modified(e),
                    false => s3_error!(PreconditionFailed),
                });
            }
        } else if let (Some(t), Some(m)) = (self.if_modified_since, mtime)
            && read
            && m <= seconds(t)
        {
            return Err(not_modified(e));
        }
        Ok(())
    }
}

/// Reads a refused request's body to its end (discarding it), so that the
/// connection stays in step for the next request — unless the client waits
/// for `100 Continue` before sending it: then the error goes at once and
/// the body is never asked for (hyper closes the connection after it).
async fn drain(body: Option<StreamingBlob>, headers: &hyper::http::HeaderMap) {
    use futures_util::StreamExt;
    let waits = headers
        .get(hyper::http::header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    if waits {
        return;
    }
    if let Some(mut b) = body {
        while let Some(Ok(_)) = b.next().await {}
    }
}

/// The bucket, key and version a copy reads.
fn copy_source(c: &CopySource) -> S3Result<(String, String, Option<String>)> {
    match c {
        CopySource::Bucket {
            bucket,
            key,
            version_id,
        } => Ok((
            bucket.to_string(),
            key.to_string(),
            version_id.as_ref().map(|v| v.to_string()),
        )),
        _ => Err(s3_error!(NotImplemented, "copies from access points")),
    }
}

/// A Content-MD5 header's digest.
fn content_md5(b64: &str) -> S3Result<[u8; 16]> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .ok()
        .and_then(|v| <[u8; 16]>::try_from(v).ok())
        .ok_or_else(|| s3_error!(InvalidDigest))
}

/// A listing's `encoding-type=url`: keys, prefixes, delimiter and markers
/// percent-encoded (all but unreserved characters and `/`), as AWS answers
/// and the SDKs decode.
#[derive(Debug, Clone, Copy)]
struct Encode(bool);

impl Encode {
    fn of(t: Option<&s3s::dto::EncodingType>) -> Encode {
        Encode(t.is_some_and(|t| t.as_str() == s3s::dto::EncodingType::URL))
    }

    fn one(self, v: String) -> String {
        if !self.0 {
            return v;
        }
        let mut out = String::with_capacity(v.len());
        for b in v.bytes() {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'/') {
                out.push(b as char);
            } else {
                out.push_str(&format!("%{b:02X}"));
            }
        }
        out
    }

    fn listing(
        self,
        mut objects: Vec<Object>,
        mut prefixes: Vec<CommonPrefix>,
    ) -> (Vec<Object>, Vec<CommonPrefix>) {
        for o in &mut objects {
            o.key = o.key.take().map(|k| self.one(k));
        }
        for p in &mut prefixes {
            p.prefix = p.prefix.take().map(|k| self.one(k));
        }
        (objects, prefixes)
    }
}

/// Continuation tokens: the last key or prefix listed, hex encoded.
fn encode_token(last: &str) -> String {
    last.bytes().map(|b| format!("{b:02x}")).collect()
}

pub(crate) fn decode_token(t: &str) -> S3Result<String> {
    let bad = || s3_error!(InvalidArgument, "the continuation token is not valid");
    if t.len() % 2 != 0 {
        return Err(bad());
    }
    let bytes: Option<Vec<u8>> = (0..t.len())
        .step_by(2)
        .map(|i| t.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok()))
        .collect();
    String::from_utf8(bytes.ok_or_else(bad)?).map_err(|_| bad())
}

/// The headers of an answer about a delete marker.
fn marker_headers(vid: Option<&str>) -> hyper::http::HeaderMap {
    let mut h = hyper::http::HeaderMap::new();
    h.insert(
        "x-amz-delete-marker",
        hyper::http::HeaderValue::from_static("true"),
    );
    if let Some(v) = vid.and_then(|v| hyper::http::HeaderValue::from_str(v).ok()) {
        h.insert("x-amz-version-id", v);
    }
    h
}

impl Gateway {
    /// Deletes `key` of `b`, or one version of it: whether a delete marker
    /// was made or removed, and the version id the answer names.
    async fn remove(
        &self,
        b: &Bucket,
        key: &str,
        vid: Option<&str>,
        guard: &DeleteGuard,
    ) -> S3Result<(bool, Option<String>)> {
        if guard.etag.is_some() || guard.size.is_some() || guard.mtime.is_some() {
            let current = match vid {
                Some(v) if versions::valid_vid(v) => self.meta.version(b, key, v).await,
                Some(_) => Ok(None),
                None => self.meta.entry(b, key).await,
            }
            .map_err(internal)?;
            // Under a delete marker the newest version is the marker: an
            // ETag it cannot match fails (as RGW answers).
            let current = match current {
                None if vid.is_none()
                    && !b.versioning.is_empty()
                    && self.meta.latest_is_marker(b, key).await.map_err(internal)? =>
                {
                    Some(Meta::delete_marker())
                }
                other => other,
            };
            // A guarded delete of what is not there succeeds and does
            // nothing (no delete marker either).
            match current {
                None => return Ok((false, None)),
                Some(e) if !guard.holds(&e) => return Err(s3_error!(PreconditionFailed)),
                Some(_) => {}
            }
        }
        if let Some(vid) = vid {
            if !versions::valid_vid(vid) {
                return Err(s3_error!(InvalidArgument, "Invalid version id specified"));
            }
            // Checked in the same step as the delete: a lock set on the
            // version meanwhile is seen.
            let locked = b.object_lock.is_some();
            let may_go = |e: &Entry| {
                if !locked {
                    return Ok(());
                }
                lock::may_delete(e.retention.as_ref(), e.legal_hold, now_ms(), guard.bypass)
                    .map_err(str::to_string)
            };
            let gone = match self
                .meta
                .freeing()
                .delete_version_if(b, key, vid, may_go)
                .await
            {
                Ok(gone) => gone,
                Err(MetaError::Locked(m)) => return Err(s3_error!(AccessDenied, "{m}")),
                Err(e) => return Err(internal(e)),
            };
            let marker = gone.is_some_and(|e| e.delete_marker);
            return Ok((marker, Some(vid.to_string())));
        }
        if b.versioning.is_empty() {
            self.meta.freeing().delete(b, key).await.map_err(internal)?;
            return Ok((false, None));
        }
        let m = self
            .meta
            .freeing()
            .commit(b, key, Meta::delete_marker())
            .await
            .map_err(internal)?;
        Ok((true, m.version_id))
    }
}

impl Gateway {
    /// Versions listed after `cursor`: ObjectVersion and DeleteMarkerEntry
    /// items, common prefixes, the last (key, version id) counted and
    /// whether more follow.
    #[allow(clippy::type_complexity)]
    async fn version_page(
        &self,
        b: &Bucket,
        prefix: &str,
        delimiter: Option<&str>,
        mut cursor: Vec<u8>,
        prev_key: Option<String>,
        max: usize,
    ) -> S3Result<(
        Vec<s3s::dto::ObjectVersion>,
        Vec<s3s::dto::DeleteMarkerEntry>,
        Vec<CommonPrefix>,
        Option<(String, String)>,
        bool,
    )> {
        let (mut objects, mut markers, mut prefixes) = (Vec::new(), Vec::new(), Vec::new());
        let mut last: Option<(String, String)> = None;
        let mut prev_key = prev_key;
        let delimiter = delimiter.filter(|d| !d.is_empty());
        loop {
            let (page, more) = self
                .meta
                .list_versions(b, &cursor, prefix, 1000)
                .await
                .map_err(internal)?;
            if page.is_empty() {
                return Ok((objects, markers, prefixes, last, false));
            }
            let mut jumped = false;
            for v in page {
                if objects.len() + markers.len() + prefixes.len() >= max {
                    return Ok((objects, markers, prefixes, last, true));
                }
                let rest = v.key.get(prefix.len()..).unwrap_or("");
                if let Some(d) = delimiter
                    && let Some(at) = rest.find(d)
                {
                    let cp = format!("{prefix}{}", &rest[..at + d.len()]);
                    // Past every version of every key under the prefix.
                    cursor = format!("\0{cp}").into_bytes();
                    cursor.push(0xFF);
                    last = Some((cp.clone(), String::new()));
                    prefixes.push(CommonPrefix { prefix: Some(cp) });
                    jumped = true;
                    break;
                }
                cursor = v.record_key().into_bytes();
                let latest = prev_key.as_deref() != Some(v.key.as_str());
                prev_key = Some(v.key.clone());
                last = Some((v.key.clone(), v.version_id.clone()));
                self.push_version(b, v, latest, &mut objects, &mut markers);
            }
            if !jumped && !more {
                return Ok((objects, markers, prefixes, last, false));
            }
        }
    }

    fn push_version(
        &self,
        b: &Bucket,
        v: Version,
        latest: bool,
        objects: &mut Vec<s3s::dto::ObjectVersion>,
        markers: &mut Vec<s3s::dto::DeleteMarkerEntry>,
    ) {
        if v.entry.delete_marker {
            markers.push(s3s::dto::DeleteMarkerEntry {
                is_latest: Some(latest),
                key: Some(v.key),
                last_modified: Some(timestamp(v.entry.mtime_ms)),
                owner: Some(self.owner(b)),
                version_id: Some(v.version_id),
            });
        } else {
            objects.push(s3s::dto::ObjectVersion {
                e_tag: Some(etag(&v.entry)),
                is_latest: Some(latest),
                key: Some(v.key),
                last_modified: Some(timestamp(v.entry.mtime_ms)),
                owner: Some(self.owner(b)),
                size: Some(v.entry.size as i64),
                storage_class: Some(s3s::dto::ObjectVersionStorageClass::from_static(
                    s3s::dto::ObjectVersionStorageClass::STANDARD,
                )),
                version_id: Some(v.version_id),
                ..s3s::dto::ObjectVersion::default()
            });
        }
    }
}

/// The checksum algorithms S3 names, as in `x-amz-checksum-<name>`.
const SUM_ALGORITHMS: [&str; 5] = ["crc32", "crc32c", "crc64nvme", "sha1", "sha256"];

/// The `x-amz-checksum-*` values a request gives, in its headers or in its
/// aws-chunked trailer (named by `x-amz-trailer`), checked against what
/// its body hashes to as it streams.
struct Sums {
    /// Each algorithm and where its expected value comes from.
    want: Vec<(&'static str, Given)>,
    trailer: Option<s3s::TrailingHeaders>,
    hasher: std::sync::Arc<std::sync::Mutex<s3s::checksum::ChecksumHasher>>,
    /// The Content-MD5 given.
    md5: Option<[u8; 16]>,
}

/// Where a checksum's expected value comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Given {
    Header(String),
    Trailer,
    /// Nowhere: computed to be kept (a part of an upload with a checksum
    /// algorithm that its request did not give).
    Compute,
}

impl Sums {
    /// The checksums `headers` (and the trailer) give; `also` (an
    /// algorithm, or empty) is computed even when not given.
    fn of(
        headers: &hyper::http::HeaderMap,
        trailer: Option<s3s::TrailingHeaders>,
        also: &str,
        md5: Option<&str>,
    ) -> S3Result<Sums> {
        let md5 = md5.map(content_md5).transpose()?;
        use s3s::crypto::{Checksum as _, Crc32, Crc32c, Crc64Nvme, Sha1, Sha256};
        let trailed: Vec<String> = headers
            .get_all("x-amz-trailer")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(|v| v.trim().to_ascii_lowercase())
            .collect();
        let mut want = Vec::new();
        let mut h = s3s::checksum::ChecksumHasher::default();
        for alg in SUM_ALGORITHMS {
            let name = format!("x-amz-checksum-{alg}");
            let given = match headers.get(&name) {
                Some(v) => Some(Given::Header(
                    v.to_str()
                        .map_err(|_| s3_error!(InvalidArgument, "{name} is not base64"))?
                        .trim()
                        .to_string(),
                )),
                None if trailed.contains(&name) => Some(Given::Trailer),
                None if alg == also => Some(Given::Compute),
                None => None,
            };
            let Some(given) = given else { continue };
            match alg {
                "crc32" => h.crc32 = Some(Crc32::new()),
                "crc32c" => h.crc32c = Some(Crc32c::new()),
                "crc64nvme" => h.crc64nvme = Some(Crc64Nvme::new()),
                "sha1" => h.sha1 = Some(Sha1::new()),
                _ => h.sha256 = Some(Sha256::new()),
            }
            want.push((alg, given));
        }
        Ok(Sums {
            want,
            trailer,
            hasher: std::sync::Arc::new(std::sync::Mutex::new(h)),
            md5,
        })
    }

    /// The data's checksums once its body has passed, if its MD5 and each
    /// checksum match what the request gave.
    fn check(&self, md5: &[u8; 16]) -> crate::meta::Result<Checksums> {
        md5_check(self.md5)(md5)?;
        self.verify()
    }

    /// `body`, hashed as it passes.
    fn observe(
        &self,
        body: StreamingBlob,
    ) -> impl futures_util::Stream<Item = Result<bytes::Bytes, s3s::StdError>> + Unpin + use<> {
        use futures_util::StreamExt;
        let h = self.hasher.clone();
        let active = !self.want.is_empty();
        body.inspect(move |c| {
            if let (true, Ok(b)) = (active, c)
                && let Ok(mut h) = h.lock()
            {
                h.update(b);
            }
        })
    }

    /// The checksums, once the body has passed: each must match what was given.
    fn verify(&self) -> crate::meta::Result<Checksums> {
        let mut out = Checksums::new();
        if self.want.is_empty() {
            return Ok(out);
        }
        let got = match self.hasher.lock() {
            Ok(mut h) => std::mem::take(&mut *h).finalize(),
            Err(_) => return Err(MetaError::Invalid("a checksum hasher failed".into())),
        };
        for (alg, given) in &self.want {
            let computed = match *alg {
                "crc32" => got.checksum_crc32.clone(),
                "crc32c" => got.checksum_crc32c.clone(),
                "crc64nvme" => got.checksum_crc64nvme.clone(),
                "sha1" => got.checksum_sha1.clone(),
                _ => got.checksum_sha256.clone(),
            }
            .unwrap_or_default();
            let name = format!("x-amz-checksum-{alg}");
            let given = match given {
                Given::Compute => {
                    out.insert(alg.to_string(), computed);
                    continue;
                }
                Given::Header(v) => Some(v.clone()),
                Given::Trailer => self.trailer.as_ref().and_then(|t| {
                    t.read(|h| {
                        h.get(&name)
                            .and_then(|v| v.to_str().ok())
                            .map(|v| v.trim().to_string())
                    })
                    .flatten()
                }),
            };
            match given {
                Some(v) if v == computed => {
                    out.insert(alg.to_string(), computed);
                }
                Some(_) => return Err(MetaError::BadChecksum(alg.to_uppercase())),
                None => {
                    return Err(MetaError::Invalid(format!("the trailer gave no {name}")));
                }
            }
        }
        Ok(out)
    }
}

/// Whether a read asked for the object's checksums (`x-amz-checksum-mode: ENABLED`).
fn asked_sums(mode: Option<&s3s::dto::ChecksumMode>) -> bool {
    mode.is_some_and(|m| m.as_str() == s3s::dto::ChecksumMode::ENABLED)
}

/// A delete's preconditions: the object's ETag (`Some(None)`: any),
/// size and modification time.
#[derive(Debug, Default)]
struct DeleteGuard {
    etag: Option<Option<String>>,
    size: Option<i64>,
    mtime: Option<Timestamp>,
    /// The request bypasses governance retention, and may.
    bypass: bool,
}

impl DeleteGuard {
    fn holds(&self, e: &Entry) -> bool {
        let etag = match &self.etag {
            Some(Some(t)) => t.trim_matches('"') == e.etag,
            _ => true,
        };
        let size = self.size.is_none_or(|s| s == e.size as i64);
        let mtime = self
            .mtime
            .as_ref()
            .is_none_or(|t| seconds(t) == (e.mtime_ms / 1000) as i64);
        etag && size && mtime
    }
}

/// The canned ACLs the gateway keeps (AWS's others need grants to named
/// users or services).
const CANNED: [&str; 4] = [
    "private",
    "public-read",
    "public-read-write",
    "authenticated-read",
];

/// An object's canned ACL: a bucket's, or one granting the bucket's owner.
fn canned_object(acl: &str) -> S3Result<()> {
    match acl {
        "bucket-owner-read" | "bucket-owner-full-control" => Ok(()),
        other => canned(other),
    }
}

fn canned(acl: &str) -> S3Result<()> {
    if CANNED.contains(&acl) {
        Ok(())
    } else {
        Err(s3_error!(NotImplemented, "canned ACL {acl}"))
    }
}

/// Whether canned ACL `acl` lets a non-owner read (`signed`: the request
/// is signed by a user).
/// Refuses setting canned ACL `acl` with `grants` on bucket `b` (or an
/// object in it) when they are public and its public access block blocks
/// public ACLs.
fn check_acl_allowed(b: &Bucket, acl: &str, grants: &[acl::AclGrant]) -> S3Result<()> {
    if acl::is_public(acl, grants) && b.public_access_block.is_some_and(|p| p.block_public_acls) {
        return Err(s3_error!(
            AccessDenied,
            "the bucket's public access block refuses a public ACL ({acl}, or a grant to a group)"
        ));
    }
    Ok(())
}

fn owner_of(uid: &str, name: &str) -> Owner {
    Owner {
        display_name: Some(if name.is_empty() { uid } else { name }.to_string()),
        id: Some(uid.to_string()),
    }
}

/// The grants canned ACL `acl` stands for: the groups' first, then the
/// owner's full control (as AWS lists them); an object's `bucket-owner-*`
/// ACLs name `bucket_owner` too.
fn grants(acl: &str, owner: &Owner, bucket_owner: Option<&Owner>) -> Vec<s3s::dto::Grant> {
    use s3s::dto::{Grant, Grantee, Permission, Type};
    if acl == acl::CUSTOM {
        return Vec::new();
    }
    let group = |uri: &str, p: &'static str| Grant {
        grantee: Some(Grantee {
            display_name: None,
            email_address: None,
            id: None,
            type_: Type::from_static(Type::GROUP),
            uri: Some(uri.to_string()),
        }),
        permission: Some(Permission::from_static(p)),
    };
    const ALL: &str = "http://acs.amazonaws.com/groups/global/AllUsers";
    const AUTH: &str = "http://acs.amazonaws.com/groups/global/AuthenticatedUsers";
    let mut out = match acl {
        "public-read" => vec![group(ALL, Permission::READ)],
        "public-read-write" => vec![group(ALL, Permission::READ), group(ALL, Permission::WRITE)],
        "authenticated-read" => vec![group(AUTH, Permission::READ)],
        _ => Vec::new(),
    };
    let user = |o: &Owner, p: &'static str| Grant {
        grantee: Some(Grantee {
            display_name: o.display_name.clone(),
            email_address: None,
            id: o.id.clone(),
            type_: Type::from_static(Type::CANONICAL_USER),
            uri: None,
        }),
        permission: Some(Permission::from_static(p)),
    };
    out.push(user(owner, Permission::FULL_CONTROL));
    if let Some(bo) = bucket_owner.filter(|bo| bo.id != owner.id) {
        match acl {
            "bucket-owner-read" => out.push(user(bo, Permission::READ)),
            "bucket-owner-full-control" => out.push(user(bo, Permission::FULL_CONTROL)),
            _ => {}
        }
    }
    out
}

/// The ACL a PutBucketAcl or PutObjectAcl asks for: its `x-amz-acl`, its
/// `x-amz-grant-*` headers (`named`), or a policy whose grants are a
/// canned ACL's or any others; the canned ACL (`custom`: exactly the
/// grants, the owner's full control among them only if given) and the
/// grants to look up.
fn wanted_acl(
    header: Option<&str>,
    policy: Option<&s3s::dto::AccessControlPolicy>,
    named: Option<Vec<(acl::Named, Perm)>>,
    owner: &Owner,
    object: bool,
) -> S3Result<(String, Vec<(acl::Named, Perm)>)> {
    if let Some(a) = header {
        if named.is_some() {
            return Err(s3_error!(
                InvalidRequest,
                "give x-amz-acl or x-amz-grant-* headers, not both"
            ));
        }
        match object {
            true => canned_object(a)?,
            false => canned(a)?,
        }
        return Ok((a.to_string(), Vec::new()));
    }
    if let Some(named) = named {
        return Ok((acl::CUSTOM.to_string(), named));
    }
    let Some(p) = policy else {
        return Err(s3_error!(
            MalformedACLError,
            "give x-amz-acl, x-amz-grant-* headers or an AccessControlPolicy"
        ));
    };
    let key = |g: &s3s::dto::Grant| {
        let ge = g.grantee.as_ref();
        (
            ge.and_then(|x| x.uri.clone()),
            ge.and_then(|x| x.id.clone()),
            g.permission.as_ref().map(|p| p.as_str().to_string()),
        )
    };
    let mut want: Vec<_> = p.grants.iter().flatten().map(key).collect();
    want.sort();
    for acl in CANNED {
        let mut have: Vec<_> = grants(acl, owner, None).iter().map(key).collect();
        have.sort();
        if have == want {
            return Ok((acl.to_string(), Vec::new()));
        }
    }
    let mut named = Vec::new();
    for g in p.grants.iter().flatten() {
        let perm = g
            .permission
            .as_ref()
            .and_then(|p| Perm::parse(p.as_str()))
            .ok_or_else(|| s3_error!(MalformedACLError, "a grant without a valid Permission"))?;
        let ge = g
            .grantee
            .as_ref()
            .ok_or_else(|| s3_error!(MalformedACLError, "a grant without a Grantee"))?;
        let who = match (&ge.id, &ge.email_address, &ge.uri) {
            (Some(id), _, _) => acl::Named::Id(id.clone()),
            (None, Some(email), _) => acl::Named::Email(email.clone()),
            (None, None, Some(uri)) => acl::Named::Uri(uri.clone()),
            _ => return Err(s3_error!(MalformedACLError, "a Grantee naming nobody")),
        };
        named.push((who, perm));
    }
    Ok((acl::CUSTOM.to_string(), named))
}

/// Whether bucket `b`'s ACL lets `user` do `perm` (a public access block
/// that ignores public ACLs taken into account).
fn bucket_allows(b: &Bucket, user: Option<&User>, perm: Perm) -> bool {
    acl::allows(
        &b.acl,
        &b.grants,
        ignores_public(b),
        user.map(|u| u.uid.as_str()),
        perm,
    )
}

/// Whether object `e`'s ACL (in bucket `b`) lets `user` do `perm`.
fn object_allows(b: &Bucket, e: &Entry, user: Option<&User>, perm: Perm) -> bool {
    let bucket_owner = user.is_some_and(|u| u.uid == b.owner);
    match e.acl.as_str() {
        "bucket-owner-full-control" if bucket_owner => return true,
        "bucket-owner-read" if bucket_owner && perm == Perm::Read => return true,
        _ => {}
    }
    acl::allows(
        &e.acl,
        &e.grants,
        ignores_public(b),
        user.map(|u| u.uid.as_str()),
        perm,
    )
}

fn ignores_public(b: &Bucket) -> bool {
    b.public_access_block.is_some_and(|p| p.ignore_public_acls)
}

/// The request's own bucket (and object) that its bucket's policy
/// allowed in the access step (`lib.rs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PolicyAllows {
    pub bucket: String,
    pub key: Option<String>,
}

/// Where a request came from (set on each request by `lib.rs`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Origin {
    pub peer: std::net::SocketAddr,
    pub tls: bool,
}

/// Whether a bucket policy allowed `req` on `bucket` (and `key`: an
/// object's own request; `None`: the bucket's).
fn policy_allows<T>(req: &S3Request<T>, bucket: &str, key: Option<&str>) -> bool {
    req.extensions
        .get::<PolicyAllows>()
        .is_some_and(|a| a.bucket == bucket && (key.is_none() || a.key.as_deref() == key))
}

/// The condition keys of a request: who and from where, and what it asks.
pub(crate) fn policy_context(
    uri: &hyper::http::Uri,
    headers: &hyper::http::HeaderMap,
    origin: Option<&Origin>,
    user: Option<&User>,
) -> BTreeMap<String, String> {
    let mut ctx = BTreeMap::new();
    if let Some(o) = origin {
        ctx.insert("aws:sourceip".into(), o.peer.ip().to_string());
        ctx.insert("aws:securetransport".into(), o.tls.to_string());
    }
    if let Some(u) = user {
        ctx.insert("aws:username".into(), u.uid.clone());
        ctx.insert("aws:userid".into(), u.uid.clone());
    }
    for (h, k) in [("referer", "aws:referer"), ("user-agent", "aws:useragent")] {
        if let Some(v) = headers.get(h).and_then(|v| v.to_str().ok()) {
            ctx.insert(k.into(), v.to_string());
        }
    }
    for (h, v) in headers {
        let (name, Ok(v)) = (h.as_str(), v.to_str()) else {
            continue;
        };
        if !name.starts_with("x-amz-") {
            continue;
        }
        let v = match name {
            // `<bucket>/<key>`, decoded, as a policy names it.
            "x-amz-copy-source" => {
                let path = v.split('?').next().unwrap_or("");
                let path = path.strip_prefix('/').unwrap_or(path);
                crate::tags::percent_decode(&path.replace('+', "%2B")).unwrap_or_default()
            }
            "x-amz-tagging" => {
                for (t, tv) in query_pairs(v) {
                    ctx.insert(
                        format!("s3:requestobjecttag/{}", t.to_ascii_lowercase()),
                        tv,
                    );
                }
                v.to_string()
            }
            _ => v.to_string(),
        };
        ctx.insert(format!("s3:{name}"), v);
    }
    for (k, v) in query_pairs(uri.query().unwrap_or("")) {
        let key = match k.as_str() {
            "prefix" => "s3:prefix",
            "delimiter" => "s3:delimiter",
            "max-keys" => "s3:max-keys",
            "versionId" => "s3:versionid",
            _ => continue,
        };
        ctx.insert(key.into(), v);
    }
    ctx
}

/// A query string's parameters, decoded.
pub(crate) fn query_pairs(q: &str) -> Vec<(String, String)> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .filter_map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            Some((
                crate::tags::percent_decode(k)?,
                crate::tags::percent_decode(v)?,
            ))
        })
        .collect()
}

/// What `b`'s policy says of `user` doing `action` to it (or to its
/// object `key`, version `vid`), with the request's condition keys `ctx`;
/// the object's tags are read when a condition asks for them.
pub(crate) async fn decide(
    meta: &Meta,
    b: &Bucket,
    user: Option<&User>,
    action: &str,
    key: Option<&str>,
    vid: Option<&str>,
    mut ctx: BTreeMap<String, String>,
) -> S3Result<Decision> {
    if b.policy.is_empty() {
        return Ok(Decision::Default);
    }
    let policy = crate::policy::Policy::cached(&b.policy, &b.name)?;
    if let Some(k) = key
        && policy.needs_object_tags()
    {
        let e = match vid {
            Some(v) if versions::valid_vid(v) => meta.version(b, k, v).await.map_err(internal)?,
            Some(_) => None,
            None => meta.entry(b, k).await.map_err(internal)?,
        };
        for (t, v) in e.map(|e| e.tags).unwrap_or_default() {
            ctx.insert(
                format!("s3:existingobjecttag/{}", t.to_ascii_lowercase()),
                v,
            );
        }
    }
    let resource = match key {
        Some(k) => format!("arn:aws:s3:::{}/{k}", b.name),
        None => format!("arn:aws:s3:::{}", b.name),
    };
    let decision = policy.evaluate(&crate::policy::Request {
        user: user.map(|u| u.uid.as_str()),
        action,
        resource,
        context: ctx,
    });
    // A public policy grants nothing to others when the bucket's public
    // access block restricts public buckets (its denials still hold).
    let restricted = b
        .public_access_block
        .is_some_and(|p| p.restrict_public_buckets)
        && policy.is_public()
        && user.is_none_or(|u| u.uid != b.owner);
    Ok(match decision {
        Decision::Allow if restricted => Decision::Default,
        d => d,
    })
}

/// Whether `user` may change an object's ACL or tags: the bucket's owner
/// or the object's (a signed writer) may, or whom a policy `granted` it.
fn may_change(b: &Bucket, user: Option<&User>, e: &Entry, granted: bool) -> S3Result<()> {
    let uid = user.map(|u| u.uid.as_str());
    if granted || uid == Some(b.owner.as_str()) || (uid.is_some() && uid == Some(e.owner.as_str()))
    {
        Ok(())
    } else {
        Err(s3_error!(AccessDenied))
    }
}

/// Gives a new object in bucket `b` the retention and legal hold its
/// request's `x-amz-object-lock-*` headers ask for, else the bucket's
/// default retention; a bucket without object lock refuses them.
fn lock_new(b: &Bucket, e: &mut Entry, headers: &hyper::http::HeaderMap) -> S3Result<()> {
    let h = |n: &str| headers.get(n).and_then(|v| v.to_str().ok());
    let (mode, until, hold) = (
        h("x-amz-object-lock-mode"),
        h("x-amz-object-lock-retain-until-date"),
        h("x-amz-object-lock-legal-hold"),
    );
    let Some(cfg) = b.object_lock else {
        if mode.is_some() || until.is_some() || hold.is_some_and(|v| v != "OFF") {
            return Err(s3_error!(
                InvalidRequest,
                "Bucket is missing Object Lock Configuration"
            ));
        }
        return Ok(());
    };
    let now = now_ms();
    e.retention = match (mode, until) {
        (None, None) => cfg.default_retention(now),
        (Some(m), Some(u)) => Some(retention(m, parse_date(u)?, now)?),
        _ => {
            return Err(s3_error!(
                InvalidArgument,
                "x-amz-object-lock-mode and x-amz-object-lock-retain-until-date go together"
            ));
        }
    };
    e.legal_hold = match hold {
        None | Some("OFF") => false,
        Some("ON") => true,
        Some(v) => {
            return Err(s3_error!(
                InvalidArgument,
                "x-amz-object-lock-legal-hold is ON or OFF, not {v:?}"
            ));
        }
    };
    Ok(())
}

/// A 404 with an error code s3s does not name.
fn not_found(code: &'static str, msg: String) -> S3Error {
    let mut e = S3Error::with_message(S3ErrorCode::Custom(code.into()), msg);
    e.set_status_code(hyper::http::StatusCode::NOT_FOUND);
    e
}

/// Refuses a retention or legal-hold call on a bucket without object lock.
fn locked_bucket(b: &Bucket) -> S3Result<()> {
    if b.object_lock.is_none() {
        return Err(s3_error!(
            InvalidRequest,
            "Bucket is missing Object Lock Configuration"
        ));
    }
    Ok(())
}

/// Whether a request bypasses governance retention: it asks to
/// (`x-amz-bypass-governance-retention: true`) and its signer is the
/// bucket's owner.
fn bypasses(headers: &hyper::http::HeaderMap, b: &Bucket, user: Option<&User>) -> bool {
    headers
        .get("x-amz-bypass-governance-retention")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("true"))
        && user.is_some_and(|u| u.uid == b.owner)
}

/// A retention of mode `mode` until `until_ms`, which must be later than
/// `now`.
fn retention(mode: &str, until_ms: u64, now: u64) -> S3Result<lock::Retention> {
    let mode = lock::Mode::parse(mode)
        .ok_or_else(|| s3_error!(InvalidArgument, "Unknown wormMode directive: {mode:?}"))?;
    if until_ms <= now {
        return Err(s3_error!(
            InvalidArgument,
            "The retain until date must be in the future"
        ));
    }
    Ok(lock::Retention { mode, until_ms })
}

/// An ISO 8601 date (`2030-01-01T00:00:00Z`) as ms since the Unix epoch.
pub(crate) fn parse_date(s: &str) -> S3Result<u64> {
    let t = time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
        .map_err(|_| s3_error!(InvalidArgument, "{s:?} is not an ISO 8601 date"))?;
    Ok((t.unix_timestamp_nanos() / 1_000_000).max(0) as u64)
}

fn ms_of(t: &Timestamp) -> u64 {
    (time::OffsetDateTime::from(t.clone()).unix_timestamp_nanos() / 1_000_000).max(0) as u64
}

/// Gives a new object its canned ACL, writer and Expires.
fn stamp(
    e: &mut Entry,
    acl: Option<&s3s::dto::ObjectCannedACL>,
    user: Option<&User>,
    expires: Option<&Timestamp>,
) -> S3Result<()> {
    if let Some(a) = acl {
        canned_object(a.as_str())?;
        e.acl = a.as_str().to_string();
    }
    e.owner = user.map(|u| u.uid.clone()).unwrap_or_default();
    if let Some(t) = expires {
        let ms = time::OffsetDateTime::from(t.clone())
            .unix_timestamp()
            .max(0) as u64
            * 1000;
        e.headers.insert("expires".to_string(), ms.to_string());
    }
    Ok(())
}

/// A 304, with the ETag a cache revalidates by.
fn not_modified(e: Option<&Entry>) -> S3Error {
    let mut err = s3_error!(NotModified);
    if let Some(v) =
        e.and_then(|e| hyper::http::HeaderValue::from_str(&format!("\"{}\"", e.etag)).ok())
    {
        let mut h = hyper::http::HeaderMap::new();
        h.insert("etag", v);
        err.set_headers(h);
    }
    err
}

/// The bytes of part `n` of the object (a multipart upload's part; an
/// object written whole is its own part 1) and its count of parts (none
/// for an object written whole).
#[allow(clippy::type_complexity)]
fn part_range(e: &Entry, n: Option<i32>) -> S3Result<Option<(std::ops::Range<u64>, Option<i32>)>> {
    let Some(n) = n else { return Ok(None) };
    let multipart = e.etag.contains('-');
    let count = if multipart { e.parts.len() } else { 1 };
    if n < 1 || n as usize > count {
        return Err(s3_error!(
            InvalidPart,
            "the object has {count} parts, not a part {n}"
        ));
    }
    if !multipart {
        return Ok(Some((0..e.size, None)));
    }
    let start: u64 = e.parts[..n as usize - 1].iter().map(|p| p.size).sum();
    let len = e.parts[n as usize - 1].size;
    Ok(Some((start..start + len, Some(count as i32))))
}

/// An UploadPartCopy's `bytes=FIRST-LAST` range, wholly inside an object
/// of `size` bytes (copies, unlike reads, are never clamped).
fn copy_range(r: &str, size: u64) -> Option<std::ops::Range<u64>> {
    let (a, b) = r.trim().strip_prefix("bytes=")?.split_once('-')?;
    let (first, last): (u64, u64) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
    (first <= last && last < size).then(|| first..last + 1)
}

/// The value of upload algorithm `alg` (lower case) among a request's
/// crc32, crc32c, crc64nvme, sha1 and sha256 fields.
fn pick_sum(alg: &str, fields: [&Option<String>; 5]) -> Option<String> {
    let at = SUM_ALGORITHMS.iter().position(|a| *a == alg)?;
    fields[at].clone()
}

/// A multipart object's checksum type, as answers name it.
fn sum_type(e: &Entry) -> Option<s3s::dto::ChecksumType> {
    (!e.checksum_type.is_empty()).then(|| s3s::dto::ChecksumType::from(e.checksum_type.clone()))
}

/// The checksums a read answers: a part's own (a multipart object read by
/// part number), else the object's when asked for.
fn answered_sums(
    e: &Entry,
    part: Option<i32>,
    mode: Option<&s3s::dto::ChecksumMode>,
) -> Option<Checksums> {
    if let Some(n) = part {
        let alg = e.checksums.keys().next()?;
        let sum = e
            .parts
            .get(usize::try_from(n).ok()?.checked_sub(1)?)?
            .checksum
            .clone()?;
        return Some(Checksums::from([(alg.clone(), sum)]));
    }
    asked_sums(mode).then(|| e.checksums.clone())
}
