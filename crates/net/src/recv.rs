//! Receiving a frame's large data part (a 4 MiB read's reply, a 4 MiB
//! write) into a buffer of its own: one reused from earlier frames when one
//! fits, read in pieces whose checksum is folded in as each lands. A fresh
//! 4 MiB buffer per frame costs page faults and the kernel's zeroing of its
//! pages, and a checksum pass after the whole part has arrived reads it back
//! from memory; both were a third of a reading client's CPU.

use std::sync::{Mutex, PoisonError};

use bytes::Bytes;
use shoal_proto::LargeData;
use tokio::io::{AsyncRead, AsyncReadExt};

/// Data parts at least this long are received this way.
pub(crate) const LARGE_DATA_BYTES: usize = 256 << 10;
/// Bytes read (and checksummed) at a time: small enough to stay in cache.
const PIECE_BYTES: usize = 256 << 10;

/// Buffers of received data parts, kept for later frames once dropped.
#[derive(Debug, Default)]
pub(crate) struct RecvPool {
    free: Mutex<Vec<Vec<u8>>>,
}

impl RecvPool {
    /// Bytes of free buffers kept at most.
    const KEEP_BYTES: usize = 64 << 20;

    /// An empty buffer with room for `len` bytes: a kept one when one fits
    /// without wasting half of itself (the data may be kept long, by a
    /// memory store), else a new one.
    fn take(&self, len: usize) -> Vec<u8> {
        let mut free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
        let best = (0..free.len())
            .filter(|&i| (len..=len.saturating_mul(2)).contains(&free[i].capacity()))
            .min_by_key(|&i| free[i].capacity());
        match best {
            Some(i) => free.swap_remove(i),
            None => Vec::with_capacity(len),
        }
    }

    fn give_back(&self, mut buf: Vec<u8>) {
        let mut free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
        let kept: usize = free.iter().map(Vec::capacity).sum();
        if kept + buf.capacity() <= Self::KEEP_BYTES {
            buf.clear();
            free.push(buf);
        }
    }

    /// Free buffers kept.
    #[cfg(test)]
    fn kept(&self) -> usize {
        self.free.lock().map_or(0, |f| f.len())
    }
}

/// The process's pool: every connection's large parts share it.
static POOL: RecvPool = RecvPool {
    free: Mutex::new(Vec::new()),
};

/// A pooled buffer lent to a [`Bytes`].
struct Lent {
    buf: Vec<u8>,
    pool: &'static RecvPool,
}

impl AsRef<[u8]> for Lent {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        self.pool.give_back(std::mem::take(&mut self.buf));
    }
}

/// Receives `large`'s data part: first the bytes of it already in `buf`,
/// then from `r`. `Ok(None)` when `r` ends first.
pub(crate) async fn receive<R: AsyncRead + Unpin + ?Sized>(
    r: &mut R,
    buf: &mut bytes::BytesMut,
    large: &mut LargeData,
) -> std::io::Result<Option<Bytes>> {
    receive_with(&POOL, r, buf, large).await
}

async fn receive_with<R: AsyncRead + Unpin + ?Sized>(
    pool: &'static RecvPool,
    r: &mut R,
    buf: &mut bytes::BytesMut,
    large: &mut LargeData,
) -> std::io::Result<Option<Bytes>> {
    let mut data = Lent {
        buf: pool.take(large.remaining()),
        pool,
    };
    let first = buf.split_to(buf.len().min(large.remaining()));
    large.landed(&first);
    data.buf.extend_from_slice(&first);
    while large.remaining() > 0 {
        let at = data.buf.len();
        let want = large.remaining().min(PIECE_BYTES) as u64;
        if (&mut *r).take(want).read_buf(&mut data.buf).await? == 0 {
            return Ok(None);
        }
        large.landed(&data.buf[at..]);
    }
    Ok(Some(Bytes::from_owner(data)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_proto::{FrameDecoder, FrameFlags, FrameLimits, encode_frame};

    static P: RecvPool = RecvPool {
        free: Mutex::new(Vec::new()),
    };

    /// Decodes `frame`, of which the first `arrived` bytes are in the
    /// buffer and the rest come from the stream, up to `end`.
    async fn land(frame: &[u8], arrived: usize, end: usize) -> (LargeData, Option<Bytes>) {
        let mut d =
            FrameDecoder::new(FrameLimits::default()).with_large_data_from(LARGE_DATA_BYTES);
        let mut buf = bytes::BytesMut::from(&frame[..arrived]);
        assert_eq!(d.decode(&mut buf).unwrap(), None);
        assert_eq!(buf.len(), arrived, "nothing reserved or taken");
        let mut large = d.take_large(&mut buf).unwrap().unwrap();
        let mut rest = &frame[arrived..end];
        let got = receive_with(&P, &mut rest, &mut buf, &mut large)
            .await
            .unwrap();
        (large, got)
    }

    #[tokio::test]
    async fn a_large_part_lands_in_a_reused_buffer_and_its_checksum_is_checked() {
        let data: Vec<u8> = (0..(1usize << 20) + 7).map(|i| (i % 249) as u8).collect();
        let frame = encode_frame(7, FrameFlags::default(), 3, b"control", &data);
        // The header, control and a little data arrived; the rest is to read.
        let (large, got) = land(&frame, 100, frame.len()).await;
        assert_eq!(&large.control[..], b"control");
        let f = large.finish(got.unwrap()).unwrap();
        assert_eq!(&f.data[..], &data[..]);
        assert_eq!(f.header.tid, 3);
        let at = f.data.as_ptr();
        drop(f);
        assert_eq!(P.kept(), 1);
        // The next one lands in the same memory; a damaged byte fails its
        // checksum.
        let mut bad = frame.to_vec();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        let (large, got) = land(&bad, 200, bad.len()).await;
        let got = got.unwrap();
        assert_eq!(got.as_ptr(), at);
        assert!(matches!(
            large.finish(got),
            Err(shoal_proto::FrameError::BadDataCrc { .. })
        ));
        // A stream that ends early is told apart.
        assert!(land(&frame, 200, 5000).await.1.is_none());
    }
}
