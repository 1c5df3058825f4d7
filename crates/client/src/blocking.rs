//! A blocking facade for simple programs: the same client on its own
//! runtime, one call at a time.

use std::path::Path;

use bytes::Bytes;

use crate::client::ClientOptions;
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

fn runtime() -> Result<tokio::runtime::Runtime> {
    // One worker: the client's connection tasks run between blocking calls.
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| Error::Internal(format!("runtime: {e}")))
}

impl Client {
    /// Connects with `opts`.
    pub fn connect(opts: ClientOptions) -> Result<Client> {
        let rt = runtime()?;
        let inner = rt.block_on(crate::Client::connect(opts))?;
        Ok(Client { rt, inner })
    }

    /// Connects as configured in `conf` (or `$SHOAL_CONF`) for `name`.
    pub fn connect_config(conf: Option<&Path>, name: &str) -> Result<Client> {
        let rt = runtime()?;
        let inner = rt.block_on(crate::Client::connect_config(conf, name))?;
        Ok(Client { rt, inner })
    }

    /// The asynchronous client inside, for what the facade lacks (run its
    /// futures with [`Client::block_on`]).
    pub fn inner(&self) -> &crate::Client {
        &self.inner
    }

    /// Runs a future of the asynchronous API to completion.
    pub fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
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
    /// The same pool, in namespace `nspace`.
    pub fn with_namespace(&self, nspace: &str) -> Self {
        Pool {
            rt: self.rt,
            inner: self.inner.with_namespace(nspace),
        }
    }

    /// Writes `data` at `offset`.
    pub fn write(&self, oid: &str, offset: u64, data: impl Into<Bytes>) -> Result<()> {
        self.rt.block_on(self.inner.write(oid, offset, data))
    }

    /// Reads `len` bytes at `offset` (`len` 0: to the end).
    pub fn read(&self, oid: &str, offset: u64, len: u64) -> Result<Bytes> {
        self.rt.block_on(self.inner.read(oid, offset, len))
    }

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

    /// Every object of the pool (of every namespace).
    pub fn list(&self) -> Result<Vec<ObjectEntry>> {
        self.rt.block_on(self.inner.list_all())
    }
}
