//! The frame: a 36-byte header, then `control_len` bytes of control part, then
//! `data_len` bytes of data part. All integers are little-endian.
//!
//! ```text
//! offset size field
//!      0    4 magic          "SHOL" (0x4c4f4853 little-endian)
//!      4    2 version        PROTOCOL_VERSION
//!      6    2 msg_type       MessageType of the control part
//!      8    2 flags          FrameFlags
//!     10    2 reserved       must be 0
//!     12    8 tid            transaction id; a reply carries its request's tid
//!     20    4 control_len
//!     24    4 data_len
//!     28    4 control_crc    crc32c over bytes 0..28 followed by the control part
//!     32    4 data_crc       crc32c over the data part (0 when empty)
//! ```

use bytes::{Buf, Bytes, BytesMut};

/// The first four bytes of every frame.
pub const MAGIC: u32 = u32::from_le_bytes(*b"SHOL");
/// The frame format and handshake version this build speaks.
pub const PROTOCOL_VERSION: u16 = 1;
/// Size of the fixed header.
pub const HEADER_LEN: usize = 36;
const CRC_COVERED: usize = 28;

/// Frame flags.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FrameFlags(pub u16);

impl FrameFlags {
    /// This frame answers the request with the same tid.
    pub const REPLY: FrameFlags = FrameFlags(1);
    /// This frame expects no reply.
    pub const ONE_WAY: FrameFlags = FrameFlags(2);
    const KNOWN: u16 = 3;

    /// Whether every bit of `other` is set.
    pub fn contains(self, other: FrameFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

/// The checksum a frame carries for data part `data` (0 when empty).
pub fn data_crc(data: &[u8]) -> u32 {
    if data.is_empty() {
        0
    } else {
        crc32c::crc32c(data)
    }
}

/// The decoded fixed header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    /// Protocol version of the sender.
    pub version: u16,
    /// Type of the control part.
    pub msg_type: u16,
    /// Flags.
    pub flags: FrameFlags,
    /// Transaction id.
    pub tid: u64,
    /// Length of the control part.
    pub control_len: u32,
    /// Length of the data part.
    pub data_len: u32,
    /// crc32c over header bytes 0..28 and the control part.
    pub control_crc: u32,
    /// crc32c over the data part.
    pub data_crc: u32,
}

impl FrameHeader {
    /// Builds the header for a control and data part, computing both checksums.
    pub fn seal(msg_type: u16, flags: FrameFlags, tid: u64, control: &[u8], data: &[u8]) -> Self {
        Self::seal_with_data_crc(msg_type, flags, tid, control, data.len(), data_crc(data))
    }

    /// [`FrameHeader::seal`] for a data part whose checksum
    /// ([`data_crc`]) is already known: one data part sent to several
    /// peers is checksummed once, and a data part received (its checksum
    /// checked) is passed on without a second pass.
    pub fn seal_with_data_crc(
        msg_type: u16,
        flags: FrameFlags,
        tid: u64,
        control: &[u8],
        data_len: usize,
        data_crc: u32,
    ) -> Self {
        let mut h = FrameHeader {
            version: PROTOCOL_VERSION,
            msg_type,
            flags,
            tid,
            control_len: control.len() as u32,
            data_len: data_len as u32,
            control_crc: 0,
            data_crc,
        };
        let bytes = h.to_bytes();
        h.control_crc = crc32c::crc32c_append(crc32c::crc32c(&bytes[..CRC_COVERED]), control);
        h
    }

    /// The 36 header bytes.
    pub fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4..6].copy_from_slice(&self.version.to_le_bytes());
        b[6..8].copy_from_slice(&self.msg_type.to_le_bytes());
        b[8..10].copy_from_slice(&self.flags.0.to_le_bytes());
        b[12..20].copy_from_slice(&self.tid.to_le_bytes());
        b[20..24].copy_from_slice(&self.control_len.to_le_bytes());
        b[24..28].copy_from_slice(&self.data_len.to_le_bytes());
        b[28..32].copy_from_slice(&self.control_crc.to_le_bytes());
        b[32..36].copy_from_slice(&self.data_crc.to_le_bytes());
        b
    }

    fn parse(mut b: &[u8]) -> Self {
        // Callers pass exactly HEADER_LEN bytes.
        let _magic = b.get_u32_le();
        let version = b.get_u16_le();
        let msg_type = b.get_u16_le();
        let flags = FrameFlags(b.get_u16_le());
        let _reserved = b.get_u16_le();
        FrameHeader {
            version,
            msg_type,
            flags,
            tid: b.get_u64_le(),
            control_len: b.get_u32_le(),
            data_len: b.get_u32_le(),
            control_crc: b.get_u32_le(),
            data_crc: b.get_u32_le(),
        }
    }
}

/// One complete frame. `control` and `data` are slices of the receive buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// The header.
    pub header: FrameHeader,
    /// The encoded control part.
    pub control: Bytes,
    /// The raw data part.
    pub data: Bytes,
}

/// Size limits applied before any allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameLimits {
    /// Largest control part accepted.
    pub control_bytes_max: u32,
    /// Largest data part accepted.
    pub data_bytes_max: u32,
}

impl Default for FrameLimits {
    fn default() -> Self {
        FrameLimits {
            control_bytes_max: 1 << 20,
            data_bytes_max: 64 << 20,
        }
    }
}

/// Why bytes are not a valid frame. Any of these ends the connection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// The stream does not start with the frame magic.
    #[error("bad frame magic {0:#010x} (not a Shoal peer?)")]
    BadMagic(u32),
    /// The peer speaks another frame version.
    #[error("unsupported protocol version {0} (this build speaks {PROTOCOL_VERSION})")]
    BadVersion(u16),
    /// Reserved bits are set.
    #[error("reserved header bits set (flags {flags:#06x}, reserved {reserved:#06x})")]
    Reserved {
        /// The flags field.
        flags: u16,
        /// The reserved field.
        reserved: u16,
    },
    /// The control part is larger than allowed.
    #[error("control part of {len} bytes exceeds the limit of {max}")]
    ControlTooLarge {
        /// Announced length.
        len: u32,
        /// Limit.
        max: u32,
    },
    /// The data part is larger than allowed.
    #[error("data part of {len} bytes exceeds the limit of {max}")]
    DataTooLarge {
        /// Announced length.
        len: u32,
        /// Limit.
        max: u32,
    },
    /// The header or control checksum does not match.
    #[error("header/control checksum mismatch (got {got:#010x}, computed {computed:#010x})")]
    BadControlCrc {
        /// Checksum in the header.
        got: u32,
        /// Checksum computed.
        computed: u32,
    },
    /// The data checksum does not match.
    #[error("data checksum mismatch (got {got:#010x}, computed {computed:#010x})")]
    BadDataCrc {
        /// Checksum in the header.
        got: u32,
        /// Checksum computed.
        computed: u32,
    },
}

/// Data parts shorter than this are copied out of the receive buffer.
const DATA_COPY_BELOW_BYTES: usize = 64 << 10;

/// Splits complete frames off the front of a receive buffer.
///
/// Decoding is two steps, as mini-redis's `Frame::check`: first the header is
/// validated (magic, version, bounded lengths) before anything is allocated
/// for the body; then, once the whole frame is present, both checksums are
/// verified. The decoder reserves room for the whole frame as soon as it
/// knows its size, so a large data part lands in one contiguous buffer.
#[derive(Debug, Clone)]
pub struct FrameDecoder {
    limits: FrameLimits,
    pending: Option<FrameHeader>,
    /// Data parts at least this long are left to [`FrameDecoder::take_large`].
    large_from: Option<usize>,
}

/// A frame whose large data part its reader receives itself, into a buffer
/// of its own, folding each piece into the checksum as it lands (while the
/// bytes are still in cache) instead of in a pass over the whole part.
#[derive(Debug)]
pub struct LargeData {
    /// The frame's header.
    pub header: FrameHeader,
    /// Its control part, checked.
    pub control: Bytes,
    crc: u32,
    got: usize,
}

impl LargeData {
    /// Bytes of the data part still to come.
    pub fn remaining(&self) -> usize {
        (self.header.data_len as usize).saturating_sub(self.got)
    }

    /// The next `bytes` of the data part arrived.
    pub fn landed(&mut self, bytes: &[u8]) {
        self.crc = crc32c::crc32c_append(self.crc, bytes);
        self.got += bytes.len();
    }

    /// The frame, once every byte `data` holds has [landed](Self::landed)
    /// and the checksum matches.
    pub fn finish(self, data: Bytes) -> Result<Frame, FrameError> {
        let whole = self.got == data.len() && data.len() == self.header.data_len as usize;
        if !whole || self.crc != self.header.data_crc {
            return Err(FrameError::BadDataCrc {
                got: self.header.data_crc,
                computed: self.crc,
            });
        }
        Ok(Frame {
            header: self.header,
            control: self.control,
            data,
        })
    }
}

impl FrameDecoder {
    /// A decoder enforcing `limits`.
    pub fn new(limits: FrameLimits) -> Self {
        FrameDecoder {
            limits,
            pending: None,
            large_from: None,
        }
    }

    /// Leaves frames with a data part of at least `bytes` to
    /// [`FrameDecoder::take_large`]: [`FrameDecoder::decode`] does not
    /// reserve room for them nor return them.
    pub fn with_large_data_from(mut self, bytes: usize) -> Self {
        self.large_from = Some(bytes);
        self
    }

    fn is_large(&self, h: &FrameHeader) -> bool {
        self.large_from.is_some_and(|m| h.data_len as usize >= m)
    }

    /// When the next frame has a large data part (see
    /// [`FrameDecoder::with_large_data_from`]) and its header and control
    /// part are in `buf`: takes them off `buf`, checks them, and returns the
    /// frame for its reader to receive the data into; any data bytes already
    /// in `buf` stay there, first in line. `Ok(None)` otherwise.
    pub fn take_large(&mut self, buf: &mut BytesMut) -> Result<Option<LargeData>, FrameError> {
        let Some(header) = self.pending.filter(|h| self.is_large(h)) else {
            return Ok(None);
        };
        if buf.len() < HEADER_LEN + header.control_len as usize {
            return Ok(None);
        }
        self.pending = None;
        let head = buf.split_to(HEADER_LEN);
        let control = buf.split_to(header.control_len as usize).freeze();
        let computed = crc32c::crc32c_append(crc32c::crc32c(&head[..CRC_COVERED]), &control);
        if computed != header.control_crc {
            return Err(FrameError::BadControlCrc {
                got: header.control_crc,
                computed,
            });
        }
        Ok(Some(LargeData {
            header,
            control,
            crc: 0,
            got: 0,
        }))
    }

    /// Takes the next complete frame off `buf`, or returns `Ok(None)` when
    /// more bytes are needed. After an error the stream is unusable.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, FrameError> {
        let header = match self.pending {
            Some(h) => h,
            None => {
                if buf.len() < HEADER_LEN {
                    return Ok(None);
                }
                let h = self.check_header(&buf[..HEADER_LEN])?;
                self.pending = Some(h);
                h
            }
        };
        if self.is_large(&header) {
            return Ok(None);
        }
        let total = HEADER_LEN + header.control_len as usize + header.data_len as usize;
        if buf.len() < total {
            buf.reserve(total - buf.len());
            return Ok(None);
        }
        self.pending = None;
        let mut whole = buf.split_to(total).freeze();
        let head = whole.split_to(HEADER_LEN);
        let control = whole.split_to(header.control_len as usize);
        let data = whole;
        let computed = crc32c::crc32c_append(crc32c::crc32c(&head[..CRC_COVERED]), &control);
        if computed != header.control_crc {
            return Err(FrameError::BadControlCrc {
                got: header.control_crc,
                computed,
            });
        }
        let computed = data_crc(&data);
        if computed != header.data_crc {
            return Err(FrameError::BadDataCrc {
                got: header.data_crc,
                computed,
            });
        }
        // A small data part gets a buffer of its own: kept as a slice it
        // would pin the whole receive buffer (64 KiB for a 4 KiB write),
        // which then could not be reused and the next read would fault in
        // fresh pages. A large one arrived in a buffer reserved for its frame.
        let data = if data.len() < DATA_COPY_BELOW_BYTES {
            Bytes::copy_from_slice(&data)
        } else {
            data
        };
        Ok(Some(Frame {
            header,
            control,
            data,
        }))
    }

    fn check_header(&self, b: &[u8]) -> Result<FrameHeader, FrameError> {
        let magic = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        if magic != MAGIC {
            return Err(FrameError::BadMagic(magic));
        }
        let h = FrameHeader::parse(b);
        if h.version != PROTOCOL_VERSION {
            return Err(FrameError::BadVersion(h.version));
        }
        let reserved = u16::from_le_bytes([b[10], b[11]]);
        if h.flags.0 & !FrameFlags::KNOWN != 0 || reserved != 0 {
            return Err(FrameError::Reserved {
                flags: h.flags.0,
                reserved,
            });
        }
        if h.control_len > self.limits.control_bytes_max {
            return Err(FrameError::ControlTooLarge {
                len: h.control_len,
                max: self.limits.control_bytes_max,
            });
        }
        if h.data_len > self.limits.data_bytes_max {
            return Err(FrameError::DataTooLarge {
                len: h.data_len,
                max: self.limits.data_bytes_max,
            });
        }
        Ok(h)
    }
}

/// Encodes a whole frame into one buffer (for tests, fuzzing and the
/// handshake; the messenger writes header, control and data as separate
/// slices instead).
pub fn encode_frame(
    msg_type: u16,
    flags: FrameFlags,
    tid: u64,
    control: &[u8],
    data: &[u8],
) -> BytesMut {
    let h = FrameHeader::seal(msg_type, flags, tid, control, data);
    let mut out = BytesMut::with_capacity(HEADER_LEN + control.len() + data.len());
    out.extend_from_slice(&h.to_bytes());
    out.extend_from_slice(control);
    out.extend_from_slice(data);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decoder() -> FrameDecoder {
        FrameDecoder::new(FrameLimits {
            control_bytes_max: 1024,
            data_bytes_max: 8192,
        })
    }

    #[test]
    fn round_trip_and_split_delivery() {
        let enc = encode_frame(7, FrameFlags::REPLY, 42, b"control", b"some data");
        let mut d = decoder();
        // Feed one byte at a time: nothing until the last byte arrives.
        let mut buf = BytesMut::new();
        for (i, b) in enc.iter().enumerate() {
            buf.extend_from_slice(&[*b]);
            let got = d.decode(&mut buf).unwrap();
            if i + 1 < enc.len() {
                assert!(got.is_none());
            } else {
                let f = got.unwrap();
                assert_eq!(f.header.msg_type, 7);
                assert_eq!(f.header.tid, 42);
                assert!(f.header.flags.contains(FrameFlags::REPLY));
                assert_eq!(&f.control[..], b"control");
                assert_eq!(&f.data[..], b"some data");
            }
        }
        assert!(buf.is_empty());
    }

    #[test]
    fn two_frames_in_one_buffer() {
        let mut buf = encode_frame(1, FrameFlags::default(), 1, b"a", b"");
        buf.extend_from_slice(&encode_frame(2, FrameFlags::ONE_WAY, 2, b"", b"bb"));
        let mut d = decoder();
        assert_eq!(d.decode(&mut buf).unwrap().unwrap().header.tid, 1);
        let f = d.decode(&mut buf).unwrap().unwrap();
        assert_eq!((f.header.tid, &f.data[..]), (2, &b"bb"[..]));
        assert!(d.decode(&mut buf).unwrap().is_none());
    }

    #[test]
    fn corruption_is_detected() {
        let enc = encode_frame(1, FrameFlags::default(), 9, b"ctl", b"data");
        type Check = fn(&FrameError) -> bool;
        let cases: [(usize, Check); 6] = [
            (0, |e| matches!(e, FrameError::BadMagic(_))),
            (4, |e| matches!(e, FrameError::BadVersion(_))),
            (10, |e| matches!(e, FrameError::Reserved { .. })),
            (13, |e| matches!(e, FrameError::BadControlCrc { .. })),
            (HEADER_LEN + 1, |e| {
                matches!(e, FrameError::BadControlCrc { .. })
            }),
            (HEADER_LEN + 4, |e| {
                matches!(e, FrameError::BadDataCrc { .. })
            }),
        ];
        for (at, expect) in cases {
            let mut buf = enc.clone();
            buf[at] ^= 0x40;
            let err = decoder().decode(&mut buf).unwrap_err();
            assert!(expect(&err), "flip at {at}: {err}");
        }
    }

    #[test]
    fn oversized_parts_are_refused_before_allocation() {
        let mut h = FrameHeader::seal(1, FrameFlags::default(), 0, b"", b"");
        h.data_len = u32::MAX;
        let mut buf = BytesMut::from(&h.to_bytes()[..]);
        let err = decoder().decode(&mut buf).unwrap_err();
        assert!(matches!(err, FrameError::DataTooLarge { .. }), "{err}");
        assert!(buf.capacity() < 1 << 16);
        h.data_len = 0;
        h.control_len = 1025;
        let mut buf = BytesMut::from(&h.to_bytes()[..]);
        assert!(matches!(
            decoder().decode(&mut buf),
            Err(FrameError::ControlTooLarge { .. })
        ));
    }
}
