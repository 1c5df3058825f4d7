//! What the gateway keeps in the cluster, all in one replicated pool:
//!
//! - `users`: omap `key.<access key>` and `uid.<uid>` → a user's JSON
//!   record (uid, display name, keys);
//! - `buckets`: omap `<bucket name>` → the bucket's record (owner, id,
//!   creation time, canned ACL);
//! - `index.<bucket id>`: omap `<object key>` → the object's entry (size,
//!   ETag, modification time, content headers, user metadata, and the
//!   parts that hold its bytes);
//! - `data.<bucket id>.<tag>.<n>`: an object's bytes in stripes of
//!   [`STRIPE`] bytes, `n` from 0, a fresh tag per write: a request holds
//!   at most a stripe in memory whatever the object's size.
//!
//! A PUT records its stripes' prefix (`pending.<bucket id>.<shard>`, the
//! shard of its index entry), writes them, then its index entry; the
//! stripes an entry stops pointing at (replaced, deleted) are recorded
//! too, and a sweep removes recorded stripes no entry points at once the
//! record is old enough (a reader that found the
//! old entry may still be streaming them). A reader that finds an entry
//! finds its data; a write that dies before its entry, or loses a race to
//! a concurrent one, leaves unlisted stripes the sweep removes, never a
//! listed half-written object.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use shoal_client::{Error as ClientError, Op, Pool};

use crate::cache::{CONTROL, Cache, Changed, NOTIFY_TIMEOUT};

/// Errors of the gateway's records.
#[derive(Debug, thiserror::Error)]
pub enum MetaError {
    /// The cluster failed the operation.
    #[error("{0}")]
    Cluster(#[from] ClientError),
    /// A record in the cluster does not decode.
    #[error("record {what} is damaged: {why}")]
    Damaged {
        /// Which record.
        what: String,
        /// Why.
        why: String,
    },
    /// A user, bucket or key that exists already.
    #[error("{0} already exists")]
    Exists(String),
    /// A user, bucket or key that does not exist.
    #[error("{0} does not exist")]
    Missing(String),
    /// A bucket that still holds objects.
    #[error("bucket {0} is not empty")]
    NotEmpty(String),
    /// An object version its lock keeps (`lock.rs`).
    #[error("{0}")]
    Locked(String),
    /// Bad input.
    #[error("{0}")]
    Invalid(String),
    /// A body larger than allowed.
    #[error("larger than {0} bytes")]
    TooLarge(u64),
    /// The data does not match its Content-MD5.
    #[error("the data does not match its Content-MD5")]
    BadDigest,
    /// The data does not match a checksum it came with.
    #[error("the {0} you specified did not match the calculated checksum")]
    BadChecksum(String),
    /// A complete names parts out of order.
    #[error("the parts are not in ascending order")]
    Order,
    /// A complete names a part not uploaded, or with another ETag.
    #[error("part {0} was not uploaded with that ETag")]
    BadPart(u32),
    /// An object key S3 does not allow.
    #[error("{0}")]
    BadKey(String),
    /// A part but the last is smaller than 5 MiB.
    #[error("part {0} is smaller than 5 MiB and not the last")]
    PartTooSmall(u32),
}

/// Result of the gateway's record operations.
pub type Result<T> = std::result::Result<T, MetaError>;

/// An access key and its secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccessKey {
    /// The access key id.
    pub access_key: String,
    /// The secret.
    pub secret_key: String,
}

/// A gateway user.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct User {
    /// The user's id.
    pub uid: String,
    /// The name shown as the owner of its buckets.
    pub display_name: String,
    /// Its keys.
    pub keys: Vec<AccessKey>,
    /// Its e-mail address (empty: none), which ACL grants may name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub email: String,
}

/// A bucket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bucket {
    /// Its name.
    pub name: String,
    /// Its owner's uid.
    pub owner: String,
    /// The id its index and data objects are named from.
    pub id: String,
    /// Creation time, ms since the Unix epoch.
    pub created_ms: u64,
    /// Canned ACL: private, public-read or public-read-write.
    pub acl: String,
    /// Index shards: the index is the omaps of `index.<id>.<n>` (of
    /// `index.<id>` with one), each key in shard crc32c(key) mod `shards`.
    #[serde(default = "one_shard")]
    pub shards: u32,
    /// Its owner's display name when it was made.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub owner_name: String,
    /// The location constraint it was created with (empty: none).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub location: String,
    /// Versioning: empty (never turned on), `Enabled` or `Suspended`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub versioning: String,
    /// Objects written before versioning was turned on are recorded as
    /// their null versions (see `versions.rs`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub versions_recorded: bool,
    /// Its tags (`tags.rs`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: crate::tags::Tags,
    /// Its policy document as set (empty: none; `policy.rs`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub policy: String,
    /// Grants besides its canned ACL's (`acl.rs`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub grants: Vec<crate::acl::AclGrant>,
    /// Its object lock (none: off; `lock.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_lock: Option<crate::lock::LockConfig>,
    /// Its public access block (none: public ACLs and policies count).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_access_block: Option<PublicAccessBlock>,
    /// Its default encryption: `AES256` (SSE-S3 for every object written
    /// without encryption headers) or empty (none; `sse.rs`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub encryption: String,
}

/// What a bucket's public access block turns off, as AWS defines it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublicAccessBlock {
    /// A request setting a public ACL (on the bucket or an object) is
    /// refused.
    pub block_public_acls: bool,
    /// Public ACLs grant nothing.
    pub ignore_public_acls: bool,
    /// A public policy cannot be set.
    pub block_public_policy: bool,
    /// A public policy grants nothing to anyone but the owner.
    pub restrict_public_buckets: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn one_shard() -> u32 {
    1
}

/// Index shards of a new bucket.
pub const INDEX_SHARDS: u32 = 8;

/// An object's index entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Entry {
    /// Size in bytes.
    pub size: u64,
    /// The ETag (hex MD5 of the data, without quotes).
    pub etag: String,
    /// Last modification, ms since the Unix epoch.
    pub mtime_ms: u64,
    /// The runs of stripes holding the bytes, in order.
    pub parts: Vec<Part>,
    /// Content-Type and the other standard headers given at upload.
    pub headers: BTreeMap<String, String>,
    /// User metadata (`x-amz-meta-*`).
    pub meta: BTreeMap<String, String>,
    /// Its version id in a versioned bucket (`null` for the null version);
    /// none for an object written while the bucket was never versioned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version_id: Option<String>,
    /// Checksums given at upload and verified (`crc32`, `sha256`, ... →
    /// base64), answered when a reader asks for them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub checksums: Checksums,
    /// Who wrote it (uid; empty: anonymous).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub owner: String,
    /// Its canned ACL (empty: private).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub acl: String,
    /// A multipart object's checksum type (COMPOSITE or FULL_OBJECT).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub checksum_type: String,
    /// A delete marker (a version without data).
    #[serde(default, skip_serializing_if = "is_false")]
    pub delete_marker: bool,
    /// Its tags (`tags.rs`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: crate::tags::Tags,
    /// Grants besides its canned ACL's (`acl.rs`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub grants: Vec<crate::acl::AclGrant>,
    /// Its retention (`lock.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention: Option<crate::lock::Retention>,
    /// Under a legal hold (`lock.rs`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub legal_hold: bool,
    /// How its data is encrypted (`sse.rs`); none: stored as sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sse: Option<crate::sse::Sse>,
}

/// One run of stripes: objects `<prefix>.<n>` holding `size` bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Part {
    /// The stripes' name without their number.
    pub prefix: String,
    /// Bytes in the run.
    pub size: u64,
    /// A multipart object's part: its checksum in the upload's algorithm.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum: Option<String>,
}

impl Part {
    /// The stripes of the run, with the bytes each holds.
    pub fn stripes(&self) -> impl Iterator<Item = (String, u64)> + '_ {
        let n = self.size.div_ceil(STRIPE);
        (0..n).map(move |i| {
            let len = (self.size - i * STRIPE).min(STRIPE);
            (format!("{}.{i}", self.prefix), len)
        })
    }
}

/// Checksums by algorithm (`crc32`, `crc32c`, `crc64nvme`, `sha1`,
/// `sha256`), base64 as S3 writes them.
pub type Checksums = BTreeMap<String, String>;

/// A put's check that refuses data not matching `want`, its Content-MD5.
pub fn md5_check(want: Option<[u8; 16]>) -> impl FnOnce(&[u8; 16]) -> Result<Checksums> {
    move |md5| match want {
        Some(w) if w != *md5 => Err(MetaError::BadDigest),
        _ => Ok(Checksums::new()),
    }
}

/// Bytes per data object.
pub const STRIPE: u64 = 4 << 20;

const USERS: &str = "users";
const BUCKETS: &str = "buckets";
/// Omap entries read per round trip when listing.
const PAGE: u32 = 1000;

pub(crate) fn decode<T: serde::de::DeserializeOwned>(what: &str, b: &[u8]) -> Result<T> {
    serde_json::from_slice(b).map_err(|e| MetaError::Damaged {
        what: what.to_string(),
        why: e.to_string(),
    })
}

pub(crate) fn encode<T: Serialize>(v: &T) -> Result<Vec<u8>> {
    serde_json::to_vec(v).map_err(|e| MetaError::Invalid(e.to_string()))
}

/// Random lowercase hex of `n` bytes.
pub fn random_hex(n: usize) -> String {
    let mut b = vec![0u8; n];
    if getrandom::fill(&mut b).is_err() {
        // No randomness: fall back to the clock (names stay unique enough
        // for data objects; keys made this way are refused below).
        let t = now_ms().to_le_bytes();
        for (i, x) in b.iter_mut().enumerate() {
            *x = t[i % t.len()] ^ (i as u8);
        }
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The time now, ms since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// The gateway's records in pool `pool`.
#[derive(Debug, Clone)]
pub struct Meta {
    pool: Pool,
    cache: Option<Arc<Cache>>,
}

impl Meta {
    /// Records kept in `pool`, read from the cluster every time.
    pub fn new(pool: Pool) -> Meta {
        Meta { pool, cache: None }
    }

    /// Records kept in `pool`, with user and bucket records cached and
    /// kept coherent by a watch on [`CONTROL`] (see `cache.rs`): what a
    /// gateway daemon uses. The watch lives as long as the runtime.
    pub async fn cached(pool: Pool) -> Result<Meta> {
        pool.create(CONTROL, false).await?;
        let mut watch = pool.watch(CONTROL).await?;
        let cache = Arc::new(Cache::new(watch.health()));
        let c = Arc::clone(&cache);
        tokio::spawn(async move {
            while let Some(ev) = watch.next().await {
                match serde_json::from_slice::<Changed>(&ev.payload) {
                    Ok(changed) => c.invalidate(&changed),
                    // Not understood: forget everything rather than guess.
                    Err(_) => c.clear(),
                }
                ev.ack(Bytes::new()).await;
            }
            c.end();
        });
        Ok(Meta {
            pool,
            cache: Some(cache),
        })
    }

    /// The same records, changed even on a full cluster (the pool's
    /// FULL_TRY): for deletes, which must work for anyone to make room,
    /// and the sweep that removes what they leave.
    pub fn freeing(&self) -> Meta {
        Meta {
            pool: self.pool.full_try(),
            cache: self.cache.clone(),
        }
    }

    /// The pool.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// The record cache, if this handle keeps one.
    pub fn cache(&self) -> Option<&Cache> {
        self.cache.as_deref()
    }

    pub(crate) async fn get_one(&self, oid: &str, key: &str) -> Result<Option<Bytes>> {
        let cache = self
            .cache
            .as_ref()
            .filter(|_| oid == USERS || oid == BUCKETS);
        if let Some(v) = cache.and_then(|c| c.get(oid, key)) {
            return Ok(Some(v));
        }
        let generation = cache.map(|c| c.generation());
        let v = match self.pool.omap_get_vals_by_keys(oid, &[key]).await {
            Ok(mut m) => m.remove(key.as_bytes()),
            Err(ClientError::NotFound(_)) => None,
            Err(e) => return Err(e.into()),
        };
        if let (Some(c), Some(g), Some(v)) = (cache, generation, &v) {
            c.fill(oid, key, v.clone(), g);
        }
        Ok(v)
    }

    /// Tells every gateway that `keys` of record object `oid` changed (they
    /// are in the cluster already): each drops them before it answers. A
    /// gateway that does not answer in time has a watch that lapsed (it
    /// then serves nothing cached) or is gone.
    async fn changed(&self, oid: &str, keys: Vec<String>) {
        let changed = Changed {
            oid: oid.to_string(),
            keys,
        };
        if let Some(c) = &self.cache {
            c.invalidate(&changed);
        }
        let Ok(payload) = serde_json::to_vec(&changed) else {
            return;
        };
        match self.pool.notify(CONTROL, payload, NOTIFY_TIMEOUT).await {
            // No gateway ever ran on this pool.
            Ok(_) | Err(ClientError::NotFound(_)) => {}
            Err(e) => tracing::warn!(
                "telling the gateways that {oid} changed: {e} (they may serve the old record for up to {} s)",
                crate::cache::TTL.as_secs()
            ),
        }
    }

    /// Creates user `uid` with one fresh key (and e-mail address
    /// `email`, unless empty: no other user may have it).
    pub async fn user_create(&self, uid: &str, display_name: &str, email: &str) -> Result<User> {
        check_uid(uid)?;
        if self.user(uid).await?.is_some() {
            return Err(MetaError::Exists(format!("user {uid}")));
        }
        if !email.is_empty() && self.user_by_email(email).await?.is_some() {
            return Err(MetaError::Exists(format!(
                "a user with e-mail address {email}"
            )));
        }
        let user = User {
            uid: uid.to_string(),
            display_name: display_name.to_string(),
            keys: vec![new_key()],
            email: email.to_string(),
        };
        self.put_user(&user, None).await?;
        Ok(user)
    }

    /// User `uid`, if it exists.
    pub async fn user(&self, uid: &str) -> Result<Option<User>> {
        let Some(b) = self.get_one(USERS, &format!("uid.{uid}")).await? else {
            return Ok(None);
        };
        decode(&format!("user {uid}"), &b).map(Some)
    }

    /// The user whose e-mail address is `email` (case aside).
    pub async fn user_by_email(&self, email: &str) -> Result<Option<User>> {
        Ok(self
            .users()
            .await?
            .into_iter()
            .find(|u| !u.email.is_empty() && u.email.eq_ignore_ascii_case(email)))
    }

    /// The user holding access key `access_key`.
    pub async fn user_by_key(&self, access_key: &str) -> Result<Option<User>> {
        let Some(b) = self.get_one(USERS, &format!("key.{access_key}")).await? else {
            return Ok(None);
        };
        decode(&format!("key {access_key}"), &b).map(Some)
    }

    /// Every user.
    pub async fn users(&self) -> Result<Vec<User>> {
        let mut out = Vec::new();
        for (k, v) in self.omap_all(USERS, "uid.").await? {
            out.push(decode(&String::from_utf8_lossy(&k), &v)?);
        }
        Ok(out)
    }

    /// Writes `user` and its key records; `gone` keys are unlinked.
    async fn put_user(&self, user: &User, gone: Option<&str>) -> Result<()> {
        let rec = encode(user)?;
        let mut kv: Vec<(String, Vec<u8>)> = vec![(format!("uid.{}", user.uid), rec.clone())];
        for k in &user.keys {
            kv.push((format!("key.{}", k.access_key), rec.clone()));
        }
        self.pool.omap_set(USERS, &kv).await?;
        let mut keys: Vec<String> = kv.into_iter().map(|(k, _)| k).collect();
        if let Some(g) = gone {
            self.pool.omap_rm_keys(USERS, &[format!("key.{g}")]).await?;
            keys.push(format!("key.{g}"));
        }
        self.changed(USERS, keys).await;
        Ok(())
    }

    /// Adds a fresh key to user `uid`.
    pub async fn key_create(&self, uid: &str) -> Result<User> {
        let mut user = self
            .user(uid)
            .await?
            .ok_or_else(|| MetaError::Missing(format!("user {uid}")))?;
        user.keys.push(new_key());
        self.put_user(&user, None).await?;
        Ok(user)
    }

    /// Removes key `access_key` from user `uid`.
    pub async fn key_remove(&self, uid: &str, access_key: &str) -> Result<User> {
        let mut user = self
            .user(uid)
            .await?
            .ok_or_else(|| MetaError::Missing(format!("user {uid}")))?;
        let before = user.keys.len();
        user.keys.retain(|k| k.access_key != access_key);
        if user.keys.len() == before {
            return Err(MetaError::Missing(format!(
                "key {access_key} of user {uid}"
            )));
        }
        self.put_user(&user, Some(access_key)).await?;
        Ok(user)
    }

    /// Removes user `uid` (refused while it owns buckets).
    pub async fn user_remove(&self, uid: &str) -> Result<()> {
        let user = self
            .user(uid)
            .await?
            .ok_or_else(|| MetaError::Missing(format!("user {uid}")))?;
        let owned: Vec<String> = self
            .buckets()
            .await?
            .into_iter()
            .filter(|b| b.owner == uid)
            .map(|b| b.name)
            .collect();
        if !owned.is_empty() {
            return Err(MetaError::Invalid(format!(
                "user {uid} owns buckets {}: remove them first",
                owned.join(", ")
            )));
        }
        let mut keys = vec![format!("uid.{uid}")];
        keys.extend(user.keys.iter().map(|k| format!("key.{}", k.access_key)));
        self.pool.omap_rm_keys(USERS, &keys).await?;
        self.changed(USERS, keys).await;
        Ok(())
    }

    /// Every omap entry of `oid` whose key starts with `prefix`.
    async fn omap_all(&self, oid: &str, prefix: &str) -> Result<Vec<(Vec<u8>, Bytes)>> {
        let mut out = Vec::new();
        let mut after = String::new();
        loop {
            let page = match self
                .pool
                .omap_get_vals(oid, after.as_bytes(), prefix.as_bytes(), PAGE)
                .await
            {
                Ok(p) => p,
                Err(ClientError::NotFound(_)) => return Ok(out),
                Err(e) => return Err(e.into()),
            };
            let more = page.more;
            let mut last = None;
            for (k, v) in page.entries {
                last = Some(k.clone());
                out.push((k.to_vec(), v));
            }
            match last {
                Some(k) if more => after = String::from_utf8_lossy(&k).into_owned(),
                _ => return Ok(out),
            }
        }
    }

    /// Bucket `name`, if it exists.
    pub async fn bucket(&self, name: &str) -> Result<Option<Bucket>> {
        let Some(b) = self.get_one(BUCKETS, name).await? else {
            return Ok(None);
        };
        decode(&format!("bucket {name}"), &b).map(Some)
    }

    /// Every bucket.
    pub async fn buckets(&self) -> Result<Vec<Bucket>> {
        let mut out = Vec::new();
        for (k, v) in self.omap_all(BUCKETS, "").await? {
            out.push(decode(&String::from_utf8_lossy(&k), &v)?);
        }
        Ok(out)
    }

    /// Creates bucket `name` owned by `owner`; an existing bucket of the
    /// same owner is answered as it is (as AWS in us-east-1).
    pub async fn bucket_create(
        &self,
        name: &str,
        owner: &User,
        acl: &str,
        location: &str,
    ) -> Result<Bucket> {
        let (owner_name, owner) = (owner.display_name.as_str(), owner.uid.as_str());
        if let Some(b) = self.bucket(name).await? {
            return match b.owner == owner {
                true => Ok(b),
                false => Err(MetaError::Exists(format!("bucket {name}"))),
            };
        }
        let b = Bucket {
            name: name.to_string(),
            owner: owner.to_string(),
            id: random_hex(8),
            created_ms: now_ms(),
            acl: acl.to_string(),
            owner_name: owner_name.to_string(),
            location: location.to_string(),
            shards: INDEX_SHARDS,
            versioning: String::new(),
            versions_recorded: false,
            tags: Default::default(),
            policy: String::new(),
            public_access_block: None,
            grants: Vec::new(),
            object_lock: None,
            encryption: String::new(),
        };
        for oid in index_oids(&b) {
            self.pool.create(&oid, true).await?;
        }
        self.pool.omap_set(BUCKETS, &[(name, encode(&b)?)]).await?;
        self.changed(BUCKETS, vec![name.to_string()]).await;
        Ok(b)
    }

    /// Writes bucket `b`'s record.
    pub(crate) async fn put_bucket(&self, b: &Bucket) -> Result<()> {
        self.pool
            .omap_set(BUCKETS, &[(b.name.as_str(), encode(b)?)])
            .await?;
        self.changed(BUCKETS, vec![b.name.clone()]).await;
        Ok(())
    }

    /// Sets bucket `b`'s canned ACL.
    pub async fn set_bucket_acl(&self, b: &Bucket, acl: &str) -> Result<()> {
        self.update_bucket(b, |nb| nb.acl = acl.to_string()).await
    }

    /// Writes bucket `b` as `change` makes it (its policy, tags, public
    /// access block and the like).
    pub async fn update_bucket(&self, b: &Bucket, change: impl FnOnce(&mut Bucket)) -> Result<()> {
        let mut nb = b.clone();
        change(&mut nb);
        self.put_bucket(&nb).await
    }

    /// Removes bucket `name` if it holds no objects (and no versions).
    pub async fn bucket_remove(&self, b: &Bucket) -> Result<()> {
        let (first, _) = self.list(b, "", "", 1).await?;
        if !first.is_empty() || self.has_versions(b).await? {
            return Err(MetaError::NotEmpty(b.name.clone()));
        }
        // Uploads never completed go with it, parts and all.
        for u in self.uploads(b, "").await? {
            self.upload_abort(b, &u).await?;
        }
        self.pool.omap_rm_keys(BUCKETS, &[b.name.as_str()]).await?;
        self.changed(BUCKETS, vec![b.name.clone()]).await;
        self.remove_data(&uploads_oid(b)).await?;
        // Nothing is listed: every recorded stripe goes now.
        for oid in pending_oids(b) {
            for (k, _) in self.omap_all(&oid, "").await? {
                self.remove_prefix(&String::from_utf8_lossy(&k)).await?;
            }
            self.remove_data(&oid).await?;
        }
        for oid in index_oids(b) {
            self.remove_data(&oid).await?;
        }
        Ok(())
    }

    /// Up to `max` index entries of `b` after `after`, whose keys start
    /// with `prefix`, in key order, and whether more follow: each shard's
    /// first `max` (read at once), merged.
    pub async fn list(
        &self,
        b: &Bucket,
        after: &str,
        prefix: &str,
        max: u32,
    ) -> Result<(Vec<(String, Entry)>, bool)> {
        // Past the version records (`\0<key>\0...`, see versions.rs).
        let after = match after.is_empty() {
            true => &[0u8, 0xFF][..],
            false => after.as_bytes(),
        };
        let reads = index_oids(b).into_iter().map(|oid| async move {
            self.pool
                .omap_get_vals(&oid, after, prefix.as_bytes(), max)
                .await
        });
        let (merged, more) = merge_pages(futures_util::future::join_all(reads).await, max)?;
        let mut out = Vec::with_capacity(merged.len());
        for (k, v) in merged {
            let key = String::from_utf8(k.to_vec()).map_err(|_| MetaError::Damaged {
                what: format!("index of bucket {}", b.name),
                why: "a key that is not UTF-8".into(),
            })?;
            let e = decode(&format!("{}/{key}", b.name), &v)?;
            out.push((key, e));
        }
        Ok((out, more))
    }

    /// The entry of `key` in `b`.
    pub async fn entry(&self, b: &Bucket, key: &str) -> Result<Option<Entry>> {
        match self.get_one(&index_oid(b, key), key).await? {
            None => Ok(None),
            Some(v) => decode(&format!("{}/{key}", b.name), &v).map(Some),
        }
    }

    /// Writes `body` (chunks as they arrive) as a run of stripes named
    /// after `prefix`, a stripe in memory at a time, at most `max` bytes,
    /// each sealed with `seal` when given (`sse.rs`); the run and the
    /// data's MD5 (of the plaintext). On an error the stripes written go.
    pub async fn write_run<S, E>(
        &self,
        prefix: String,
        mut body: S,
        max: u64,
        seal: Option<&crate::sse::Key>,
    ) -> Result<(Part, [u8; 16])>
    where
        S: futures_util::Stream<Item = std::result::Result<Bytes, E>> + Unpin,
        E: std::fmt::Display,
    {
        use futures_util::StreamExt;
        use md5::Digest;
        let mut md5 = md5::Md5::new();
        let mut part = Part {
            prefix,
            ..Part::default()
        };
        let mut buf = bytes::BytesMut::new();
        let mut n = 0u64;
        let r: Result<()> = async {
            loop {
                let chunk = match body.next().await {
                    Some(Ok(c)) => Some(c),
                    Some(Err(e)) => {
                        return Err(MetaError::Invalid(format!("reading the body: {e}")));
                    }
                    None => None,
                };
                let done = chunk.is_none();
                if let Some(c) = chunk {
                    part.size += c.len() as u64;
                    if part.size > max {
                        return Err(MetaError::TooLarge(max));
                    }
                    md5.update(&c);
                    buf.extend_from_slice(&c);
                }
                while buf.len() as u64 >= STRIPE || (done && !buf.is_empty()) {
                    let take = buf.len().min(STRIPE as usize);
                    let mut stripe = buf.split_to(take).freeze();
                    if let Some(k) = seal {
                        stripe = Bytes::from(k.seal(&part.prefix, n, &stripe));
                    }
                    self.pool
                        .write_full(&format!("{}.{n}", part.prefix), stripe)
                        .await?;
                    n += 1;
                }
                if done {
                    return Ok(());
                }
            }
        }
        .await;
        if let Err(e) = r {
            let written = Part {
                prefix: part.prefix.clone(),
                size: n * STRIPE,
                checksum: None,
            };
            let _ = self.remove_run(&written).await;
            return Err(e);
        }
        Ok((part, md5.finalize().into()))
    }

    /// Stores `body` as `key` of `b` with `entry`'s metadata (its size,
    /// ETag and parts are filled in here); the data it replaces is removed
    /// after the entry points at the new one. `check` sees the data's MD5
    /// once it is all written and refuses it (`BadDigest`, see
    /// [`md5_check`]) or gives the checksums the entry keeps.
    pub async fn put<S, E>(
        &self,
        b: &Bucket,
        key: &str,
        body: S,
        max: u64,
        check: impl FnOnce(&[u8; 16]) -> Result<Checksums>,
        entry: Entry,
    ) -> Result<Entry>
    where
        S: futures_util::Stream<Item = std::result::Result<Bytes, E>> + Unpin,
        E: std::fmt::Display,
    {
        self.put_sealed(b, key, body, max, check, entry, None).await
    }

    /// [`Meta::put`], the data sealed with `seal` (the data key of the
    /// encryption `entry.sse` records).
    #[allow(clippy::too_many_arguments)]
    pub async fn put_sealed<S, E>(
        &self,
        b: &Bucket,
        key: &str,
        body: S,
        max: u64,
        check: impl FnOnce(&[u8; 16]) -> Result<Checksums>,
        mut entry: Entry,
        seal: Option<&crate::sse::Key>,
    ) -> Result<Entry>
    where
        S: futures_util::Stream<Item = std::result::Result<Bytes, E>> + Unpin,
        E: std::fmt::Display,
    {
        check_key(key)?;
        let prefix = format!("data.{}.{}", b.id, random_hex(12));
        // Recorded first: a gateway that dies before the entry leaves a
        // record the sweep finds, and removes the stripes by.
        let pending = Pending {
            key: key.to_string(),
            started_ms: now_ms(),
            gc: false,
        };
        self.pool
            .omap_set(
                &pending_oid(b, key),
                &[(prefix.as_str(), encode(&pending)?)],
            )
            .await?;
        let (part, md5) = self.write_run(prefix.clone(), body, max, seal).await?;
        match check(&md5) {
            Ok(sums) => entry.checksums = sums,
            Err(e) => {
                self.remove_run(&part).await?;
                self.pool
                    .omap_rm_keys(&pending_oid(b, key), &[prefix.as_str()])
                    .await?;
                return Err(e);
            }
        }
        entry.size = part.size;
        entry.etag = hex(&md5);
        entry.mtime_ms = now_ms();
        entry.parts = vec![part.clone()];
        // The record stays for the sweep: it drops it while the entry
        // points at these stripes, and removes them if a concurrent write
        // replaced the entry without seeing them.
        let r = self.commit(b, key, entry).await;
        if r.is_err() {
            self.remove_run(&part).await?;
            self.pool
                .omap_rm_keys(&pending_oid(b, key), &[prefix.as_str()])
                .await?;
        }
        r
    }

    /// Copies the object `src` describes (its data opened with `open` if
    /// sealed) to `key` of `b`, a stripe in memory at a time, with
    /// `entry`'s headers and metadata, sealed with `seal` if given.
    pub async fn copy(
        &self,
        src: &Entry,
        open: Option<crate::sse::Key>,
        b: &Bucket,
        key: &str,
        entry: Entry,
        seal: Option<&crate::sse::Key>,
    ) -> Result<Entry> {
        let body = chunks(self.clone(), Self::pieces(src, 0, src.size), open);
        self.put_sealed(b, key, body, u64::MAX, md5_check(None), entry, seal)
            .await
    }

    /// Removes, in every bucket, the stripes recorded over `stale_ms` ago
    /// that no entry points at — left by writes that died midway or lost a
    /// race, or replaced and deleted data (kept until then for readers
    /// still streaming it) — and uploads begun over `upload_expiry_ms`
    /// ago; what it removed, as (stripe runs, uploads).
    pub async fn sweep(&self, stale_ms: u64, upload_expiry_ms: u64) -> Result<(u64, u64)> {
        let now = now_ms();
        let (mut runs, mut uploads) = (0, 0);
        for b in self.buckets().await? {
            for oid in pending_oids(&b) {
                for (k, v) in self.omap_all(&oid, "").await? {
                    let prefix = String::from_utf8_lossy(&k).into_owned();
                    let p: Pending = decode(&format!("pending write {prefix}"), &v)?;
                    if now.saturating_sub(p.started_ms) < stale_ms {
                        continue;
                    }
                    let live = !p.gc && self.referenced(&b, &p.key, &prefix).await?;
                    if !live {
                        let n = self.remove_prefix(&prefix).await?;
                        runs += 1;
                        tracing::debug!(bucket = %b.name, key = %p.key, stripes = n, gc = p.gc, "swept");
                    }
                    self.pool.omap_rm_keys(&oid, &[prefix.as_str()]).await?;
                }
            }
            for u in self.uploads(&b, "").await? {
                if now.saturating_sub(u.initiated_ms) >= upload_expiry_ms {
                    self.upload_abort(&b, &u).await?;
                    uploads += 1;
                    tracing::info!(bucket = %b.name, key = %u.key, upload = %u.upload_id, "aborted an abandoned upload");
                }
            }
        }
        Ok((runs, uploads))
    }

    /// Points `key` of `b` at `entry`; what it pointed at goes to the
    /// sweep (in a versioned bucket, `entry` becomes the newest version).
    pub async fn commit(&self, b: &Bucket, key: &str, entry: Entry) -> Result<Entry> {
        if !b.versioning.is_empty() {
            return self.commit_version(b, key, entry).await;
        }
        if let Some(o) = self.swap_entry(b, key, Some(&entry)).await? {
            self.collect_later(b, key, &o).await?;
        }
        Ok(entry)
    }

    /// Sets (or, with `None`, removes) `key`'s entry in `b`'s index and
    /// returns the one it replaced: one compound op that reads the old
    /// value before it writes the new (reads see the object as it was).
    /// An op the OSD had applied already (resent after a lost connection)
    /// answers without its read: then what it replaced is unknown, and
    /// its stripes are left to the pending record of their own write if
    /// the sweep has not dropped it yet.
    async fn swap_entry(
        &self,
        b: &Bucket,
        key: &str,
        new: Option<&Entry>,
    ) -> Result<Option<Entry>> {
        let op = Op::new().omap_get_vals_by_keys(&[key]);
        let op = match new {
            Some(e) => op.omap_set(&[(key, encode(e)?)]),
            None => op.omap_rm_keys(&[key]),
        };
        let r = self
            .pool
            .operate(&index_oid(b, key), op)
            .await
            .map_err(|e| e.error)?;
        if r.replayed {
            tracing::warn!(bucket = %b.name, key, "a resent index change: what it replaced is not known to the sweep");
            return Ok(None);
        }
        match r.omap(0)?.entries.into_iter().next() {
            Some((_, v)) => decode(&format!("{}/{key}", b.name), &v).map(Some),
            None => Ok(None),
        }
    }

    /// Records `old`'s stripes for the sweep (a reader may still stream
    /// them).
    pub(crate) async fn collect_later(&self, b: &Bucket, key: &str, old: &Entry) -> Result<()> {
        let rec = encode(&Pending {
            key: key.to_string(),
            started_ms: now_ms(),
            gc: true,
        })?;
        let kv: Vec<(&str, &[u8])> = old
            .parts
            .iter()
            .map(|p| (p.prefix.as_str(), rec.as_slice()))
            .collect();
        if !kv.is_empty() {
            self.pool.omap_set(&pending_oid(b, key), &kv).await?;
        }
        Ok(())
    }

    /// Removes the stripes `<prefix>.0`, `.1`, ... (written in order)
    /// until one is absent; how many it removed.
    async fn remove_prefix(&self, prefix: &str) -> Result<u64> {
        let mut n = 0u64;
        loop {
            match self.pool.remove(&format!("{prefix}.{n}")).await {
                Ok(()) => n += 1,
                Err(ClientError::NotFound(_)) => return Ok(n),
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// The pieces `(data object, offset in it, length)` of bytes
    /// `[start, end)` of the object `entry` describes, in order.
    /// Parts and stripes outside the range are skipped by arithmetic: a
    /// damaged entry naming an absurd size costs nothing beyond the range.
    pub fn pieces(entry: &Entry, start: u64, end: u64) -> Vec<(String, u64, u64)> {
        let mut out = Vec::new();
        let mut at = 0u64;
        for p in &entry.parts {
            if at >= end {
                break;
            }
            let part_end = at.saturating_add(p.size);
            if part_end > start {
                // The stripes of this part that hold [start, end).
                let first = start.saturating_sub(at) / STRIPE;
                let last = (end.min(part_end) - at).div_ceil(STRIPE);
                for i in first..last {
                    let s_at = at.saturating_add(i * STRIPE);
                    let len = (p.size - i * STRIPE).min(STRIPE);
                    let (s, e) = (s_at.max(start), s_at.saturating_add(len).min(end));
                    if s < e {
                        out.push((format!("{}.{i}", p.prefix), s - s_at, e - s));
                    }
                }
            }
            at = part_end;
        }
        out
    }

    /// Reads one piece (see [`Meta::pieces`]).
    pub async fn read_piece(&self, oid: &str, offset: u64, len: u64) -> Result<Bytes> {
        let b = self.pool.read(oid, offset, len).await?;
        if b.len() as u64 != len {
            return Err(MetaError::Damaged {
                what: oid.to_string(),
                why: format!("{} bytes where {len} were written", b.len()),
            });
        }
        Ok(b)
    }

    /// Reads one piece of a sealed run (see [`Meta::pieces`]): the chunks
    /// holding it, opened with `key`.
    pub async fn read_sealed(
        &self,
        oid: &str,
        offset: u64,
        len: u64,
        key: &crate::sse::Key,
    ) -> Result<Bytes> {
        let damaged = |why: String| MetaError::Damaged {
            what: oid.to_string(),
            why,
        };
        let (prefix, stripe) = oid
            .rsplit_once('.')
            .and_then(|(p, n)| Some((p, n.parse::<u64>().ok()?)))
            .ok_or_else(|| damaged("not the name of a stripe".into()))?;
        let (at, n) = crate::sse::sealed_range(offset, len);
        let sealed = self.pool.read(oid, at, n).await?;
        key.open(prefix, stripe, offset, len, &sealed)
            .map(Bytes::from)
            .map_err(|e| damaged(e.to_string()))
    }

    /// Removes `key` from `b` (absent: nothing to do).
    pub async fn delete(&self, b: &Bucket, key: &str) -> Result<()> {
        match self.swap_entry(b, key, None).await? {
            Some(e) => self.collect_later(b, key, &e).await,
            None => Ok(()),
        }
    }

    /// Removes every stripe of `part` (those already gone are fine).
    pub async fn remove_run(&self, part: &Part) -> Result<()> {
        for (oid, _) in part.stripes() {
            self.remove_data(&oid).await?;
        }
        Ok(())
    }

    async fn remove_data(&self, oid: &str) -> Result<()> {
        match self.pool.remove(oid).await {
            Ok(()) | Err(ClientError::NotFound(_)) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

/// The first `max` entries of the shards' pages (a missing shard is
/// empty), in key order, and whether more follow.
#[allow(clippy::type_complexity)]
pub(crate) fn merge_pages(
    pages: Vec<std::result::Result<shoal_client::OmapPage, ClientError>>,
    max: u32,
) -> Result<(Vec<(Bytes, Bytes)>, bool)> {
    let mut more = false;
    let mut merged: Vec<(Bytes, Bytes)> = Vec::new();
    for page in pages {
        let page = match page {
            Ok(p) => p,
            Err(ClientError::NotFound(_)) => continue,
            Err(e) => return Err(e.into()),
        };
        more |= page.more;
        merged.extend(page.entries);
    }
    merged.sort_by(|a, b| a.0.cmp(&b.0));
    if merged.len() > max as usize {
        merged.truncate(max as usize);
        more = true;
    }
    Ok((merged, more))
}

/// The index shard holding `key`.
pub(crate) fn index_oid(b: &Bucket, key: &str) -> String {
    match b.shards {
        0 | 1 => format!("index.{}", b.id),
        n => format!("index.{}.{}", b.id, crc32c::crc32c(key.as_bytes()) % n),
    }
}

/// Every index shard of `b`.
pub(crate) fn index_oids(b: &Bucket) -> Vec<String> {
    match b.shards {
        0 | 1 => vec![format!("index.{}", b.id)],
        n => (0..n).map(|i| format!("index.{}.{i}", b.id)).collect(),
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn new_key() -> AccessKey {
    // Access keys as AWS prints them: 20 upper-case letters and digits.
    const ALPHA: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    let raw = random_hex(20);
    let access_key: String = raw
        .as_bytes()
        .chunks(2)
        .map(|c| ALPHA[(usize::from(c[0]) * 7 + usize::from(c[1])) % ALPHA.len()] as char)
        .collect();
    AccessKey {
        access_key,
        secret_key: random_hex(20),
    }
}

/// Object keys are 1-1024 bytes of UTF-8 without NUL (which names
/// version records in the index).
fn check_key(key: &str) -> Result<()> {
    if key.is_empty() || key.len() > 1024 || key.contains('\0') {
        return Err(MetaError::BadKey(format!(
            "bad key {key:?}: 1-1024 bytes without NUL"
        )));
    }
    Ok(())
}

fn check_uid(uid: &str) -> Result<()> {
    let ok = !uid.is_empty()
        && uid.len() <= 64
        && uid
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.' | b'@'));
    if ok {
        Ok(())
    } else {
        Err(MetaError::Invalid(format!(
            "bad uid {uid:?}: 1-64 of A-Z a-z 0-9 _ - . @"
        )))
    }
}

/// A multipart upload in progress (`uploads.<bucket id>`, keyed by
/// `<object key>\n<upload id>`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Upload {
    /// The object key it will complete as.
    pub key: String,
    /// Its id.
    pub upload_id: String,
    /// When it began, ms since the Unix epoch.
    pub initiated_ms: u64,
    /// The object's entry as it will be (headers and metadata given at
    /// creation).
    pub entry: Entry,
    /// The checksum algorithm its parts carry (crc32, ..., sha256; empty:
    /// none), and how the object's checksum is made of theirs.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub checksum_algorithm: String,
    /// COMPOSITE or FULL_OBJECT (see `checksum.rs`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub checksum_type: String,
}

/// One uploaded part (`upload.<bucket id>.<upload id>`, keyed by its
/// number, zero-padded).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct UploadedPart {
    /// Its number (1-10 000).
    pub number: u32,
    /// Its bytes.
    pub run: Part,
    /// Hex MD5 of its data.
    pub etag: String,
    /// When it was uploaded.
    pub mtime_ms: u64,
    /// Its verified checksums.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub checksums: Checksums,
}

/// Parts of an upload at most (AWS's limit).
pub const PARTS_MAX: u32 = 10_000;
/// Smallest part but the last (AWS's limit).
pub const PART_MIN: u64 = 5 << 20;

/// A write in progress (`pending.<bucket id>`, keyed by its stripes'
/// prefix).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Pending {
    key: String,
    started_ms: u64,
    /// The stripes of data an entry no longer points at (replaced or
    /// deleted), kept for readers still streaming them until the sweep.
    #[serde(default)]
    gc: bool,
}

/// Where a write to `key` of `b` records its stripes: the shard of the
/// pending records that matches the key's index shard, so that writers of
/// one bucket spread over as many objects (and PGs) as its index.
fn pending_oid(b: &Bucket, key: &str) -> String {
    match b.shards {
        0 | 1 => format!("pending.{}", b.id),
        n => format!("pending.{}.{}", b.id, crc32c::crc32c(key.as_bytes()) % n),
    }
}

/// Every object of `b`'s pending records (with the unsharded one, which
/// buckets of earlier versions used).
fn pending_oids(b: &Bucket) -> Vec<String> {
    let mut v = vec![format!("pending.{}", b.id)];
    if b.shards > 1 {
        v.extend((0..b.shards).map(|i| format!("pending.{}.{i}", b.id)));
    }
    v
}

/// The bytes of `pieces` (see [`Meta::pieces`]), read by a task of its
/// own one piece ahead and handed over through a channel of one: at most
/// two stripes in memory whatever the object's size; a read that fails
/// ends the stream with its error.
pub fn chunks(
    meta: Meta,
    pieces: Vec<(String, u64, u64)>,
    open: Option<crate::sse::Key>,
) -> Chunks {
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    tokio::spawn(async move {
        for (oid, off, len) in pieces {
            let r = match &open {
                None => meta.read_piece(&oid, off, len).await,
                Some(k) => meta.read_sealed(&oid, off, len, k).await,
            };
            let r = r.map_err(|e| std::io::Error::other(e.to_string()));
            let failed = r.is_err();
            if tx.send(r).await.is_err() || failed {
                return;
            }
        }
    });
    Chunks(rx)
}

/// The stream [`chunks`] returns.
#[derive(Debug)]
pub struct Chunks(tokio::sync::mpsc::Receiver<std::io::Result<Bytes>>);

impl futures_util::Stream for Chunks {
    type Item = std::io::Result<Bytes>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        self.0.poll_recv(cx)
    }
}

fn uploads_oid(b: &Bucket) -> String {
    format!("uploads.{}", b.id)
}

fn parts_oid(b: &Bucket, upload_id: &str) -> String {
    format!("upload.{}.{upload_id}", b.id)
}

fn upload_key(key: &str, upload_id: &str) -> String {
    format!("{key}\n{upload_id}")
}

impl Meta {
    /// Begins a multipart upload of `key` into `b`, its entry's headers
    /// and metadata taken from `entry`, its parts' checksums in `checksum`
    /// (algorithm, type) if given.
    pub async fn upload_create(
        &self,
        b: &Bucket,
        key: &str,
        entry: Entry,
        checksum: Option<(&str, &str)>,
    ) -> Result<Upload> {
        check_key(key)?;
        let (alg, kind) = checksum.unwrap_or_default();
        let u = Upload {
            key: key.to_string(),
            upload_id: random_hex(16),
            initiated_ms: now_ms(),
            entry,
            checksum_algorithm: alg.to_string(),
            checksum_type: kind.to_string(),
        };
        self.pool.create(&parts_oid(b, &u.upload_id), true).await?;
        self.pool
            .omap_set(
                &uploads_oid(b),
                &[(upload_key(key, &u.upload_id), encode(&u)?)],
            )
            .await?;
        Ok(u)
    }

    /// The upload `upload_id` of `key` in `b`.
    pub async fn upload(&self, b: &Bucket, key: &str, upload_id: &str) -> Result<Upload> {
        let k = upload_key(key, upload_id);
        match self.get_one(&uploads_oid(b), &k).await? {
            Some(v) => decode(&format!("upload {upload_id}"), &v),
            None => Err(MetaError::Missing(format!("upload {upload_id} of {key}"))),
        }
    }

    /// Stores part `number` of an upload (replacing an earlier one of the
    /// same number).
    pub async fn upload_part<S, E>(
        &self,
        b: &Bucket,
        u: &Upload,
        number: u32,
        body: S,
        check: impl FnOnce(&[u8; 16]) -> Result<Checksums>,
        seal: Option<&crate::sse::Key>,
    ) -> Result<UploadedPart>
    where
        S: futures_util::Stream<Item = std::result::Result<Bytes, E>> + Unpin,
        E: std::fmt::Display,
    {
        if !(1..=PARTS_MAX).contains(&number) {
            return Err(MetaError::Invalid(format!(
                "part numbers are 1-{PARTS_MAX}, not {number}"
            )));
        }
        // Random enough that a part sent again never gets the same name
        // (and so, sealed, the same run key).
        let prefix = format!("data.{}.{}.{number}.{}", b.id, u.upload_id, random_hex(8));
        let (run, md5) = self.write_run(prefix, body, PUT_PART_MAX, seal).await?;
        let checksums = match check(&md5) {
            Ok(c) => c,
            Err(e) => {
                self.remove_run(&run).await?;
                return Err(e);
            }
        };
        let part = UploadedPart {
            number,
            run,
            etag: hex(&md5),
            mtime_ms: now_ms(),
            checksums,
        };
        let oid = parts_oid(b, &u.upload_id);
        let k = format!("{number:05}");
        let old = self.get_one(&oid, &k).await?;
        let stored = self
            .pool
            .omap_set(&oid, &[(k.as_str(), encode(&part)?)])
            .await;
        if let Err(e) = stored {
            let _ = self.remove_run(&part.run).await;
            return Err(e.into());
        }
        if let Some(o) = old {
            let o: UploadedPart = decode("a part", &o)?;
            self.remove_run(&o.run).await?;
        }
        Ok(part)
    }

    /// The parts of an upload, by number.
    pub async fn upload_parts(&self, b: &Bucket, u: &Upload) -> Result<Vec<UploadedPart>> {
        let mut out = Vec::new();
        for (k, v) in self.omap_all(&parts_oid(b, &u.upload_id), "").await? {
            out.push(decode(&String::from_utf8_lossy(&k), &v)?);
        }
        Ok(out)
    }

    /// Completes an upload with `chosen` (number, ETag, checksum given)
    /// parts, ascending: the object becomes their bytes in order, its ETag
    /// the MD5 of their MD5s and their count, as AWS computes it, and, for
    /// an upload with a checksum algorithm, its checksum made of the parts'
    /// (which must match those given, and `want` if given); parts not
    /// chosen go.
    pub async fn upload_complete(
        &self,
        b: &Bucket,
        u: &Upload,
        chosen: &[(u32, String, Option<String>)],
        want: Option<&str>,
    ) -> Result<Entry> {
        use md5::Digest;
        if chosen.is_empty() {
            return Err(MetaError::Invalid("no parts named".into()));
        }
        if chosen.windows(2).any(|w| w[0].0 >= w[1].0) {
            return Err(MetaError::Order);
        }
        let have: BTreeMap<u32, UploadedPart> = self
            .upload_parts(b, u)
            .await?
            .into_iter()
            .map(|p| (p.number, p))
            .collect();
        let mut md5s = md5::Md5::new();
        let mut entry = u.entry.clone();
        entry.parts.clear();
        entry.size = 0;
        let alg = u.checksum_algorithm.as_str();
        let mut sums = Vec::new();
        for (i, (n, etag, given)) in chosen.iter().enumerate() {
            let p = have
                .get(n)
                .filter(|p| p.etag == etag.trim_matches('"'))
                .ok_or(MetaError::BadPart(*n))?;
            if i + 1 < chosen.len() && p.run.size < PART_MIN {
                return Err(MetaError::PartTooSmall(*n));
            }
            let raw: Vec<u8> = (0..p.etag.len() / 2)
                .filter_map(|j| u8::from_str_radix(&p.etag[2 * j..2 * j + 2], 16).ok())
                .collect();
            md5s.update(&raw);
            entry.size += p.run.size;
            let mut run = p.run.clone();
            if !alg.is_empty() {
                let have = p.checksums.get(alg).cloned();
                match (&have, given) {
                    (None, _) => return Err(MetaError::BadChecksum(alg.to_uppercase())),
                    (Some(h), Some(g)) if h != g => {
                        return Err(MetaError::BadChecksum(alg.to_uppercase()));
                    }
                    _ => {}
                }
                run.checksum = have.clone();
                sums.push((have.unwrap_or_default(), p.run.size));
            }
            entry.parts.push(run);
        }
        if !alg.is_empty() {
            let whole = crate::checksum::combine(alg, &u.checksum_type, &sums)
                .ok_or_else(|| MetaError::BadChecksum(alg.to_uppercase()))?;
            if want.is_some_and(|w| w.trim() != whole) {
                return Err(MetaError::BadChecksum(alg.to_uppercase()));
            }
            entry.checksums = Checksums::from([(alg.to_string(), whole)]);
            entry.checksum_type = u.checksum_type.clone();
        }
        entry.etag = format!("{}-{}", hex(&md5s.finalize()), chosen.len());
        entry.mtime_ms = now_ms();
        let entry = self.commit(b, &u.key, entry).await?;
        let used: Vec<u32> = chosen.iter().map(|(n, _, _)| *n).collect();
        for (n, p) in &have {
            if !used.contains(n) {
                self.remove_run(&p.run).await?;
            }
        }
        // Kept so that a repeated complete answers as the first did.
        let done = Completed {
            etag: entry.etag.clone(),
        };
        self.pool
            .omap_set(
                &uploads_oid(b),
                &[(
                    format!("\u{1}done\n{}", upload_key(&u.key, &u.upload_id)),
                    encode(&done)?,
                )],
            )
            .await?;
        self.upload_forget(b, u).await?;
        Ok(entry)
    }

    /// A completed upload's answer, if `upload_id` of `key` completed and
    /// the object is still what it made.
    pub async fn upload_completed(
        &self,
        b: &Bucket,
        key: &str,
        upload_id: &str,
    ) -> Result<Option<Entry>> {
        let k = format!("\u{1}done\n{}", upload_key(key, upload_id));
        let Some(v) = self.get_one(&uploads_oid(b), &k).await? else {
            return Ok(None);
        };
        let done: Completed = decode("a completed upload", &v)?;
        Ok(self.entry(b, key).await?.filter(|e| e.etag == done.etag))
    }

    /// Aborts an upload: its parts and records go.
    pub async fn upload_abort(&self, b: &Bucket, u: &Upload) -> Result<()> {
        for p in self.upload_parts(b, u).await? {
            self.remove_run(&p.run).await?;
        }
        self.upload_forget(b, u).await
    }

    async fn upload_forget(&self, b: &Bucket, u: &Upload) -> Result<()> {
        self.pool
            .omap_rm_keys(&uploads_oid(b), &[upload_key(&u.key, &u.upload_id)])
            .await?;
        self.remove_data(&parts_oid(b, &u.upload_id)).await
    }

    /// Uploads in progress in `b` whose keys start with `prefix`, by key.
    pub async fn uploads(&self, b: &Bucket, prefix: &str) -> Result<Vec<Upload>> {
        let mut out = Vec::new();
        for (k, v) in self.omap_all(&uploads_oid(b), prefix).await? {
            if k.first() == Some(&1) {
                continue;
            }
            out.push(decode(&String::from_utf8_lossy(&k), &v)?);
        }
        Ok(out)
    }
}

/// What a repeated complete of an upload answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Completed {
    etag: String,
}

/// Largest part (AWS's limit).
pub const PUT_PART_MAX: u64 = 5 << 30;

#[cfg(test)]
mod tests {
    use super::*;

    /// Every stripe of every part, walked one by one.
    fn pieces_walked(entry: &Entry, start: u64, end: u64) -> Vec<(String, u64, u64)> {
        let mut out = Vec::new();
        let mut at = 0u64;
        for p in &entry.parts {
            for (oid, len) in p.stripes() {
                let (s, e) = (at.max(start), (at + len).min(end));
                if s < e {
                    out.push((oid, s - at, e - s));
                }
                at += len;
            }
        }
        out
    }

    #[test]
    fn pieces_are_the_stripes_a_range_touches_and_absurd_sizes_cost_nothing() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for _ in 0..2000 {
            let parts: Vec<Part> = (0..next(4))
                .map(|i| Part {
                    prefix: format!("p{i}"),
                    size: next(3 * STRIPE),
                    checksum: None,
                })
                .collect();
            let size: u64 = parts.iter().map(|p| p.size).sum();
            let e = Entry {
                size,
                parts,
                ..Entry::default()
            };
            let a = next(size + 2);
            let b = a + next(size + 2 - a);
            assert_eq!(
                Meta::pieces(&e, a, b),
                pieces_walked(&e, a, b),
                "{a}..{b} of {e:?}"
            );
        }
        // A damaged entry naming 2^64 bytes: a few pieces, at once.
        let e = Entry {
            parts: vec![
                Part {
                    prefix: "a".into(),
                    size: u64::MAX - 3,
                    checksum: None,
                },
                Part {
                    prefix: "b".into(),
                    size: u64::MAX,
                    checksum: None,
                },
            ],
            ..Entry::default()
        };
        assert_eq!(Meta::pieces(&e, 0, 10), vec![("a.0".to_string(), 0, 10)]);
        let far = Meta::pieces(&e, u64::MAX - 2 * STRIPE, u64::MAX);
        assert_eq!(far.len(), 4, "{far:?}");
        assert_eq!(far.iter().map(|p| p.2).sum::<u64>(), 2 * STRIPE);
        assert_eq!(far[3], ("b.0".to_string(), 0, 3));
    }
}
