//! The NBD wire protocol (fixed newstyle), as the protocol document at
//! github.com/NetworkBlockDevice/nbd (`doc/proto.md`) defines it: the
//! constants, the option haggling's messages, transmission requests and
//! the simple and structured replies. Pure encoding and decoding; the
//! server (`crate::server`) does the I/O.

use bytes::{BufMut, Bytes, BytesMut};

/// "NBDMAGIC": the server's first eight bytes.
pub const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
/// "IHAVEOPT": the newstyle magic, and every option's.
pub const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
/// Magic of an option reply.
pub const REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
/// Magic of a transmission request.
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
/// Magic of a simple reply.
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
/// Magic of a structured reply chunk.
pub const STRUCTURED_REPLY_MAGIC: u32 = 0x668e_33ef;

/// Handshake flags (server).
pub const FLAG_FIXED_NEWSTYLE: u16 = 1;
/// The server omits the 124 zero bytes after `NBD_OPT_EXPORT_NAME`.
pub const FLAG_NO_ZEROES: u16 = 2;
/// Client flags.
pub const C_FLAG_FIXED_NEWSTYLE: u32 = 1;
/// The client takes no zero padding.
pub const C_FLAG_NO_ZEROES: u32 = 2;

/// Options.
pub mod opt {
    /// Old-style choice of export: transmission follows at once.
    pub const EXPORT_NAME: u32 = 1;
    /// The client ends the haggling.
    pub const ABORT: u32 = 2;
    /// The exports.
    pub const LIST: u32 = 3;
    /// Upgrade to TLS.
    pub const STARTTLS: u32 = 5;
    /// About an export.
    pub const INFO: u32 = 6;
    /// Choose an export (with its information).
    pub const GO: u32 = 7;
    /// Structured replies from now on.
    pub const STRUCTURED_REPLY: u32 = 8;
    /// The metadata contexts the server has.
    pub const LIST_META_CONTEXT: u32 = 9;
    /// Choose metadata contexts for block status.
    pub const SET_META_CONTEXT: u32 = 10;
}

/// Option reply types.
pub mod rep {
    /// Done.
    pub const ACK: u32 = 1;
    /// One export (to `NBD_OPT_LIST`).
    pub const SERVER: u32 = 2;
    /// One piece of information (to INFO and GO).
    pub const INFO: u32 = 3;
    /// One metadata context.
    pub const META_CONTEXT: u32 = 4;
    const ERR: u32 = 1 << 31;
    /// The option is unknown.
    pub const ERR_UNSUP: u32 = ERR | 1;
    /// Refused by policy.
    pub const ERR_POLICY: u32 = ERR | 2;
    /// Malformed.
    pub const ERR_INVALID: u32 = ERR | 3;
    /// TLS is required first.
    pub const ERR_TLS_REQD: u32 = ERR | 5;
    /// No such export.
    pub const ERR_UNKNOWN: u32 = ERR | 6;
    /// The server is shutting down.
    pub const ERR_SHUTDOWN: u32 = ERR | 7;
    /// A block size the client must honour, asked for and not given.
    pub const ERR_BLOCK_SIZE_REQD: u32 = ERR | 8;
    /// Too large.
    pub const ERR_TOO_BIG: u32 = ERR | 9;
}

/// Information types (INFO and GO).
pub mod info {
    /// Size and transmission flags (always sent).
    pub const EXPORT: u16 = 0;
    /// The export's name.
    pub const NAME: u16 = 1;
    /// A description.
    pub const DESCRIPTION: u16 = 2;
    /// Minimum, preferred and maximum block sizes.
    pub const BLOCK_SIZE: u16 = 3;
}

/// Transmission flags.
pub mod tflag {
    /// Always set.
    pub const HAS_FLAGS: u16 = 1;
    /// Read-only export.
    pub const READ_ONLY: u16 = 1 << 1;
    /// FLUSH is understood.
    pub const SEND_FLUSH: u16 = 1 << 2;
    /// FUA is understood.
    pub const SEND_FUA: u16 = 1 << 3;
    /// TRIM is understood.
    pub const SEND_TRIM: u16 = 1 << 5;
    /// WRITE_ZEROES is understood.
    pub const SEND_WRITE_ZEROES: u16 = 1 << 6;
    /// The DF flag is understood.
    pub const SEND_DF: u16 = 1 << 7;
    /// Several connections to the export see one another's writes and
    /// a flush on any covers all.
    pub const CAN_MULTI_CONN: u16 = 1 << 8;
    /// CACHE is understood.
    pub const SEND_CACHE: u16 = 1 << 10;
    /// FAST_ZERO is understood.
    pub const SEND_FAST_ZERO: u16 = 1 << 11;
}

/// Commands.
pub mod cmd {
    /// Read.
    pub const READ: u16 = 0;
    /// Write.
    pub const WRITE: u16 = 1;
    /// Disconnect.
    pub const DISC: u16 = 2;
    /// Flush.
    pub const FLUSH: u16 = 3;
    /// Trim (discard).
    pub const TRIM: u16 = 4;
    /// Prefetch.
    pub const CACHE: u16 = 5;
    /// Write zeros.
    pub const WRITE_ZEROES: u16 = 6;
    /// Block status.
    pub const BLOCK_STATUS: u16 = 7;
}

/// Command flags.
pub mod cflag {
    /// Force unit access: durable before the reply.
    pub const FUA: u16 = 1;
    /// WRITE_ZEROES must not punch a hole.
    pub const NO_HOLE: u16 = 1 << 1;
    /// READ: one data chunk, unfragmented.
    pub const DF: u16 = 1 << 2;
    /// BLOCK_STATUS: one extent is enough.
    pub const REQ_ONE: u16 = 1 << 3;
    /// WRITE_ZEROES: fail at once unless zeroing is fast.
    pub const FAST_ZERO: u16 = 1 << 4;
}

/// Structured reply types and flags.
pub mod reply {
    /// The last chunk of the reply.
    pub const FLAG_DONE: u16 = 1;
    /// No payload.
    pub const NONE: u16 = 0;
    /// Data at an offset.
    pub const OFFSET_DATA: u16 = 1;
    /// A hole at an offset.
    pub const OFFSET_HOLE: u16 = 2;
    /// Block status descriptors.
    pub const BLOCK_STATUS: u16 = 5;
    /// An error.
    pub const ERROR: u16 = (1 << 15) | 1;
}

/// `base:allocation` states.
pub const STATE_HOLE: u32 = 1;
/// Reads as zeros.
pub const STATE_ZERO: u32 = 2;

/// The one metadata context served, and its id.
pub const BASE_ALLOCATION: &str = "base:allocation";
/// The id of [`BASE_ALLOCATION`] in replies.
pub const BASE_ALLOCATION_ID: u32 = 1;

/// Errors (the protocol's errno values).
pub mod errno {
    /// Not permitted (a write to a read-only export).
    pub const EPERM: u32 = 1;
    /// I/O error.
    pub const EIO: u32 = 5;
    /// Out of memory.
    pub const ENOMEM: u32 = 12;
    /// Invalid request.
    pub const EINVAL: u32 = 22;
    /// No space.
    pub const ENOSPC: u32 = 28;
    /// Too large for one reply.
    pub const EOVERFLOW: u32 = 75;
    /// Not supported (FAST_ZERO that would be slow).
    pub const ENOTSUP: u32 = 95;
    /// Shutting down.
    pub const ESHUTDOWN: u32 = 108;
}

/// Largest option payload read (an export name is at most 4096 bytes).
pub const OPTION_MAX: u32 = 16 << 10;
/// Largest request payload or read served: 32 MiB, as qemu's server.
pub const PAYLOAD_MAX: u32 = 32 << 20;

/// The server's greeting.
pub fn greeting() -> [u8; 18] {
    let mut b = [0u8; 18];
    b[..8].copy_from_slice(&NBDMAGIC.to_be_bytes());
    b[8..16].copy_from_slice(&IHAVEOPT.to_be_bytes());
    b[16..].copy_from_slice(&(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES).to_be_bytes());
    b
}

/// An option reply.
pub fn option_reply(option: u32, kind: u32, data: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(20 + data.len());
    b.put_u64(REPLY_MAGIC);
    b.put_u32(option);
    b.put_u32(kind);
    b.put_u32(data.len() as u32);
    b.put_slice(data);
    b.freeze()
}

/// An error reply to `option` with a message for people.
pub fn option_error(option: u32, kind: u32, message: &str) -> Bytes {
    option_reply(option, kind, message.as_bytes())
}

/// Why an option's payload is malformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed option: {0}")]
pub struct Malformed(pub &'static str);

/// A reader over an option's payload.
struct Cursor<'a>(&'a [u8]);

impl Cursor<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], Malformed> {
        if self.0.len() < n {
            return Err(Malformed("shorter than its fields"));
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }

    fn u16(&mut self) -> Result<u16, Malformed> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    fn u32(&mut self) -> Result<u32, Malformed> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn string(&mut self) -> Result<String, Malformed> {
        let n = self.u32()? as usize;
        let b = self.take(n)?;
        String::from_utf8(b.to_vec()).map_err(|_| Malformed("a name that is not UTF-8"))
    }
}

/// An `NBD_OPT_INFO` or `NBD_OPT_GO` payload: the export's name and the
/// information asked for.
pub fn parse_info_request(data: &[u8]) -> Result<(String, Vec<u16>), Malformed> {
    let mut c = Cursor(data);
    let name = c.string()?;
    let n = c.u16()?;
    let mut asked = Vec::with_capacity(n as usize);
    for _ in 0..n {
        asked.push(c.u16()?);
    }
    if !c.0.is_empty() {
        return Err(Malformed("longer than its fields"));
    }
    Ok((name, asked))
}

/// An `NBD_OPT_{LIST,SET}_META_CONTEXT` payload: the export's name and the
/// queries.
pub fn parse_meta_request(data: &[u8]) -> Result<(String, Vec<String>), Malformed> {
    let mut c = Cursor(data);
    let name = c.string()?;
    let n = c.u32()?;
    let mut queries = Vec::new();
    for _ in 0..n {
        queries.push(c.string()?);
    }
    if !c.0.is_empty() {
        return Err(Malformed("longer than its fields"));
    }
    Ok((name, queries))
}

/// `NBD_INFO_EXPORT`: size and transmission flags.
pub fn info_export(size: u64, flags: u16) -> Vec<u8> {
    let mut b = Vec::with_capacity(12);
    b.extend_from_slice(&info::EXPORT.to_be_bytes());
    b.extend_from_slice(&size.to_be_bytes());
    b.extend_from_slice(&flags.to_be_bytes());
    b
}

/// `NBD_INFO_BLOCK_SIZE`.
pub fn info_block_size(min: u32, preferred: u32, max: u32) -> Vec<u8> {
    let mut b = Vec::with_capacity(14);
    b.extend_from_slice(&info::BLOCK_SIZE.to_be_bytes());
    b.extend_from_slice(&min.to_be_bytes());
    b.extend_from_slice(&preferred.to_be_bytes());
    b.extend_from_slice(&max.to_be_bytes());
    b
}

/// `NBD_INFO_NAME` or `NBD_INFO_DESCRIPTION`.
pub fn info_text(kind: u16, text: &str) -> Vec<u8> {
    let mut b = Vec::with_capacity(2 + text.len());
    b.extend_from_slice(&kind.to_be_bytes());
    b.extend_from_slice(text.as_bytes());
    b
}

/// `NBD_REP_SERVER`: one export's name.
pub fn rep_server(name: &str) -> Vec<u8> {
    let mut b = Vec::with_capacity(4 + name.len());
    b.extend_from_slice(&(name.len() as u32).to_be_bytes());
    b.extend_from_slice(name.as_bytes());
    b
}

/// `NBD_REP_META_CONTEXT`: a context's id and name.
pub fn rep_meta_context(id: u32, name: &str) -> Vec<u8> {
    let mut b = Vec::with_capacity(4 + name.len());
    b.extend_from_slice(&id.to_be_bytes());
    b.extend_from_slice(name.as_bytes());
    b
}

/// A transmission request's header (28 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// Command flags.
    pub flags: u16,
    /// The command.
    pub kind: u16,
    /// The client's cookie, echoed in the reply.
    pub cookie: u64,
    /// Offset.
    pub offset: u64,
    /// Length.
    pub len: u32,
}

/// Size of a request header.
pub const REQUEST_BYTES: usize = 28;

/// Decodes a request header; `Err` on a bad magic (the stream is lost).
pub fn parse_request(b: &[u8; REQUEST_BYTES]) -> Result<Request, Malformed> {
    let magic = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    if magic != REQUEST_MAGIC {
        return Err(Malformed("a request with a bad magic"));
    }
    let u64_at = |i: usize| {
        let mut x = [0u8; 8];
        x.copy_from_slice(&b[i..i + 8]);
        u64::from_be_bytes(x)
    };
    Ok(Request {
        flags: u16::from_be_bytes([b[4], b[5]]),
        kind: u16::from_be_bytes([b[6], b[7]]),
        cookie: u64_at(8),
        offset: u64_at(16),
        len: u32::from_be_bytes([b[24], b[25], b[26], b[27]]),
    })
}

/// A request header, as a client sends it (tests and tools).
pub fn encode_request(r: &Request) -> [u8; REQUEST_BYTES] {
    let mut b = [0u8; REQUEST_BYTES];
    b[..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
    b[4..6].copy_from_slice(&r.flags.to_be_bytes());
    b[6..8].copy_from_slice(&r.kind.to_be_bytes());
    b[8..16].copy_from_slice(&r.cookie.to_be_bytes());
    b[16..24].copy_from_slice(&r.offset.to_be_bytes());
    b[24..].copy_from_slice(&r.len.to_be_bytes());
    b
}

/// A simple reply's header (its data, for a read, follows).
pub fn simple_reply(error: u32, cookie: u64) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..4].copy_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
    b[4..8].copy_from_slice(&error.to_be_bytes());
    b[8..].copy_from_slice(&cookie.to_be_bytes());
    b
}

/// A structured reply chunk's header (20 bytes); `len` bytes follow.
pub fn chunk_header(flags: u16, kind: u16, cookie: u64, len: u32) -> [u8; 20] {
    let mut b = [0u8; 20];
    b[..4].copy_from_slice(&STRUCTURED_REPLY_MAGIC.to_be_bytes());
    b[4..6].copy_from_slice(&flags.to_be_bytes());
    b[6..8].copy_from_slice(&kind.to_be_bytes());
    b[8..16].copy_from_slice(&cookie.to_be_bytes());
    b[16..].copy_from_slice(&len.to_be_bytes());
    b
}

/// A structured error chunk (the last of its reply).
pub fn chunk_error(cookie: u64, error: u32, message: &str) -> Bytes {
    let msg = &message.as_bytes()[..message.len().min(4096)];
    let mut b = BytesMut::with_capacity(26 + msg.len());
    b.put_slice(&chunk_header(
        reply::FLAG_DONE,
        reply::ERROR,
        cookie,
        6 + msg.len() as u32,
    ));
    b.put_u32(error);
    b.put_u16(msg.len() as u16);
    b.put_slice(msg);
    b.freeze()
}

/// A `BLOCK_STATUS` chunk for `base:allocation`: `(length, flags)` extents.
pub fn chunk_block_status(cookie: u64, extents: &[(u32, u32)]) -> Bytes {
    let mut b = BytesMut::with_capacity(24 + extents.len() * 8);
    b.put_slice(&chunk_header(
        reply::FLAG_DONE,
        reply::BLOCK_STATUS,
        cookie,
        4 + 8 * extents.len() as u32,
    ));
    b.put_u32(BASE_ALLOCATION_ID);
    for (len, flags) in extents {
        b.put_u32(*len);
        b.put_u32(*flags);
    }
    b.freeze()
}

/// The `base:allocation` extents of `[offset, offset + len)` given the
/// allocated ranges within it (sorted, not overlapping): data, and holes
/// that read as zeros; with `one`, only the first.
pub fn allocation_extents(
    offset: u64,
    len: u32,
    allocated: &[(u64, u64)],
    one: bool,
) -> Vec<(u32, u32)> {
    let end = offset + u64::from(len);
    let mut out: Vec<(u32, u32)> = Vec::new();
    let mut at = offset;
    let push = |n: u64, flags: u32, out: &mut Vec<(u32, u32)>| {
        if n == 0 {
            return;
        }
        match out.last_mut() {
            Some((l, f)) if *f == flags => *l += n as u32,
            _ => out.push((n as u32, flags)),
        }
    };
    for &(o, n) in allocated {
        let (s, e) = (o.max(at), (o + n).min(end));
        if s >= e {
            continue;
        }
        push(s - at, STATE_HOLE | STATE_ZERO, &mut out);
        push(e - s, 0, &mut out);
        at = e;
    }
    push(end - at, STATE_HOLE | STATE_ZERO, &mut out);
    if one {
        out.truncate(1);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip_and_a_bad_magic_is_refused() {
        let r = Request {
            flags: cflag::FUA,
            kind: cmd::WRITE,
            cookie: 0xdead_beef_0102_0304,
            offset: 1 << 40,
            len: 4096,
        };
        let b = encode_request(&r);
        assert_eq!(parse_request(&b), Ok(r));
        let mut bad = b;
        bad[0] ^= 1;
        assert!(parse_request(&bad).is_err());
    }

    #[test]
    fn info_and_meta_requests_parse_and_truncations_are_malformed() {
        let mut d = Vec::new();
        d.extend_from_slice(&8u32.to_be_bytes());
        d.extend_from_slice(b"rbd/disk");
        d.extend_from_slice(&2u16.to_be_bytes());
        d.extend_from_slice(&info::BLOCK_SIZE.to_be_bytes());
        d.extend_from_slice(&info::NAME.to_be_bytes());
        assert_eq!(
            parse_info_request(&d),
            Ok(("rbd/disk".into(), vec![info::BLOCK_SIZE, info::NAME]))
        );
        for cut in 0..d.len() {
            assert!(parse_info_request(&d[..cut]).is_err(), "cut at {cut}");
        }
        let mut long = d.clone();
        long.push(0);
        assert!(parse_info_request(&long).is_err());
        // A name length far past the payload.
        let mut huge = d.clone();
        huge[..4].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(parse_info_request(&huge).is_err());

        let mut m = Vec::new();
        m.extend_from_slice(&4u32.to_be_bytes());
        m.extend_from_slice(b"disk");
        m.extend_from_slice(&1u32.to_be_bytes());
        m.extend_from_slice(&15u32.to_be_bytes());
        m.extend_from_slice(BASE_ALLOCATION.as_bytes());
        assert_eq!(
            parse_meta_request(&m),
            Ok(("disk".into(), vec![BASE_ALLOCATION.to_string()]))
        );
        assert!(parse_meta_request(&m[..m.len() - 1]).is_err());
    }

    #[test]
    fn allocation_extents_cover_the_range_with_data_and_holes() {
        let z = STATE_HOLE | STATE_ZERO;
        assert_eq!(allocation_extents(0, 100, &[], false), vec![(100, z)]);
        assert_eq!(
            allocation_extents(0, 100, &[(10, 20), (30, 10), (90, 50)], false),
            vec![(10, z), (30, 0), (50, z), (10, 0)]
        );
        assert_eq!(
            allocation_extents(50, 20, &[(0, 55), (65, 100)], false),
            vec![(5, 0), (10, z), (5, 0)]
        );
        assert_eq!(allocation_extents(0, 100, &[(10, 20)], true), vec![(10, z)]);
    }

    #[test]
    fn replies_have_their_magics_and_lengths() {
        let g = greeting();
        assert_eq!(&g[..8], b"NBDMAGIC");
        assert_eq!(&g[8..16], b"IHAVEOPT");
        let e = chunk_error(7, errno::EINVAL, "bad");
        assert_eq!(e.len(), 20 + 6 + 3);
        assert_eq!(&e[16..20], &9u32.to_be_bytes());
        let s = chunk_block_status(7, &[(4096, 0), (8192, STATE_HOLE | STATE_ZERO)]);
        assert_eq!(s.len(), 20 + 4 + 16);
        let r = option_reply(opt::GO, rep::ACK, &[]);
        assert_eq!(r.len(), 20);
    }
}
