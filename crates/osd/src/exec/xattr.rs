//! Sub-operations on user xattrs. User xattr `k` is stored as `u.k`; the
//! OSD's own xattrs (the object metadata) are never shown or changed here.
//! Xattr reads see the op's own earlier `SetXattr` and `RmXattr`.

use std::collections::BTreeMap;

use bytes::Bytes;
use shoal_proto::{CmpOp, OsdErrorCode, OsdSubOp, OsdSubOpResult};

use super::{Exec, ExecError, err};
use crate::object::USER_XATTR_PREFIX;

fn stored_name(name: &str) -> String {
    format!("{USER_XATTR_PREFIX}{name}")
}

impl Exec<'_> {
    /// User xattr `name` as the op has left it.
    fn xattr(&self, i: usize, name: &str) -> Result<Option<Bytes>, ExecError> {
        let stored = stored_name(name);
        if let Some(v) = self.st.xattrs.get(&stored) {
            return Ok(v.clone());
        }
        if !self.stored() {
            return Ok(None);
        }
        self.input
            .store
            .getxattr(&self.input.coll, &self.input.key, &stored)
            .map_err(|e| self.store_err(i, e))
    }

    fn no_data(i: usize, name: &str) -> ExecError {
        err(OsdErrorCode::NoData, i, format!("no xattr {name}"))
    }

    pub(super) fn get_xattr(&mut self, i: usize, op: &OsdSubOp) -> Result<(), ExecError> {
        self.need_exists(i)?;
        let v = self
            .xattr(i, &op.name)?
            .ok_or_else(|| Self::no_data(i, &op.name))?;
        self.ok_data(v);
        Ok(())
    }

    /// Every user xattr: names (without the prefix) in `names`, values in
    /// `values`, in name order.
    pub(super) fn get_xattrs(&mut self, i: usize) -> Result<(), ExecError> {
        self.need_exists(i)?;
        let mut all: BTreeMap<String, Bytes> = if self.stored() {
            self.input
                .store
                .getxattrs(&self.input.coll, &self.input.key)
                .map_err(|e| self.store_err(i, e))?
        } else {
            BTreeMap::new()
        };
        for (k, v) in &self.st.xattrs {
            match v {
                Some(v) => all.insert(k.clone(), v.clone()),
                None => all.remove(k),
            };
        }
        let mut r = OsdSubOpResult::default();
        for (k, v) in all {
            if let Some(name) = k.strip_prefix(USER_XATTR_PREFIX) {
                r.names.push(name.to_string());
                r.values.push(v.to_vec());
            }
        }
        self.results.push(r);
        Ok(())
    }

    /// Sets `name` to the payload; creates the object.
    pub(super) fn set_xattr(&mut self, op: &OsdSubOp, value: Bytes) -> Result<(), ExecError> {
        let stored = stored_name(&op.name);
        self.create();
        let attrs = BTreeMap::from([(stored.clone(), value.clone())]);
        self.txn.set_xattrs(self.c(), self.k(), attrs);
        self.st.xattrs.insert(stored, Some(value));
        self.ok();
        Ok(())
    }

    pub(super) fn rm_xattr(&mut self, i: usize, op: &OsdSubOp) -> Result<(), ExecError> {
        self.need_exists(i)?;
        if self.xattr(i, &op.name)?.is_none() {
            return Err(Self::no_data(i, &op.name));
        }
        let stored = stored_name(&op.name);
        self.txn.remove_xattr(self.c(), self.k(), stored.clone());
        self.st.xattrs.insert(stored, None);
        self.ok();
        Ok(())
    }

    /// Guard: the stored value (absent: empty) compared with the payload by
    /// `cmp`, as byte strings.
    pub(super) fn cmp_xattr(
        &mut self,
        i: usize,
        op: &OsdSubOp,
        given: &[u8],
    ) -> Result<(), ExecError> {
        self.need_exists(i)?;
        let have = self.xattr(i, &op.name)?.unwrap_or_default();
        let have = have.as_ref();
        let holds = match CmpOp::from_u32(op.cmp) {
            Some(CmpOp::Eq) => have == given,
            Some(CmpOp::Ne) => have != given,
            Some(CmpOp::Gt) => have > given,
            Some(CmpOp::Gte) => have >= given,
            Some(CmpOp::Lt) => have < given,
            Some(CmpOp::Lte) => have <= given,
            None => {
                let m = format!("unknown comparison {}", op.cmp);
                return Err(err(OsdErrorCode::InvalidArgument, i, m));
            }
        };
        if !holds {
            let m = format!("xattr {} comparison failed", op.name);
            return Err(err(OsdErrorCode::CompareFailed, i, m));
        }
        self.ok();
        Ok(())
    }
}
