//! The exclusive lock: one writer per image. The lock is the header's
//! [`LOCK_XATTR`] naming its owner (entity, client instance, and the
//! cookie of the owner's watch on the header), taken and given up with
//! guarded compound ops, so two clients never both hold it: taking it is
//! "the xattr is empty, then set it to me", atomically at the header's
//! primary.
//!
//! A client that finds the lock held asks its owner to give it up, with a
//! notify on the header ([`REQUEST_LOCK`]); an owner that is not exclusive
//! finishes its writes in flight, gives the lock up and answers
//! [`RELEASED`], and the asker takes it. An exclusive owner answers
//! [`BUSY`] and the asker fails with [`Error::Locked`]; an owner that does
//! not answer is waited for until it answers or its watch lapses. An owner whose
//! watch on the header is gone (it died, or lost the cluster for longer
//! than the watch timeout) has its lock broken: the asker checks again
//! after a third of the watch timeout (a live owner registers its watch
//! with a new primary within a sixth of it) and then replaces the owner,
//! guarded by the owner's name so that only one asker wins. An owner that
//! could not renew its watch within the timeout stops writing and must
//! take the lock again.

use std::time::Duration;

use bytes::Bytes;
use shoal_client::{Client, CmpOp, Error as ClusterError, Op, OpError, Pool};

use crate::error::{Error, Result};
use crate::format::{LOCK_XATTR, header_object};

/// Notify payload: please give up the lock.
pub const REQUEST_LOCK: &[u8] = b"request_lock";
/// Notify payload: the header changed (size), read it again.
pub const HEADER_UPDATE: &[u8] = b"header_update";
/// Answer: the lock was given up.
pub const RELEASED: &[u8] = b"released";
/// Answer: the owner keeps the lock.
pub const BUSY: &[u8] = b"busy";
/// Answer: not the owner.
pub const NOT_OWNER: &[u8] = b"not_owner";
/// How long an asker waits for the owner's answer.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Times an asker tries to take a lock its owner gave up (another asker may win).
const ATTEMPTS: u32 = 5;

/// Who holds (or wants) a lock: `<entity> <client instance> <watch cookie>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockOwner(String);

impl LockOwner {
    /// The owner identity of `client` whose watch on the header has `cookie`.
    pub fn new(client: &Client, cookie: u64) -> LockOwner {
        LockOwner(format!(
            "{} {:016x} {cookie:016x}",
            client.name(),
            client.client_inc()
        ))
    }

    /// The cookie of the owner's watch on the header.
    pub fn cookie(&self) -> u64 {
        parse_owner(&self.0).map_or(0, |(_, c)| c)
    }

    /// As stored.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The client instance and watch cookie of an owner as stored.
fn parse_owner(s: &str) -> Option<(u64, u64)> {
    let mut f = s.split(' ');
    let _entity = f.next()?;
    let inc = u64::from_str_radix(f.next()?, 16).ok()?;
    let cookie = u64::from_str_radix(f.next()?, 16).ok()?;
    Some((inc, cookie))
}

fn not_found(pool: &Pool, image: &str) -> Error {
    Error::NoImage {
        pool: pool.name().to_string(),
        image: image.to_string(),
    }
}

/// Sets the lock to `me` if nobody holds it; `Ok(None)` when taken, else
/// the owner.
async fn try_take(pool: &Pool, name: &str, id: &str, me: &LockOwner) -> Result<Option<String>> {
    let op = Op::new()
        .assert_exists()
        .cmpxattr(LOCK_XATTR, CmpOp::Eq, &b""[..])
        .setxattr(LOCK_XATTR, me.0.clone().into_bytes());
    match pool.operate(&header_object(id), op).await {
        Ok(_) => Ok(None),
        Err(OpError {
            error: ClusterError::NotFound(_),
            ..
        }) => Err(not_found(pool, name)),
        Err(OpError {
            error: ClusterError::CompareFailed(_),
            ..
        }) => Ok(Some(owner(pool, id).await?.unwrap_or_default())),
        Err(e) => Err(e.into()),
    }
}

/// Takes the lock of image `name` (id `id`) for `me`, asking a live owner
/// to give it up and breaking a dead owner's. `watch_timeout` is the
/// owners' watch timeout.
pub async fn acquire(
    pool: &Pool,
    name: &str,
    id: &str,
    me: &LockOwner,
    watch_timeout: Duration,
) -> Result<()> {
    let header = header_object(id);
    let mut suspect: Option<(String, tokio::time::Instant)> = None;
    let mut asked = 0u32;
    // An owner that neither answers nor loses its watch is waited for this long.
    let give_up = tokio::time::Instant::now() + watch_timeout * 2 + REQUEST_TIMEOUT;
    loop {
        let owner = match try_take(pool, name, id, me).await? {
            None => return Ok(()),
            Some(o) if o == me.0 => return Ok(()),
            // Given up meanwhile: try again.
            Some(o) if o.is_empty() => continue,
            Some(o) => o,
        };
        let locked = || Error::Locked {
            image: name.to_string(),
            owner: owner.clone(),
        };
        let alive = match parse_owner(&owner) {
            Some((inc, cookie)) => pool
                .list_watchers(&header)
                .await?
                .iter()
                .any(|w| w.client_inc == inc && w.cookie == cookie),
            // Not one of ours: never broken automatically.
            None => return Err(locked()),
        };
        if alive {
            suspect = None;
            if asked >= ATTEMPTS || tokio::time::Instant::now() > give_up {
                return Err(locked());
            }
            let r = pool.notify(&header, REQUEST_LOCK, REQUEST_TIMEOUT).await?;
            let is_owner = |w: &shoal_client::WatcherInfo| {
                parse_owner(&owner) == Some((w.client_inc, w.cookie))
            };
            match r.acked.iter().find(|(w, _)| is_owner(w)) {
                Some((_, reply)) if reply.as_ref() == RELEASED => asked += 1,
                Some(_) => return Err(locked()),
                // No answer: the owner may be dying; its watch will tell.
                None => tokio::time::sleep(Duration::from_millis(250)).await,
            }
            continue;
        }
        // No watch: dead, or re-registering with a new primary. Look again
        // after a third of the watch timeout before breaking the lock.
        match &suspect {
            Some((o, since)) if *o == owner && since.elapsed() >= watch_timeout / 3 => {
                tracing::info!(
                    image = name,
                    "breaking the lock of {owner}: its watch is gone"
                );
                let op = Op::new()
                    .cmpxattr(LOCK_XATTR, CmpOp::Eq, owner.clone().into_bytes())
                    .setxattr(LOCK_XATTR, me.0.clone().into_bytes());
                match pool.operate(&header, op).await {
                    Ok(_) => return Ok(()),
                    // Another asker won, or the owner gave it up: look again.
                    Err(OpError {
                        error: ClusterError::CompareFailed(_),
                        ..
                    }) => suspect = None,
                    Err(e) => return Err(e.into()),
                }
            }
            Some((o, _)) if *o == owner => {
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            _ => suspect = Some((owner, tokio::time::Instant::now())),
        }
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
            error:
                ClusterError::CompareFailed(_) | ClusterError::NotFound(_) | ClusterError::NoData(_),
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

/// Whether the lock's owner `owner` still has its watch on the header of
/// image `id`.
pub async fn owner_alive(pool: &Pool, id: &str, owner: &str) -> Result<bool> {
    let Some((inc, cookie)) = parse_owner(owner) else {
        return Ok(true);
    };
    Ok(pool
        .list_watchers(&header_object(id))
        .await?
        .iter()
        .any(|w| w.client_inc == inc && w.cookie == cookie))
}

/// Tells the image's other users its header changed.
pub async fn notify_header_update(pool: &Pool, id: &str) -> Result<()> {
    pool.notify(
        &header_object(id),
        Bytes::from_static(HEADER_UPDATE),
        Duration::from_secs(5),
    )
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_parse() {
        assert_eq!(
            parse_owner("client.admin 00000000000000ff 0000000000000010"),
            Some((255, 16))
        );
        assert_eq!(parse_owner("someone else"), None);
    }
}
