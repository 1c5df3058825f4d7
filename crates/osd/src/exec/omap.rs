//! Sub-operations on the omap and its header. Changes are only buffered into
//! the transaction: omap reads see the omap stored before the op (empty for
//! an object the op created or recreated).

use std::collections::BTreeMap;
use std::ops::Bound;

use bytes::Bytes;
use shoal_proto::{OsdSubOp, OsdSubOpResult};

use super::{Exec, ExecError, OMAP_LIST_DEFAULT, OMAP_LIST_MAX};

/// The first key after every key starting with `prefix` (`None`: no such
/// key, the prefix is empty or all `0xff`).
fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if let Some(next) = last.checked_add(1) {
            end.push(next);
            return Some(end);
        }
    }
    None
}

fn keys(op: &OsdSubOp) -> impl Iterator<Item = Bytes> + '_ {
    op.keys.iter().map(|k| Bytes::copy_from_slice(k))
}

impl Exec<'_> {
    /// Entries (or keys) after `start_after` that start with `prefix`, at
    /// most `max`; `more` says whether further ones match.
    pub(super) fn omap_list(
        &mut self,
        i: usize,
        op: &OsdSubOp,
        values: bool,
    ) -> Result<(), ExecError> {
        self.need_exists(i)?;
        let mut r = OsdSubOpResult::default();
        let max = match op.max {
            0 => OMAP_LIST_DEFAULT,
            m => m.min(OMAP_LIST_MAX),
        } as usize;
        let prefix = op.prefix.as_slice();
        let after = op.start_after.as_slice();
        let end_key = prefix_end(prefix);
        let start = if !after.is_empty() && after >= prefix {
            Bound::Excluded(after)
        } else if prefix.is_empty() {
            Bound::Unbounded
        } else {
            Bound::Included(prefix)
        };
        let end = end_key.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
        let past_end = matches!((start, end), (Bound::Excluded(s), Bound::Excluded(e)) if s >= e);
        if self.stored() && !past_end {
            // One more than asked tells whether more follow.
            let mut page = self
                .input
                .store
                .omap_range(&self.input.coll, &self.input.key, start, end, max + 1)
                .map_err(|e| self.store_err(i, e))?;
            if page.len() > max {
                page.truncate(max);
                r.more = true;
            }
            for (k, v) in page {
                r.keys.push(k.to_vec());
                if values {
                    r.values.push(v.to_vec());
                }
            }
        }
        self.results.push(r);
        Ok(())
    }

    /// The values of those `keys` that exist, in key order.
    pub(super) fn omap_get_by_keys(&mut self, i: usize, op: &OsdSubOp) -> Result<(), ExecError> {
        self.need_exists(i)?;
        let mut r = OsdSubOpResult::default();
        if self.stored() && !op.keys.is_empty() {
            let want: Vec<Bytes> = keys(op).collect();
            let got = self
                .input
                .store
                .omap_get_values(&self.input.coll, &self.input.key, &want)
                .map_err(|e| self.store_err(i, e))?;
            for (k, v) in got {
                r.keys.push(k.to_vec());
                r.values.push(v.to_vec());
            }
        }
        self.results.push(r);
        Ok(())
    }

    pub(super) fn omap_get_header(&mut self, i: usize) -> Result<(), ExecError> {
        self.need_exists(i)?;
        let h = if self.stored() {
            self.input
                .store
                .omap_get_header(&self.input.coll, &self.input.key)
                .map_err(|e| self.store_err(i, e))?
        } else {
            Bytes::new()
        };
        self.ok_data(h);
        Ok(())
    }

    /// Sets `keys` to `values` (paired, checked by `validate`); creates the object.
    pub(super) fn omap_set(&mut self, op: &OsdSubOp) -> Result<(), ExecError> {
        self.create();
        let kv: BTreeMap<Bytes, Bytes> = keys(op)
            .zip(op.values.iter().map(|v| Bytes::copy_from_slice(v)))
            .collect();
        if !kv.is_empty() {
            self.txn.omap_set_keys(self.c(), self.k(), kv);
        }
        self.ok();
        Ok(())
    }

    /// Removes `keys` (absent ones are ignored).
    pub(super) fn omap_rm(&mut self, i: usize, op: &OsdSubOp) -> Result<(), ExecError> {
        self.need_exists(i)?;
        if !op.keys.is_empty() {
            self.txn
                .omap_remove_keys(self.c(), self.k(), keys(op).collect());
        }
        self.ok();
        Ok(())
    }

    /// Removes every entry and the header.
    pub(super) fn omap_clear(&mut self, i: usize) -> Result<(), ExecError> {
        self.need_exists(i)?;
        self.txn.omap_clear(self.c(), self.k());
        self.ok();
        Ok(())
    }

    /// Sets the header to the payload; creates the object.
    pub(super) fn omap_set_header(&mut self, header: Bytes) -> Result<(), ExecError> {
        self.create();
        self.txn.omap_set_header(self.c(), self.k(), header);
        self.ok();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::prefix_end;

    #[test]
    fn prefix_end_is_the_first_key_past_the_prefix() {
        assert_eq!(prefix_end(b""), None);
        assert_eq!(prefix_end(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_end(b"a\xff\xff"), Some(b"b".to_vec()));
        assert_eq!(prefix_end(b"\xff"), None);
    }
}
