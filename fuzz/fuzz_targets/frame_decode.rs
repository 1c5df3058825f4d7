//! Feeds arbitrary bytes to the frame decoder, delivered in chunks whose
//! sizes come from the input itself, and decodes every complete frame's
//! control part as its message type. Nothing may panic, and a frame that
//! decodes must re-encode to a frame that decodes to the same message.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use shoal_proto::{FrameDecoder, FrameLimits, Message, encode_frame};

fuzz_target!(|input: &[u8]| {
    let Some((&chunk, bytes)) = input.split_first() else { return };
    let chunk = usize::from(chunk).max(1);
    let limits = FrameLimits { control_bytes_max: 1 << 16, data_bytes_max: 1 << 20 };
    let mut decoder = FrameDecoder::new(limits);
    let mut buf = BytesMut::new();
    for piece in bytes.chunks(chunk) {
        buf.extend_from_slice(piece);
        loop {
            match decoder.decode(&mut buf) {
                Ok(Some(frame)) => {
                    if let Ok(msg) = Message::decode(frame.header.msg_type, &frame.control) {
                        let control = msg.encode_control();
                        let mut again = encode_frame(
                            msg.msg_type() as u16,
                            frame.header.flags,
                            frame.header.tid,
                            &control,
                            &frame.data,
                        );
                        let f2 = FrameDecoder::new(limits).decode(&mut again);
                        let Ok(Some(f2)) = f2 else { panic!("re-encoded frame does not decode") };
                        assert_eq!(Message::decode(f2.header.msg_type, &f2.control).ok(), Some(msg));
                    }
                }
                Ok(None) => break,
                Err(_) => return,
            }
        }
    }
});
