//! A small bounded binary codec shared by Shoal's map encodings: fixed-width
//! little-endian integers and length-prefixed strings and sequences. Readers
//! never trust a length: every count is checked against the bytes left.

use crate::error::CrushError;

/// Appends values to a byte vector.
#[derive(Debug, Default)]
pub struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    /// An empty writer.
    pub fn new() -> Self {
        Writer::default()
    }
    /// The bytes written so far.
    pub fn finish(self) -> Vec<u8> {
        self.buf
    }
    /// Writes one byte.
    pub fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }
    /// Writes a little-endian u16.
    pub fn u16(&mut self, v: u16) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    /// Writes a little-endian u32.
    pub fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    /// Writes a little-endian i32.
    pub fn i32(&mut self, v: i32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    /// Writes a little-endian u64.
    pub fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    /// Writes a length (u32).
    pub fn len(&mut self, n: usize) {
        self.u32(u32::try_from(n).unwrap_or(u32::MAX));
    }
    /// Writes a length-prefixed UTF-8 string.
    pub fn str(&mut self, s: &str) {
        self.len(s.len());
        self.buf.extend_from_slice(s.as_bytes());
    }
    /// Writes raw bytes with a length prefix.
    pub fn bytes(&mut self, b: &[u8]) {
        self.len(b.len());
        self.buf.extend_from_slice(b);
    }
}

/// Reads values back, failing (never panicking) on short or bad input.
#[derive(Debug)]
pub struct Reader<'a> {
    buf: &'a [u8],
}

type R<T> = Result<T, CrushError>;

fn short() -> CrushError {
    CrushError::Decode("truncated input".into())
}

impl<'a> Reader<'a> {
    /// Reads from `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf }
    }
    /// Bytes not consumed yet.
    pub fn remaining(&self) -> usize {
        self.buf.len()
    }
    fn take(&mut self, n: usize) -> R<&'a [u8]> {
        if self.buf.len() < n {
            return Err(short());
        }
        let (a, b) = self.buf.split_at(n);
        self.buf = b;
        Ok(a)
    }
    fn array<const N: usize>(&mut self) -> R<[u8; N]> {
        let s = self.take(N)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }
    /// Reads one byte.
    pub fn u8(&mut self) -> R<u8> {
        Ok(self.array::<1>()?[0])
    }
    /// Reads a little-endian u16.
    pub fn u16(&mut self) -> R<u16> {
        Ok(u16::from_le_bytes(self.array()?))
    }
    /// Reads a little-endian u32.
    pub fn u32(&mut self) -> R<u32> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    /// Reads a little-endian i32.
    pub fn i32(&mut self) -> R<i32> {
        Ok(i32::from_le_bytes(self.array()?))
    }
    /// Reads a little-endian u64.
    pub fn u64(&mut self) -> R<u64> {
        Ok(u64::from_le_bytes(self.array()?))
    }
    /// Reads a count of elements each at least `min_size` bytes long,
    /// rejecting counts the remaining input cannot hold.
    pub fn count(&mut self, min_size: usize) -> R<usize> {
        let n = self.u32()? as usize;
        if n.saturating_mul(min_size.max(1)) > self.buf.len() {
            return Err(CrushError::Decode(format!("count {n} exceeds input")));
        }
        Ok(n)
    }
    /// Reads a length-prefixed UTF-8 string.
    pub fn str(&mut self) -> R<String> {
        let n = self.count(1)?;
        let b = self.take(n)?;
        String::from_utf8(b.to_vec()).map_err(|_| CrushError::Decode("invalid UTF-8".into()))
    }
    /// Reads length-prefixed raw bytes.
    pub fn bytes(&mut self) -> R<&'a [u8]> {
        let n = self.count(1)?;
        self.take(n)
    }
}
