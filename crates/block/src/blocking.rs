//! A blocking facade: an [`Image`](crate::Image) driven from synchronous
//! code on a runtime the caller owns (the blocking client's).

use bytes::Bytes;

use crate::error::Result;
use crate::image::{DiskUsage, ImageInfo};

/// An open image for synchronous code.
#[derive(Debug)]
pub struct Image<'a> {
    client: &'a shoal_client::blocking::Client,
    inner: crate::Image,
}

impl<'a> Image<'a> {
    /// Opens image `name` of pool `pool` for reading and writing.
    pub fn open(
        client: &'a shoal_client::blocking::Client,
        pool: &str,
        name: &str,
    ) -> Result<Self> {
        let p = client.inner().pool(pool)?;
        let inner = client.block_on(crate::Image::open(&p, name))?;
        Ok(Image { client, inner })
    }

    /// Creates image `name` of `size` bytes in pool `pool` with default options.
    pub fn create(
        client: &shoal_client::blocking::Client,
        pool: &str,
        name: &str,
        size: u64,
    ) -> Result<()> {
        let p = client.inner().pool(pool)?;
        client.block_on(crate::rbd::create(&p, name, size, &Default::default()))
    }

    /// The asynchronous image inside.
    pub fn inner(&self) -> &crate::Image {
        &self.inner
    }

    /// See [`crate::Image::read`].
    pub fn read(&self, offset: u64, len: u64) -> Result<Bytes> {
        self.client.block_on(self.inner.read(offset, len))
    }

    /// See [`crate::Image::write`].
    pub fn write(&self, offset: u64, data: impl Into<Bytes>) -> Result<()> {
        self.client.block_on(self.inner.write(offset, data.into()))
    }

    /// See [`crate::Image::discard`].
    pub fn discard(&self, offset: u64, len: u64) -> Result<()> {
        self.client.block_on(self.inner.discard(offset, len))
    }

    /// See [`crate::Image::write_zeroes`].
    pub fn write_zeroes(&self, offset: u64, len: u64) -> Result<()> {
        self.client.block_on(self.inner.write_zeroes(offset, len))
    }

    /// See [`crate::Image::flush`].
    pub fn flush(&self) -> Result<()> {
        self.client.block_on(self.inner.flush())
    }

    /// See [`crate::Image::resize`].
    pub fn resize(&self, size: u64) -> Result<()> {
        self.client.block_on(self.inner.resize(size))
    }

    /// See [`crate::Image::info`].
    pub fn info(&self) -> ImageInfo {
        self.inner.info()
    }

    /// See [`crate::Image::du`].
    pub fn du(&self) -> Result<DiskUsage> {
        self.client.block_on(self.inner.du())
    }

    /// Closes the image, giving up its lock.
    pub fn close(self) -> Result<()> {
        self.client.block_on(self.inner.close())
    }
}
