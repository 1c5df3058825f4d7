//! Writes seed inputs for the `frame_decode` fuzz target: one valid frame
//! of every message type (some with data parts, some back to back), each
//! prefixed with the chunk-size byte the target reads first.
//!
//! `cargo run -p shoal-proto --example fuzz_seeds -- fuzz/corpus/frame_decode`

use shoal_proto::{
    AuthChallenge, AuthDone, AuthProof, AuthReject, ErrorReply, FrameFlags, Hello, Message, Ping,
    Pong, encode_frame,
};

fn main() -> std::io::Result<()> {
    let dir = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "fuzz/corpus/frame_decode".into());
    std::fs::create_dir_all(&dir)?;
    let msgs: Vec<Message> = vec![
        Hello {
            protocol_version: 1,
            features: 1,
            entity: "client.admin".into(),
            nonce: vec![7; 32],
            listen_addr: "127.0.0.1:6800".into(),
            auth_method: 1,
            ticket: Vec::new(),
            ms_mode: 1,
            cipher: 1,
        }
        .into(),
        AuthChallenge {
            protocol_version: 1,
            features: 1,
            entity: "mon.a".into(),
            nonce: vec![9; 32],
            auth_method: 1,
            ms_mode: 1,
            cipher: 1,
        }
        .into(),
        AuthProof { proof: vec![1; 32] }.into(),
        AuthDone {
            proof: vec![2; 32],
            features: 1,
        }
        .into(),
        AuthReject {
            code: 3,
            reason: "bad proof".into(),
        }
        .into(),
        Ping { seq: 5, echo: true }.into(),
        Pong { seq: 5 }.into(),
        ErrorReply {
            code: 1,
            message: "unsupported".into(),
        }
        .into(),
    ];
    for (i, m) in msgs.iter().enumerate() {
        let data: Vec<u8> = if i % 2 == 0 {
            vec![i as u8; 64]
        } else {
            Vec::new()
        };
        let flags = if i % 3 == 0 {
            FrameFlags::REPLY
        } else {
            FrameFlags::default()
        };
        let frame = encode_frame(
            m.msg_type() as u16,
            flags,
            i as u64,
            &m.encode_control(),
            &data,
        );
        let mut input = vec![if i % 2 == 0 { 255 } else { 7 }];
        input.extend_from_slice(&frame);
        std::fs::write(format!("{dir}/{}", m.msg_type().name()), &input)?;
    }
    // Two frames back to back, delivered byte by byte.
    let mut input = vec![1];
    for m in &msgs[5..7] {
        input.extend_from_slice(&encode_frame(
            m.msg_type() as u16,
            FrameFlags::default(),
            1,
            &m.encode_control(),
            b"x",
        ));
    }
    std::fs::write(format!("{dir}/PingPong-pipelined"), &input)?;
    Ok(())
}
