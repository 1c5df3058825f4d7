//! A blocking facade for simple programs: the same client on its own
//! runtime, one call at a time.

use std::path::Path;

use bytes::Bytes;

use crate::error::{Error, Result};
use crate::op::ObjectStat;
use crate::pool::ObjectEntry;

/// A blocking client.
#[derive(Debug)]
pub struct Client {
    rt: tokio::runtime::Runtime,
    inner: crate::Client,
}

/// A pool of a blocking client.
#[derive(Debug)]
pub struct Pool<'a> {
    rt: &'a tokio::runtime::Runtime,
    inner: crate::Pool,
}

impl Client {
    /// Connects as configured in `conf` (or `$SHOAL_CONF`) for `name`.
    pub fn connect_config(conf: Option<&Path>, name: &str) -> Result<Client> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .map_err(|e| Error::Internal(format!("runtime: {e}")))?;
        let inner = rt.block_on(crate::Client::connect_config(conf, name))?;
        Ok(Client { rt, inner })
    }

    /// Opens pool `name`.
    pub fn pool(&self, name: &str) -> Result<Pool<'_>> {
        Ok(Pool {
            rt: &self.rt,
            inner: self.inner.pool(name)?,
        })
    }
}

impl Pool<'_> {
    /// Replaces the object's data.
    pub fn put(&self, oid: &str, data: impl Into<Bytes>) -> Result<()> {
        self.rt.block_on(self.inner.write_full(oid, data))
    }

    /// Reads the whole object.
    pub fn get(&self, oid: &str) -> Result<Bytes> {
        self.rt.block_on(self.inner.read(oid, 0, 0))
    }

    /// Size, mtime and version.
    pub fn stat(&self, oid: &str) -> Result<ObjectStat> {
        self.rt.block_on(self.inner.stat(oid))
    }

    /// Removes the object.
    pub fn remove(&self, oid: &str) -> Result<()> {
        self.rt.block_on(self.inner.remove(oid))
    }

    /// Every object of the pool.
    pub fn list(&self) -> Result<Vec<ObjectEntry>> {
        self.rt.block_on(self.inner.list_all())
    }
}
