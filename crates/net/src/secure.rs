//! The secure mode's record layer: after a handshake that agreed on
//! `ms_mode = secure`, every byte a connection carries (frame headers,
//! control and data parts alike) travels inside sealed records.
//!
//! ```text
//! record = len: u32 (LE, plaintext bytes, 1..=RECORD_BYTES_MAX)
//!          ciphertext: len bytes
//!          tag: 16 bytes
//! ```
//!
//! Each record is sealed with AES-256-GCM (or ChaCha20-Poly1305 where
//! either end lacks AES instructions) under a key of its own direction,
//! derived with HKDF-SHA256 from the key the handshake proved and its
//! transcript (both ends' nonces, so every connection's keys are new). The
//! nonce is the record's sequence number in its direction, never sent and
//! never reused; the length is authenticated with the record. A record that
//! was altered, replayed, reordered or dropped fails to open under the
//! sequence number the reader expects, and a stream that ends inside a
//! record is truncated: either way the reader returns an error, the
//! connection closes, and no byte of that record reaches the frame decoder.
//! The writer seals up to [`RECORD_BYTES_MAX`] of whatever frames it was
//! given at once, so a batch of small frames costs one seal. Every
//! [`REKEY_RECORDS`] records a direction moves to a new key derived from
//! its current secret (both ends count, so no message is needed): an
//! OSD-to-OSD connection that lives for months never seals more under one
//! AES-GCM key than TLS 1.3's usage limits allow.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use ring::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey};
use ring::hkdf;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Most plaintext bytes in one record.
pub(crate) const RECORD_BYTES_MAX: usize = 256 << 10;
const LEN_BYTES: usize = 4;
const TAG_BYTES: usize = 16;
/// Bytes read from the socket at a time while a record is short of them.
const READ_CHUNK: usize = 64 << 10;
/// Records sealed under one key before a direction moves to the next:
/// at most 256 GiB (2^20 records of 256 KiB), below the 2^24.5 full TLS
/// records (~390 GB) RFC 8446 allows an AES-GCM key.
pub(crate) const REKEY_RECORDS: u64 = 1 << 20;

/// The connection mode, `ms_mode` and its finer options.
pub use shoal_config::MsMode;

/// A record cipher both ends support.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cipher {
    /// AES-256-GCM: the choice when both ends have AES instructions.
    Aes256Gcm,
    /// ChaCha20-Poly1305: fast without AES instructions.
    ChaCha20Poly1305,
}

impl Cipher {
    /// Its number in the handshake.
    pub(crate) fn wire(self) -> u32 {
        match self {
            Cipher::Aes256Gcm => 1,
            Cipher::ChaCha20Poly1305 => 2,
        }
    }

    /// The cipher numbered `v` in the handshake.
    pub(crate) fn from_wire(v: u32) -> Option<Cipher> {
        match v {
            1 => Some(Cipher::Aes256Gcm),
            2 => Some(Cipher::ChaCha20Poly1305),
            _ => None,
        }
    }

    /// What this machine does best: AES-256-GCM when the CPU has AES and
    /// carry-less multiply instructions, else ChaCha20-Poly1305.
    pub fn preferred() -> Cipher {
        if aes_in_hardware() {
            Cipher::Aes256Gcm
        } else {
            Cipher::ChaCha20Poly1305
        }
    }

    /// The cipher two ends use: AES only when both prefer it.
    pub fn agree(a: Cipher, b: Cipher) -> Cipher {
        if a == Cipher::Aes256Gcm && b == Cipher::Aes256Gcm {
            Cipher::Aes256Gcm
        } else {
            Cipher::ChaCha20Poly1305
        }
    }

    fn algorithm(self) -> &'static aead::Algorithm {
        match self {
            Cipher::Aes256Gcm => &aead::AES_256_GCM,
            Cipher::ChaCha20Poly1305 => &aead::CHACHA20_POLY1305,
        }
    }
}

impl std::fmt::Display for Cipher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Cipher::Aes256Gcm => "aes-256-gcm",
            Cipher::ChaCha20Poly1305 => "chacha20-poly1305",
        })
    }
}

#[cfg(target_arch = "x86_64")]
fn aes_in_hardware() -> bool {
    std::arch::is_x86_feature_detected!("aes") && std::arch::is_x86_feature_detected!("pclmulqdq")
}

#[cfg(target_arch = "aarch64")]
fn aes_in_hardware() -> bool {
    std::arch::is_aarch64_feature_detected!("aes")
        && std::arch::is_aarch64_feature_detected!("pmull")
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn aes_in_hardware() -> bool {
    false
}

/// The two directions' secrets of one connection, as one end sees them.
pub(crate) struct SessionKeys {
    pub cipher: Cipher,
    send: hkdf::Prk,
    recv: hkdf::Prk,
}

impl std::fmt::Debug for SessionKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SessionKeys({})", self.cipher)
    }
}

impl SessionKeys {
    /// Derives a connection's keys from the key the handshake proved and
    /// its transcript. The connector sends with the "c2s" key and the
    /// acceptor with the "s2c" one.
    pub(crate) fn derive(
        secret: &[u8],
        transcript: &[u8],
        cipher: Cipher,
        connector: bool,
    ) -> SessionKeys {
        let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, transcript).extract(secret);
        let (c2s, s2c) = (expand_secret(&prk, b"c2s"), expand_secret(&prk, b"s2c"));
        let (send, recv) = if connector { (c2s, s2c) } else { (s2c, c2s) };
        SessionKeys { cipher, send, recv }
    }

    /// The reading and writing halves' states.
    pub(crate) fn split(self) -> (Opener, Sealer) {
        self.split_rekeying_every(REKEY_RECORDS)
    }

    fn split_rekeying_every(self, every: u64) -> (Opener, Sealer) {
        (
            Opener(Direction::new(self.recv, self.cipher, every)),
            Sealer(Direction::new(self.send, self.cipher, every)),
        )
    }
}

/// `HKDF-Expand(prk, "shoal-secure-v1 " | label)` as a new secret.
fn expand_secret(prk: &hkdf::Prk, label: &[u8]) -> hkdf::Prk {
    let info = [b"shoal-secure-v1 ".as_slice(), label];
    // `expand` fails only for outputs longer than 255 hash blocks; these
    // are one.
    let okm = prk
        .expand(&info, hkdf::HKDF_SHA256)
        .unwrap_or_else(|_| unreachable!("a secret fits one HKDF expansion"));
    hkdf::Prk::from(okm)
}

/// The AEAD key of a direction's secret.
fn aead_key(secret: &hkdf::Prk, cipher: Cipher) -> LessSafeKey {
    let info = [b"shoal-secure-v1 key".as_slice()];
    let okm = secret
        .expand(&info, cipher.algorithm())
        .unwrap_or_else(|_| unreachable!("an AEAD key fits one HKDF expansion"));
    LessSafeKey::new(UnboundKey::from(okm))
}

/// One direction's secret, key and record count.
struct Direction {
    cipher: Cipher,
    secret: hkdf::Prk,
    key: LessSafeKey,
    seq: u64,
    rekey_every: u64,
}

impl Direction {
    fn new(secret: hkdf::Prk, cipher: Cipher, rekey_every: u64) -> Direction {
        Direction {
            cipher,
            key: aead_key(&secret, cipher),
            secret,
            seq: 0,
            rekey_every: rekey_every.max(1),
        }
    }

    /// The next record's sequence number and nonce, moving to the next
    /// key first when this record starts a new interval.
    fn next(&mut self) -> io::Result<(u64, Nonce)> {
        let seq = self.seq;
        if seq > 0 && seq % self.rekey_every == 0 {
            self.secret = expand_secret(&self.secret, b"next");
            self.key = aead_key(&self.secret, self.cipher);
        }
        self.seq = seq.checked_add(1).ok_or_else(exhausted)?;
        Ok((seq, nonce(seq)))
    }
}

fn nonce(seq: u64) -> Nonce {
    let mut n = [0u8; aead::NONCE_LEN];
    n[4..].copy_from_slice(&seq.to_be_bytes());
    Nonce::assume_unique_for_key(n)
}

fn exhausted() -> io::Error {
    io::Error::other("secure mode: record sequence numbers exhausted")
}

/// Seals one direction's records.
pub(crate) struct Sealer(Direction);

impl Sealer {
    /// Seals `out[LEN_BYTES..]`, whose first four bytes are reserved for
    /// the length, and appends the tag.
    fn seal(&mut self, out: &mut Vec<u8>) -> io::Result<()> {
        let len = out.len() - LEN_BYTES;
        let len_le = u32::try_from(len).map_err(|_| exhausted())?.to_le_bytes();
        out[..LEN_BYTES].copy_from_slice(&len_le);
        let (_, nonce) = self.0.next()?;
        let tag = self
            .0
            .key
            .seal_in_place_separate_tag(nonce, Aad::from(len_le), &mut out[LEN_BYTES..])
            .map_err(|_| io::Error::other("secure mode: sealing failed"))?;
        out.extend_from_slice(tag.as_ref());
        Ok(())
    }
}

/// Opens the other direction's records.
pub(crate) struct Opener(Direction);

impl Opener {
    /// Opens the record `rec` (length, ciphertext, tag) in place; returns
    /// the plaintext's range within it.
    fn open(&mut self, rec: &mut [u8]) -> io::Result<std::ops::Range<usize>> {
        let mut len_le = [0u8; LEN_BYTES];
        len_le.copy_from_slice(&rec[..LEN_BYTES]);
        let (seq, nonce) = self.0.next()?;
        let plain = self
            .0
            .key
            .open_in_place(nonce, Aad::from(len_le), &mut rec[LEN_BYTES..])
            .map_err(|_| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "secure mode: record {seq} failed its integrity check \
                         (altered, replayed, reordered or dropped on the way)"
                    ),
                )
            })?;
        Ok(LEN_BYTES..LEN_BYTES + plain.len())
    }
}

/// A read half that opens records and gives out their plaintext.
pub(crate) struct SecureReader<R> {
    inner: R,
    opener: Opener,
    /// Bytes read from the socket: `buf[start..end]`; the opened
    /// plaintext, when there is some, is `buf[plain]` at its front.
    buf: Vec<u8>,
    start: usize,
    end: usize,
    plain: std::ops::Range<usize>,
}

impl<R> SecureReader<R> {
    /// A reader of `inner` that already holds `leftover`, bytes read past
    /// the handshake.
    pub(crate) fn new(inner: R, opener: Opener, leftover: &[u8]) -> SecureReader<R> {
        let mut buf = vec![0u8; leftover.len().max(READ_CHUNK)];
        buf[..leftover.len()].copy_from_slice(leftover);
        SecureReader {
            inner,
            opener,
            buf,
            start: 0,
            end: leftover.len(),
            plain: 0..0,
        }
    }

    /// The whole length of the record at `start` if its length field has
    /// arrived; a length out of range is an error.
    fn record_len(&self) -> io::Result<Option<usize>> {
        if self.end - self.start < LEN_BYTES {
            return Ok(None);
        }
        let mut len_le = [0u8; LEN_BYTES];
        len_le.copy_from_slice(&self.buf[self.start..self.start + LEN_BYTES]);
        let len = u32::from_le_bytes(len_le) as usize;
        if len == 0 || len > RECORD_BYTES_MAX {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("secure mode: record of {len} bytes (at most {RECORD_BYTES_MAX})"),
            ));
        }
        Ok(Some(LEN_BYTES + len + TAG_BYTES))
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for SecureReader<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if !this.plain.is_empty() {
                let n = this.plain.len().min(out.remaining());
                let from = this.plain.start;
                out.put_slice(&this.buf[from..from + n]);
                this.plain.start += n;
                if this.plain.is_empty() {
                    // The record is used up: the next one starts after its tag.
                    this.start = this.plain.end + TAG_BYTES;
                    this.plain = 0..0;
                }
                return Poll::Ready(Ok(()));
            }
            if let Some(total) = this.record_len()? {
                if this.end - this.start >= total {
                    let rec = this.start..this.start + total;
                    let range = this.opener.open(&mut this.buf[rec])?;
                    this.plain = this.start + range.start..this.start + range.end;
                    continue;
                }
                // Make room for the rest of the record.
                if this.buf.len() - this.start < total {
                    this.buf.copy_within(this.start..this.end, 0);
                    this.end -= this.start;
                    this.start = 0;
                    if this.buf.len() < total {
                        this.buf.resize(total, 0);
                    }
                }
            } else if this.start == this.end {
                this.start = 0;
                this.end = 0;
            } else if this.buf.len() - this.start < LEN_BYTES {
                this.buf.copy_within(this.start..this.end, 0);
                this.end -= this.start;
                this.start = 0;
            }
            if this.end == this.buf.len() {
                let grow = this.buf.len() + READ_CHUNK;
                this.buf.resize(grow, 0);
            }
            let mut rb = ReadBuf::new(&mut this.buf[this.end..]);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut rb))?;
            let n = rb.filled().len();
            if n == 0 {
                if this.start == this.end {
                    return Poll::Ready(Ok(()));
                }
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "secure mode: the stream ended inside a record (truncated)",
                )));
            }
            this.end += n;
        }
    }
}

/// A write half that seals what it is given into records.
pub(crate) struct SecureWriter<W> {
    inner: W,
    sealer: Sealer,
    /// A sealed record, `out[sent..]` not yet written.
    out: Vec<u8>,
    sent: usize,
}

impl<W> SecureWriter<W> {
    pub(crate) fn new(inner: W, sealer: Sealer) -> SecureWriter<W> {
        SecureWriter {
            inner,
            sealer,
            out: Vec::new(),
            sent: 0,
        }
    }
}

impl<W: AsyncWrite + Unpin> SecureWriter<W> {
    /// Writes out the sealed record, if any.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.sent < self.out.len() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.out[self.sent..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.sent += n;
        }
        self.out.clear();
        self.sent = 0;
        Poll::Ready(Ok(()))
    }
}

impl<W: AsyncWrite + Unpin> AsyncWrite for SecureWriter<W> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[io::IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_drain(cx))?;
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        let take = total.min(RECORD_BYTES_MAX);
        if take == 0 {
            return Poll::Ready(Ok(0));
        }
        this.out.reserve(LEN_BYTES + take + TAG_BYTES);
        this.out.extend_from_slice(&[0; LEN_BYTES]);
        let mut left = take;
        for b in bufs {
            let n = b.len().min(left);
            this.out.extend_from_slice(&b[..n]);
            left -= n;
            if left == 0 {
                break;
            }
        }
        this.sealer.seal(&mut this.out)?;
        // Start sending now; what the socket does not take yet goes out
        // on the next write or flush.
        if let Poll::Ready(Err(e)) = this.poll_drain(cx) {
            return Poll::Ready(Err(e));
        }
        Poll::Ready(Ok(take))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn pair(cipher: Cipher) -> (SessionKeys, SessionKeys) {
        let secret = [7u8; 32];
        (
            SessionKeys::derive(&secret, b"transcript", cipher, true),
            SessionKeys::derive(&secret, b"transcript", cipher, false),
        )
    }

    /// Seals `chunks` as the connector would, one record per write.
    async fn sealed(keys: SessionKeys, chunks: &[&[u8]]) -> Vec<u8> {
        let (_, sealer) = keys.split();
        let mut w = SecureWriter::new(Vec::new(), sealer);
        for c in chunks {
            w.write_all(c).await.unwrap();
            w.flush().await.unwrap();
        }
        w.inner
    }

    async fn opened(keys: SessionKeys, wire: &[u8]) -> io::Result<Vec<u8>> {
        let (opener, _) = keys.split();
        let mut r = SecureReader::new(wire, opener, &[]);
        let mut out = Vec::new();
        r.read_to_end(&mut out).await.map(|_| out)
    }

    /// Where each record starts in `wire`.
    fn records(wire: &[u8]) -> Vec<std::ops::Range<usize>> {
        let mut at = 0;
        let mut v = Vec::new();
        while at < wire.len() {
            let len = u32::from_le_bytes(wire[at..at + 4].try_into().unwrap()) as usize;
            v.push(at..at + 4 + len + TAG_BYTES);
            at += 4 + len + TAG_BYTES;
        }
        v
    }

    #[tokio::test]
    async fn records_round_trip_in_both_ciphers_and_hide_the_payload() {
        for cipher in [Cipher::Aes256Gcm, Cipher::ChaCha20Poly1305] {
            let payload: Vec<u8> = b"known plaintext ".repeat(40_000); // 640 KB: 3 records
            let (c, s) = pair(cipher);
            let wire = sealed(c, &[b"hello", &payload, b"bye"]).await;
            assert_eq!(records(&wire).len(), 5, "{cipher}");
            assert!(
                !wire.windows(16).any(|w| w == b"known plaintext "),
                "{cipher}: plaintext on the wire"
            );
            let got = opened(s, &wire).await.unwrap();
            assert_eq!(got.len(), 5 + payload.len() + 3);
            assert_eq!(&got[..5], b"hello");
            assert_eq!(&got[5..5 + payload.len()], &payload[..]);
        }
    }

    #[tokio::test]
    async fn altered_replayed_reordered_dropped_or_truncated_records_are_refused() {
        let (c, _) = pair(Cipher::Aes256Gcm);
        let wire = sealed(c, &[b"one", b"two", b"three"]).await;
        let recs = records(&wire);
        let attacks: Vec<(&str, Vec<u8>)> = vec![
            ("a flipped bit", {
                let mut w = wire.clone();
                w[recs[1].start + 5] ^= 1;
                w
            }),
            ("a flipped length bit", {
                let mut w = wire.clone();
                w[recs[1].start] ^= 1;
                w
            }),
            ("a replayed record", {
                let mut w = wire[..recs[1].end].to_vec();
                w.extend_from_slice(&wire[recs[1].clone()]);
                w
            }),
            ("a reordered pair", {
                let mut w = wire[recs[0].clone()].to_vec();
                w.extend_from_slice(&wire[recs[2].clone()]);
                w.extend_from_slice(&wire[recs[1].clone()]);
                w
            }),
            ("a dropped record", {
                let mut w = wire[recs[0].clone()].to_vec();
                w.extend_from_slice(&wire[recs[2].clone()]);
                w
            }),
            ("a truncated record", wire[..recs[2].end - 1].to_vec()),
            ("a record from the other direction", {
                let (_, s) = pair(Cipher::Aes256Gcm);
                sealed(s, &[b"one"]).await
            }),
        ];
        for (what, w) in attacks {
            let (_, s) = pair(Cipher::Aes256Gcm);
            let (opener, _) = s.split();
            let mut r = SecureReader::new(&w[..], opener, &[]);
            let mut got = Vec::new();
            let err = r.read_to_end(&mut got).await.unwrap_err();
            // Only records before the damaged one were given out, whole.
            assert!(
                got.is_empty() || got == b"one" || got == b"onetwo",
                "{what}: {got:?}"
            );
            assert!(
                err.to_string().contains("integrity") || err.to_string().contains("truncated"),
                "{what}: {err}"
            );
        }
    }

    #[tokio::test]
    async fn keys_differ_per_connection_and_direction() {
        let secret = [9u8; 32];
        let a = SessionKeys::derive(&secret, b"nonces of connection 1", Cipher::Aes256Gcm, true);
        let wire = sealed(a, &[b"payload"]).await;
        for (transcript, connector) in [
            (&b"nonces of connection 2"[..], false),
            (&b"nonces of connection 1"[..], true),
        ] {
            let k = SessionKeys::derive(&secret, transcript, Cipher::Aes256Gcm, connector);
            assert!(opened(k, &wire).await.is_err());
        }
        let k = SessionKeys::derive(&secret, b"nonces of connection 1", Cipher::Aes256Gcm, false);
        assert_eq!(opened(k, &wire).await.unwrap(), b"payload");
    }

    #[tokio::test]
    async fn both_ends_move_to_a_new_key_every_interval() {
        let seal_all = |every: u64| async move {
            let (c, _) = pair(Cipher::Aes256Gcm);
            let (_, sealer) = c.split_rekeying_every(every);
            let mut w = SecureWriter::new(Vec::new(), sealer);
            for _ in 0..5 {
                w.write_all(b"same plaintext").await.unwrap();
                w.flush().await.unwrap();
            }
            w.inner
        };
        let (rekeyed, unchanged) = (seal_all(2).await, seal_all(1000).await);
        let (a, b) = (records(&rekeyed), records(&unchanged));
        // Records 0 and 1 are under the first key in both; from record 2 on
        // the same plaintext and nonce give other bytes: another key.
        for i in 0..5 {
            let same = rekeyed[a[i].clone()] == unchanged[b[i].clone()];
            assert_eq!(same, i < 2, "record {i}");
        }
        // A reader that rekeys at the same interval opens them all; one
        // that does not stops at the first record under the new key.
        for (every, want_ok) in [(2, true), (1000, false)] {
            let (_, s) = pair(Cipher::Aes256Gcm);
            let (opener, _) = s.split_rekeying_every(every);
            let mut r = SecureReader::new(&rekeyed[..], opener, &[]);
            let mut got = Vec::new();
            let res = r.read_to_end(&mut got).await;
            assert_eq!(res.is_ok(), want_ok, "{every}: {res:?}");
            assert_eq!(got.len(), if want_ok { 70 } else { 28 });
        }
    }

    #[tokio::test]
    async fn an_oversized_record_length_is_refused_before_reading_it() {
        let (_, s) = pair(Cipher::ChaCha20Poly1305);
        let mut wire = u32::MAX.to_le_bytes().to_vec();
        wire.extend_from_slice(&[0; 64]);
        let err = opened(s, &wire).await.unwrap_err();
        assert!(err.to_string().contains("at most"), "{err}");
    }
}
