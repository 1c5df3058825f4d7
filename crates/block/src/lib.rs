//! Block images on the object cluster, as librbd builds them on librados:
//! an image is a header object (size, object size, features, data pool)
//! and data objects named from the image's id and object number, created
//! only when first written (thin provisioning: what was never written reads
//! as zeros). A pool's directory names its images. An object map records
//! which data objects exist, so the lock holder answers reads of unwritten
//! ranges without a round trip and `du`, `rm` and shrinking visit only what
//! exists. One writer at a time: the first change takes the image's
//! exclusive lock. Data objects may live in an erasure-coded pool
//! (`--data-pool`) while the header stays in a replicated one.
//!
//! The API is asynchronous; [`blocking`] wraps it for simple programs.
//!
//! ```no_run
//! # async fn demo(pool: shoal_client::Pool) -> shoal_block::Result<()> {
//! use shoal_block::{CreateOptions, Image, rbd};
//! rbd::create(&pool, "disk", 10 << 30, &CreateOptions::default()).await?;
//! let image = Image::open(&pool, "disk").await?;
//! image.write(4096, bytes::Bytes::from_static(b"hello")).await?;
//! assert_eq!(&image.read(4096, 5).await?[..], b"hello");
//! image.close().await?;
//! # Ok(()) }
//! ```

mod error;
mod image;

pub mod blocking;
pub mod format;
pub mod layering;
pub mod lock;
pub mod rbd;

pub use error::{Error, Result};
pub use image::{DiskUsage, Image, ImageInfo};
pub use layering::ChildEntry;
pub use rbd::{CreateOptions, ImageEntry};
