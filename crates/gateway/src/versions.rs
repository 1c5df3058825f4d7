//! Object versions of a versioned bucket, kept beside the current entries
//! in the same index shard (so that one guarded compound op changes both):
//!
//! - `<key>` → the current entry, the latest version unless that is a
//!   delete marker (then the key has no current entry and is not listed);
//! - `\0<key>\0<order><suffix>` → one version of `<key>`, where `<order>`
//!   is 16 hex digits of `u64::MAX` minus its creation time in µs (newest
//!   first in key order) and `<suffix>` is `null` for the null version and
//!   otherwise 8 random hex digits; a version id is `<order><suffix>`,
//!   `null` for the null version. `\0` sorts before every other byte, so a
//!   key's versions come before a longer key's and listings of current
//!   entries start past them (object keys never hold `\0`).
//!
//! A change reads the key's current entry and versions with the shard's
//! object version, and applies with `assert_version` of it, retried when
//! another write got there first: the current entry is always the newest
//! version that is not a delete marker, whichever gateways race. A version
//! is ordered newer than every version it saw, whatever the clocks say.
//! Objects written before versioning was first turned on are the null
//! version; they are recorded as versions when versioning is turned on
//! (and by any later write to their key), so listings need only the
//! records.

use shoal_client::{Error as ClientError, Op};

use crate::meta::{Bucket, Entry, Meta, MetaError, Result, decode, encode, index_oid, now_ms};

/// Versioning turned on.
pub const ENABLED: &str = "Enabled";
/// Versioning suspended (writes make the null version).
pub const SUSPENDED: &str = "Suspended";
/// The null version's id.
pub const NULL: &str = "null";

/// Versions read per round trip.
const PAGE: u32 = 1000;
/// Attempts of a change that keeps losing races.
const ATTEMPTS: u32 = 100;

/// One version of a key, as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    /// The object's key.
    pub key: String,
    /// The version id (`null` for the null version).
    pub version_id: String,
    /// Its place: smaller is newer.
    pub order: u64,
    /// The version (a delete marker has `delete_marker` set).
    pub entry: Entry,
}

impl Version {
    /// The record's omap key.
    pub fn record_key(&self) -> String {
        record_key(&self.key, self.order, &self.version_id)
    }
}

/// The omap key of version `vid` of `key` at `order`.
fn record_key(key: &str, order: u64, vid: &str) -> String {
    if vid == NULL {
        format!("\0{key}\0{order:016x}{NULL}")
    } else {
        format!("\0{key}\0{vid}")
    }
}

/// Prefix of every version record of `key`.
fn key_prefix(key: &str) -> String {
    format!("\0{key}\0")
}

/// The key, order and version id a record's omap key names.
pub(crate) fn parse_record(k: &[u8]) -> Option<(String, u64, String)> {
    let s = std::str::from_utf8(k).ok()?.strip_prefix('\0')?;
    let (key, rest) = s.rsplit_once('\0')?;
    let order = u64::from_str_radix(rest.get(..16)?, 16).ok()?;
    let suffix = rest.get(16..)?;
    let vid = match suffix {
        NULL => NULL.to_string(),
        _ if suffix.len() == 8 && suffix.bytes().all(|c| c.is_ascii_hexdigit()) => rest.to_string(),
        _ => return None,
    };
    Some((key.to_string(), order, vid))
}

/// The order of a version id (`None`: not one this gateway makes).
pub fn order_of(vid: &str) -> Option<u64> {
    if vid.len() != 24 || !vid.bytes().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(&vid[..16], 16).ok()
}

/// Whether `vid` is a version id this gateway could have made.
pub fn valid_vid(vid: &str) -> bool {
    vid == NULL || order_of(vid).is_some()
}

fn order_at_ms(ms: u64) -> u64 {
    u64::MAX - ms.saturating_mul(1000)
}

fn order_now() -> u64 {
    let us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0);
    u64::MAX - us
}

/// What a change to one key saw: the shard's object version, the key's
/// current entry and its versions, newest first.
#[derive(Debug)]
struct KeyState {
    version: u64,
    current: Option<Entry>,
    versions: Vec<Version>,
}

impl KeyState {
    /// A current entry written before versioning, as the null version it
    /// is (ordered newer than every recorded version).
    fn unrecorded(&self, key: &str) -> Option<Version> {
        let c = self.current.as_ref().filter(|c| c.version_id.is_none())?;
        let mut order = order_at_ms(c.mtime_ms);
        if let Some(v) = self.versions.first() {
            order = order.min(v.order.saturating_sub(1));
        }
        let mut entry = c.clone();
        entry.version_id = Some(NULL.to_string());
        Some(Version {
            key: key.to_string(),
            version_id: NULL.to_string(),
            order,
            entry,
        })
    }
}

/// The changes of one guarded op on an index shard.
#[derive(Debug, Default)]
struct Change {
    set: Vec<(String, Vec<u8>)>,
    rm: Vec<String>,
    /// Versions whose data goes once the change is applied.
    gone: Vec<Entry>,
}

impl Meta {
    /// The key's current entry and versions (all of them with `all`, else
    /// the newest two), read at one version of its index shard.
    async fn key_state(&self, b: &Bucket, key: &str, all: bool) -> Result<KeyState> {
        let oid = index_oid(b, key);
        let prefix = key_prefix(key);
        'again: loop {
            let max = if all { PAGE } else { 2 };
            let op =
                Op::new()
                    .omap_get_vals_by_keys(&[key])
                    .omap_get_vals(b"", prefix.as_bytes(), max);
            let r = self.pool().operate(&oid, op).await.map_err(|e| e.error)?;
            let version = r.version;
            let current = match r.omap(0)?.entries.into_iter().next() {
                Some((_, v)) => Some(decode(&format!("{}/{key}", b.name), &v)?),
                None => None,
            };
            let mut page = r.omap(1)?;
            let mut versions = Vec::new();
            loop {
                let more = page.more;
                let mut last = None;
                for (k, v) in page.entries {
                    versions.push(self.version_of(b, &k, &v)?);
                    last = Some(k);
                }
                match last {
                    Some(after) if more && all => {
                        let op = Op::new().omap_get_vals(&after, prefix.as_bytes(), PAGE);
                        let r = self.pool().operate(&oid, op).await.map_err(|e| e.error)?;
                        if r.version != version {
                            continue 'again;
                        }
                        page = r.omap(0)?;
                    }
                    _ => break,
                }
            }
            return Ok(KeyState {
                version,
                current,
                versions,
            });
        }
    }

    fn version_of(&self, b: &Bucket, k: &[u8], v: &[u8]) -> Result<Version> {
        let (key, order, version_id) = parse_record(k).ok_or_else(|| MetaError::Damaged {
            what: format!("index of bucket {}", b.name),
            why: format!("a version record named {:?}", String::from_utf8_lossy(k)),
        })?;
        let entry = decode(&format!("{}/{key}?versionId={version_id}", b.name), v)?;
        Ok(Version {
            key,
            version_id,
            order,
            entry,
        })
    }

    /// Applies what `plan` makes of the key's state, retried while other
    /// writes to the shard get in first; `plan`'s answer.
    async fn change_key<T>(
        &self,
        b: &Bucket,
        key: &str,
        all: bool,
        mut plan: impl FnMut(&KeyState) -> Result<(Change, T)>,
    ) -> Result<T> {
        let oid = index_oid(b, key);
        for _ in 0..ATTEMPTS {
            let st = self.key_state(b, key, all).await?;
            let (change, answer) = plan(&st)?;
            let mut op = Op::new().assert_version(st.version);
            if !change.rm.is_empty() {
                op = op.omap_rm_keys(&change.rm);
            }
            if !change.set.is_empty() {
                op = op.omap_set(&change.set);
            }
            match self.pool().operate(&oid, op).await {
                Ok(_) => {
                    for e in &change.gone {
                        self.collect_later(b, key, e).await?;
                    }
                    return Ok(answer);
                }
                Err(e) if matches!(e.error, ClientError::VersionMismatch(_)) => {
                    // Another write to the shard got in first: read again.
                    let jitter = u64::from(crate::meta::random_hex(1).as_bytes()[0] % 8);
                    tokio::time::sleep(std::time::Duration::from_millis(jitter)).await;
                }
                Err(e) => return Err(e.error.into()),
            }
        }
        Err(MetaError::Invalid(format!(
            "{}/{key}: too many concurrent writes, try again",
            b.name
        )))
    }

    /// Makes `entry` the newest version of `key` in versioned bucket `b`
    /// (a delete marker when `entry.delete_marker`): a fresh version id
    /// while versioning is enabled, the null version (replacing the old
    /// one) while it is suspended; the entry with its version id.
    pub async fn commit_version(&self, b: &Bucket, key: &str, entry: Entry) -> Result<Entry> {
        let suspended = b.versioning == SUSPENDED;
        self.change_key(b, key, suspended, |st| {
            let mut ch = Change::default();
            let mut entry = entry.clone();
            let unrecorded = st.unrecorded(key);
            let mut newest = st.versions.first().map(|v| v.order);
            if let Some(u) = &unrecorded {
                newest = Some(u.order);
            }
            if suspended {
                // The null version is replaced: recorded or not, it goes.
                if let Some(u) = unrecorded {
                    ch.gone.push(u.entry);
                }
                if let Some(n) = st.versions.iter().find(|v| v.version_id == NULL) {
                    ch.rm.push(n.record_key());
                    ch.gone.push(n.entry.clone());
                }
            } else if let Some(u) = unrecorded {
                ch.set.push((u.record_key(), encode(&u.entry)?));
            }
            // Now, or just newer than the newest seen, whatever the clocks say.
            let order = match newest {
                Some(n) => order_now().min(n.saturating_sub(1)),
                None => order_now(),
            };
            let vid = match suspended {
                true => NULL.to_string(),
                false => format!("{order:016x}{}", crate::meta::random_hex(4)),
            };
            entry.version_id = Some(vid.clone());
            ch.set.push((record_key(key, order, &vid), encode(&entry)?));
            if entry.delete_marker {
                if st.current.is_some() {
                    ch.rm.push(key.to_string());
                }
            } else {
                ch.set.push((key.to_string(), encode(&entry)?));
            }
            // A record removed and another written under the same name (a
            // null version replaced within one µs) must not cancel out.
            ch.rm.retain(|k| !ch.set.iter().any(|(s, _)| s == k));
            Ok((ch, entry))
        })
        .await
    }

    /// Removes version `vid` of `key` for good; the next newest becomes
    /// current (none when it is a delete marker). The removed version, or
    /// `None` when there was no such version.
    pub async fn delete_version(&self, b: &Bucket, key: &str, vid: &str) -> Result<Option<Entry>> {
        self.delete_version_if(b, key, vid, |_| Ok(())).await
    }

    /// [`Meta::delete_version`] if `may_go` lets the version go: checked
    /// in the same step as the delete (under the shard's
    /// `assert_version`), so nothing set on the version in between is
    /// missed; its refusal is [`MetaError::Locked`].
    pub async fn delete_version_if(
        &self,
        b: &Bucket,
        key: &str,
        vid: &str,
        may_go: impl Fn(&Entry) -> std::result::Result<(), String>,
    ) -> Result<Option<Entry>> {
        self.change_key(b, key, true, |st| {
            let mut ch = Change::default();
            let mut versions = st.versions.clone();
            if let Some(u) = st.unrecorded(key) {
                versions.insert(0, u);
            }
            let Some(at) = versions.iter().position(|v| v.version_id == vid) else {
                return Ok((ch, None));
            };
            let gone = versions.remove(at);
            may_go(&gone.entry).map_err(MetaError::Locked)?;
            if gone.entry.version_id.is_some() && st.versions.iter().any(|v| v.version_id == vid) {
                ch.rm.push(gone.record_key());
            }
            if at == 0 {
                // The newest went: the next one, if an object, is current.
                match versions.first().filter(|v| !v.entry.delete_marker) {
                    Some(next) => ch.set.push((key.to_string(), encode(&next.entry)?)),
                    None if st.current.is_some() => ch.rm.push(key.to_string()),
                    None => {}
                }
            }
            ch.gone.push(gone.entry.clone());
            Ok((ch, Some(gone.entry)))
        })
        .await
    }

    /// Version `vid` of `key` (the null version may be a current entry
    /// written before versioning).
    pub async fn version(&self, b: &Bucket, key: &str, vid: &str) -> Result<Option<Entry>> {
        if let Some(order) = order_of(vid) {
            let Some(v) = self
                .get_one(&index_oid(b, key), &record_key(key, order, vid))
                .await?
            else {
                return Ok(None);
            };
            return decode(&format!("{}/{key}?versionId={vid}", b.name), &v).map(Some);
        }
        if vid != NULL {
            return Ok(None);
        }
        let st = self.key_state(b, key, true).await?;
        if let Some(c) = st.current.filter(|c| c.version_id.is_none()) {
            return Ok(Some(c));
        }
        Ok(st
            .versions
            .into_iter()
            .find(|v| v.version_id == NULL)
            .map(|v| v.entry))
    }

    /// Whether the newest version of `key` is a delete marker (for a GET
    /// that finds no current entry).
    pub async fn latest_is_marker(&self, b: &Bucket, key: &str) -> Result<bool> {
        let st = self.key_state(b, key, false).await?;
        Ok(st.current.is_none() && st.versions.first().is_some_and(|v| v.entry.delete_marker))
    }

    /// Whether an entry of `key` (current or any version) keeps the stripes
    /// named `prefix`.
    pub async fn referenced(&self, b: &Bucket, key: &str, prefix: &str) -> Result<bool> {
        let holds = |e: &Entry| e.parts.iter().any(|p| p.prefix == prefix);
        if b.versioning.is_empty() {
            return Ok(self.entry(b, key).await?.is_some_and(|e| holds(&e)));
        }
        let st = self.key_state(b, key, true).await?;
        Ok(st.current.as_ref().is_some_and(holds) || st.versions.iter().any(|v| holds(&v.entry)))
    }

    /// Whether any version is recorded in `b`.
    pub async fn has_versions(&self, b: &Bucket) -> Result<bool> {
        for oid in crate::meta::index_oids(b) {
            match self.pool().omap_get_keys(&oid, b"", b"\0", 1).await {
                Ok(p) if !p.entries.is_empty() => return Ok(true),
                Ok(_) | Err(ClientError::NotFound(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(false)
    }

    /// Sets `b`'s versioning to `status` (Enabled or Suspended); on the
    /// first change, the objects written before are recorded as their null
    /// versions. The bucket as it is now.
    pub async fn set_versioning(&self, b: &Bucket, status: &str) -> Result<Bucket> {
        if status != ENABLED && status != SUSPENDED {
            return Err(MetaError::Invalid(format!(
                "versioning status {status:?}: Enabled or Suspended"
            )));
        }
        let mut nb = b.clone();
        nb.versioning = status.to_string();
        self.put_bucket(&nb).await?;
        if !nb.versions_recorded {
            self.record_unversioned(&nb).await?;
            nb.versions_recorded = true;
            self.put_bucket(&nb).await?;
        }
        Ok(nb)
    }

    /// Records every current entry written before versioning as its key's
    /// null version (idempotent: a run cut short is finished by the next).
    pub async fn record_unversioned(&self, b: &Bucket) -> Result<()> {
        let mut after = String::new();
        loop {
            let (entries, more) = self.list(b, &after, "", PAGE).await?;
            for (key, e) in &entries {
                if e.version_id.is_some() {
                    continue;
                }
                self.change_key(b, key, false, |st| {
                    let mut ch = Change::default();
                    if let Some(u) = st.unrecorded(key) {
                        ch.set.push((u.record_key(), encode(&u.entry)?));
                        ch.set.push((key.to_string(), encode(&u.entry)?));
                    }
                    Ok((ch, ()))
                })
                .await?;
            }
            match entries.last() {
                Some((k, _)) if more => after = k.clone(),
                _ => return Ok(()),
            }
        }
    }

    /// Up to `max` versions of `b` whose keys start with `prefix`, after
    /// the record named `after` (empty: from the start), in key order and
    /// newest first within a key, and whether more follow.
    pub async fn list_versions(
        &self,
        b: &Bucket,
        after: &[u8],
        prefix: &str,
        max: u32,
    ) -> Result<(Vec<Version>, bool)> {
        let vprefix = format!("\0{prefix}");
        let reads = crate::meta::index_oids(b).into_iter().map(|oid| {
            let vprefix = vprefix.clone();
            async move {
                self.pool()
                    .omap_get_vals(&oid, after, vprefix.as_bytes(), max)
                    .await
            }
        });
        let (merged, more) =
            crate::meta::merge_pages(futures_util::future::join_all(reads).await, max)?;
        let mut out = Vec::with_capacity(merged.len());
        for (k, v) in merged {
            out.push(self.version_of(b, &k, &v)?);
        }
        Ok((out, more))
    }

    /// The record name a listing resumes after, from its key and version
    /// id markers (no version id: past every version of the key).
    pub async fn version_cursor(&self, b: &Bucket, key: &str, vid: &str) -> Result<Vec<u8>> {
        if key.is_empty() {
            return Ok(Vec::new());
        }
        let past_key = || {
            let mut c = key_prefix(key).into_bytes();
            c.push(0xFF);
            c
        };
        if vid.is_empty() {
            return Ok(past_key());
        }
        if let Some(order) = order_of(vid) {
            return Ok(record_key(key, order, vid).into_bytes());
        }
        if vid == NULL {
            let st = self.key_state(b, key, true).await?;
            if let Some(v) = st.versions.iter().find(|v| v.version_id == NULL) {
                return Ok(v.record_key().into_bytes());
            }
        }
        Err(MetaError::Invalid(format!("version id marker {vid:?}")))
    }

    /// Changes `key` (version `vid`, else the current one) in place with
    /// `change`: its entry as changed, or `None` if there was no such
    /// object (or it is a delete marker).
    pub async fn update_object(
        &self,
        b: &Bucket,
        key: &str,
        vid: Option<&str>,
        change: impl Fn(&mut Entry),
    ) -> Result<Option<Entry>> {
        let mut changed = None;
        let found = self
            .change_key(b, key, vid.is_some(), |st| {
                let mut ch = Change::default();
                let target = match vid {
                    None => st.current.clone(),
                    Some(v) => match st.current.as_ref() {
                        Some(c) if c.version_id.as_deref().unwrap_or(NULL) == v => Some(c.clone()),
                        _ => st
                            .versions
                            .iter()
                            .find(|x| x.version_id == v)
                            .map(|x| x.entry.clone()),
                    },
                };
                let Some(mut e) = target.filter(|e| !e.delete_marker) else {
                    return Ok((ch, false));
                };
                change(&mut e);
                changed = Some(e.clone());
                let is_current = st
                    .current
                    .as_ref()
                    .is_some_and(|c| c.version_id == e.version_id);
                if is_current {
                    ch.set.push((key.to_string(), encode(&e)?));
                }
                if let Some(v) = st
                    .versions
                    .iter()
                    .find(|x| Some(&x.version_id) == e.version_id.as_ref())
                {
                    ch.set.push((v.record_key(), encode(&e)?));
                }
                Ok((ch, true))
            })
            .await?;
        Ok(if found { changed } else { None })
    }

    /// A delete marker's entry, made now.
    pub fn delete_marker() -> Entry {
        Entry {
            mtime_ms: now_ms(),
            delete_marker: true,
            ..Entry::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_sort_by_key_then_newest_first() {
        let a_new = record_key("a", 10, &format!("{:016x}0000000a", 10));
        let a_old = record_key("a", 20, NULL);
        let ab = record_key("ab", 5, &format!("{:016x}0000000b", 5));
        let mut v = vec![ab.clone(), a_old.clone(), a_new.clone()];
        v.sort();
        assert_eq!(v, vec![a_new.clone(), a_old.clone(), ab]);
        assert_eq!(
            parse_record(a_old.as_bytes()),
            Some(("a".into(), 20, NULL.into()))
        );
        let (k, o, vid) = parse_record(a_new.as_bytes()).unwrap();
        assert_eq!((k.as_str(), o, order_of(&vid)), ("a", 10, Some(10)));
        assert_eq!(parse_record(b"\0a\0nothex"), None);
        assert!(valid_vid(NULL) && !valid_vid("x") && !valid_vid(""));
    }
}
