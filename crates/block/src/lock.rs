//! The exclusive lock: one writer per image. The lock is the header's
//! [`LOCK_XATTR`] naming its owner (entity, client instance, cookie), taken
//! and given up with guarded compound ops, so two clients never both
//! believe they hold it: taking it is "the xattr is empty, then set it to
//! me", atomically on the header's primary.

use shoal_client::{Client, CmpOp, Error as ClusterError, Op, OpError, Pool};

use crate::error::{Error, Result};
use crate::format::{LOCK_XATTR, header_object};

/// Who holds (or wants) a lock: `<entity> <client instance> <cookie>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockOwner(String);

impl LockOwner {
    /// A new owner identity for `client` (a fresh cookie per open image).
    pub fn new(client: &Client) -> LockOwner {
        let mut b = [0u8; 8];
        let cookie = match getrandom::fill(&mut b) {
            Ok(()) => u64::from_le_bytes(b),
            Err(_) => shoal_client_time_cookie(),
        };
        LockOwner(format!(
            "{} {:016x} {cookie:016x}",
            client.name(),
            client.client_inc()
        ))
    }

    /// As stored.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

fn shoal_client_time_cookie() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
        ^ u64::from(std::process::id())
}

fn not_found(pool: &Pool, image: &str) -> Error {
    Error::NoImage {
        pool: pool.name().to_string(),
        image: image.to_string(),
    }
}

/// Takes the lock of image `name` (id `id`) for `me`.
pub async fn acquire(pool: &Pool, name: &str, id: &str, me: &LockOwner) -> Result<()> {
    let header = header_object(id);
    let op = Op::new()
        .assert_exists()
        .cmpxattr(LOCK_XATTR, CmpOp::Eq, &b""[..])
        .setxattr(LOCK_XATTR, me.0.clone().into_bytes());
    match pool.operate(&header, op).await {
        Ok(_) => Ok(()),
        Err(OpError {
            error: ClusterError::NotFound(_),
            ..
        }) => Err(not_found(pool, name)),
        Err(OpError {
            error: ClusterError::CompareFailed(_),
            ..
        }) => match owner(pool, id).await? {
            Some(o) if o == me.0 => Ok(()),
            Some(o) => Err(Error::Locked {
                image: name.to_string(),
                owner: o,
            }),
            // Given up meanwhile: try again.
            None => Box::pin(acquire(pool, name, id, me)).await,
        },
        Err(e) => Err(e.into()),
    }
}

/// Gives up `me`'s lock of image `id` (nothing if another holds it).
pub async fn release(pool: &Pool, id: &str, me: &LockOwner) -> Result<()> {
    break_lock(pool, id, &me.0).await
}

/// Removes the lock of image `id` if `owner` holds it.
pub async fn break_lock(pool: &Pool, id: &str, owner: &str) -> Result<()> {
    let op = Op::new()
        .cmpxattr(LOCK_XATTR, CmpOp::Eq, owner.as_bytes().to_vec())
        .rmxattr(LOCK_XATTR);
    match pool.operate(&header_object(id), op).await {
        Ok(_) => Ok(()),
        Err(OpError {
            error: ClusterError::CompareFailed(_) | ClusterError::NotFound(_) | ClusterError::NoData(_),
            ..
        }) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Who holds the lock of image `id`, if anyone.
pub async fn owner(pool: &Pool, id: &str) -> Result<Option<String>> {
    match pool.getxattr(&header_object(id), LOCK_XATTR).await {
        Ok(v) if v.is_empty() => Ok(None),
        Ok(v) => Ok(Some(String::from_utf8_lossy(&v).into_owned())),
        Err(ClusterError::NoData(_) | ClusterError::NotFound(_)) => Ok(None),
        Err(e) => Err(e.into()),
    }
}
