//! Property tests: every message type round-trips, and random or mutated
//! bytes never panic the frame or message decoders.

use super::*;
use crate::frame::{FrameDecoder, FrameFlags, FrameLimits, encode_frame};
use bytes::BytesMut;
use proptest::prelude::*;

fn bytes32() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..48)
}

fn any_message() -> impl Strategy<Value = Message> {
    prop_oneof![
        (
            (any::<u32>(), any::<u64>(), ".{0,40}"),
            (bytes32(), ".{0,30}", any::<u32>(), bytes32()),
            (any::<u32>(), any::<u32>())
        )
            .prop_map(
                |(
                    (protocol_version, features, entity),
                    (nonce, listen_addr, auth_method, ticket),
                    (ms_mode, cipher),
                )| {
                    Message::Hello(Hello {
                        protocol_version,
                        features,
                        entity,
                        nonce,
                        listen_addr,
                        auth_method,
                        ticket,
                        ms_mode,
                        cipher,
                    })
                }
            ),
        (
            any::<u32>(),
            any::<u64>(),
            ".{0,40}",
            bytes32(),
            any::<u32>(),
            (any::<u32>(), any::<u32>())
        )
            .prop_map(
                |(protocol_version, features, entity, nonce, auth_method, (ms_mode, cipher))| {
                    Message::AuthChallenge(AuthChallenge {
                        protocol_version,
                        features,
                        entity,
                        nonce,
                        auth_method,
                        ms_mode,
                        cipher,
                    })
                }
            ),
        bytes32().prop_map(|proof| Message::AuthProof(AuthProof { proof })),
        (bytes32(), any::<u64>())
            .prop_map(|(proof, features)| Message::AuthDone(AuthDone { proof, features })),
        (any::<u32>(), ".{0,80}")
            .prop_map(|(code, reason)| Message::AuthReject(AuthReject { code, reason })),
        (any::<u64>(), any::<bool>()).prop_map(|(seq, echo)| Message::Ping(Ping { seq, echo })),
        any::<u64>().prop_map(|seq| Message::Pong(Pong { seq })),
        (any::<u32>(), ".{0,80}")
            .prop_map(|(code, message)| Message::ErrorReply(ErrorReply { code, message })),
        ".{0,80}".prop_map(|command| Message::MonCommand(MonCommand { command })),
        (any::<u32>(), ".{0,80}")
            .prop_map(|(code, output)| Message::MonCommandReply(MonCommandReply { code, output })),
        any::<u32>().prop_map(|rpc| Message::MonRaft(MonRaft { rpc })),
        any::<bool>().prop_map(|error| Message::MonRaftReply(MonRaftReply { error })),
        (".{0,20}", any::<u64>())
            .prop_map(|(what, have)| Message::MonSubscribe(MonSubscribe { what, have })),
        (".{0,20}", any::<u64>())
            .prop_map(|(what, version)| Message::MonUpdate(MonUpdate { what, version })),
        (any::<u64>(), any::<u32>(), any::<u32>(), any::<u32>()).prop_map(
            |(pool, pg_seed, since, epoch)| Message::MonPastIntervals(MonPastIntervals {
                pool,
                pg_seed,
                since,
                epoch,
            })
        ),
        (any::<u32>(), ".{0,80}").prop_map(|(code, message)| Message::MonPastIntervalsReply(
            MonPastIntervalsReply { code, message }
        )),
        osd_messages(),
    ]
}

fn osd_messages() -> impl Strategy<Value = Message> {
    use crate::osd::*;
    let sub =
        (any::<u32>(), any::<u64>(), ".{0,10}", bytes32()).prop_map(|(code, offset, name, key)| {
            OsdSubOp {
                code,
                offset,
                name,
                keys: vec![key.clone()],
                values: vec![key],
                ..OsdSubOp::default()
            }
        });
    let ops = proptest::collection::vec(sub, 0..4);
    prop_oneof![
        (any::<u64>(), any::<u32>(), ".{0,20}", any::<u64>(), ops).prop_map(
            |(pool, pg_seed, oid, tid, ops)| Message::OsdOp(OsdOp {
                pool,
                pg_seed,
                oid,
                tid,
                ops,
                ..OsdOp::default()
            })
        ),
        (any::<u32>(), ".{0,20}", any::<u64>(), bytes32()).prop_map(
            |(code, message, version, key)| Message::OsdOpReply(OsdOpReply {
                code,
                message,
                version,
                results: vec![OsdSubOpResult {
                    keys: vec![key],
                    ..OsdSubOpResult::default()
                }],
                ..OsdOpReply::default()
            })
        ),
        (any::<u64>(), any::<u32>(), bytes32()).prop_map(|(pool, epoch, name)| {
            Message::RepOp(RepOp {
                pool,
                epoch,
                log_entry: name.clone(),
                txn: vec![TxnOp {
                    name,
                    ..TxnOp::default()
                }],
                ..RepOp::default()
            })
        }),
        (any::<u32>(), ".{0,20}").prop_map(|(code, message)| Message::RepOpReply(RepOpReply {
            code,
            message,
            epoch: 1
        })),
        (any::<u64>(), any::<u32>()).prop_map(|(pool, pg_seed)| Message::PgQuery(PgQuery {
            pool,
            pg_seed,
            ..PgQuery::default()
        })),
        (any::<u64>(), bytes32(), any::<bool>()).prop_map(|(pool, info, activate)| {
            Message::PgInfo(PgInfo {
                pool,
                log: vec![info.clone()],
                info,
                activate,
                ..PgInfo::default()
            })
        }),
        (any::<u32>(), bytes32(), any::<bool>(), any::<u64>()).prop_map(
            |(hash, name, exists, to)| {
                Message::PgPush(PgPush {
                    hash,
                    after: exists.then(|| CopyProgress {
                        data_recovered_to: to,
                        omap_recovered_to: name.clone(),
                        omap_started: true,
                        ..CopyProgress::default()
                    }),
                    name,
                    exists,
                    object_size: to,
                    ..PgPush::default()
                })
            }
        ),
        (any::<u64>(), bytes32(), any::<u64>()).prop_map(|(pool, name, len)| {
            Message::PgPushBatch(PgPushBatch {
                pool,
                objects: vec![
                    PgPush {
                        name: name.clone(),
                        exists: true,
                        object_size: len,
                        ..PgPush::default()
                    },
                    PgPush {
                        name,
                        ..PgPush::default()
                    },
                ],
                data_lengths: vec![len, 0],
                ..PgPushBatch::default()
            })
        }),
        (any::<u64>(), any::<u32>(), any::<u32>()).prop_map(|(pool, pg_seed, epoch)| {
            Message::PgStray(PgStray {
                pool,
                pg_seed,
                epoch,
                last_update: format!("{epoch}'{pg_seed}"),
                member: epoch % 2 == 0,
            })
        }),
        (any::<u32>(), bytes32(), any::<u32>()).prop_map(|(cursor_hash, cursor_name, max)| {
            Message::PgList(PgList {
                cursor_hash,
                cursor_name,
                max,
                ..PgList::default()
            })
        }),
        (any::<u32>(), bytes32(), any::<bool>()).prop_map(|(start_hash, end_name, deep)| {
            Message::PgScrub(PgScrub {
                start_hash,
                end_name,
                deep,
                ..PgScrub::default()
            })
        }),
        (any::<u32>(), bytes32(), ".{0,10}").prop_map(|(hash, name, error)| {
            Message::PgScrubMap(PgScrubMap {
                objects: vec![ScrubObject {
                    hash,
                    name,
                    error,
                    ..ScrubObject::default()
                }],
                ..PgScrubMap::default()
            })
        }),
        (any::<u64>(), ".{0,12}").prop_map(|(pool, command)| Message::PgCommand(PgCommand {
            pool,
            command,
            ..PgCommand::default()
        })),
        (any::<u32>(), ".{0,20}").prop_map(|(code, output)| {
            Message::PgCommandReply(PgCommandReply {
                code,
                output,
                ..PgCommandReply::default()
            })
        }),
        (any::<u32>(), bytes32(), any::<u64>()).prop_map(|(hash, name, to)| {
            Message::PgPull(PgPull {
                hash,
                progress: Some(CopyProgress {
                    first: to % 2 == 0,
                    data_recovered_to: to,
                    ..CopyProgress::default()
                }),
                name,
                data_bytes_max: to,
                ..PgPull::default()
            })
        }),
        (any::<u32>(), bytes32(), any::<u64>()).prop_map(|(shard, name, stripe_end)| {
            Message::EcRead(EcRead {
                shard,
                name,
                stripe_end,
                ..EcRead::default()
            })
        }),
        (any::<u32>(), ".{0,20}", any::<u64>()).prop_map(|(code, message, object_size)| {
            Message::EcReadReply(EcReadReply {
                code,
                message,
                object_size,
                ..EcReadReply::default()
            })
        }),
        (".{0,20}", any::<u64>(), any::<u32>()).prop_map(|(oid, cookie, op)| {
            Message::OsdWatch(crate::OsdWatch {
                oid,
                cookie,
                op,
                ..Default::default()
            })
        }),
        (".{0,20}", any::<u64>()).prop_map(|(entity, cookie)| {
            Message::OsdWatchReply(crate::OsdWatchReply {
                watchers: vec![crate::WatcherInfo {
                    entity,
                    cookie,
                    ..Default::default()
                }],
                ..Default::default()
            })
        }),
        (".{0,20}", any::<u32>()).prop_map(|(oid, timeout_ms)| {
            Message::OsdNotify(crate::OsdNotify {
                oid,
                timeout_ms,
                ..Default::default()
            })
        }),
        (any::<u32>(), any::<u64>()).prop_map(|(code, len)| {
            Message::OsdNotifyReply(crate::OsdNotifyReply {
                code,
                reply_len: vec![len],
                ..Default::default()
            })
        }),
        (".{0,20}", any::<u64>()).prop_map(|(notifier, notify_id)| {
            Message::WatchNotify(crate::WatchNotify {
                notifier,
                notify_id,
                ..Default::default()
            })
        }),
        (any::<u64>(), any::<u64>()).prop_map(|(cookie, notify_id)| {
            Message::WatchNotifyAck(crate::WatchNotifyAck { cookie, notify_id })
        }),
        proptest::collection::vec(any::<u8>(), 0..40)
            .prop_map(|body| Message::MdsRequest(crate::MdsRequest { body })),
        proptest::collection::vec(any::<u8>(), 0..40)
            .prop_map(|body| Message::MdsReply(crate::MdsReply { body })),
        proptest::collection::vec(any::<u8>(), 0..40)
            .prop_map(|body| Message::MdsPush(crate::MdsPush { body })),
        (".{0,20}", any::<bool>()).prop_map(|(name, more)| Message::PgListReply(PgListReply {
            names: vec![name],
            more,
            ..PgListReply::default()
        })),
    ]
}

#[test]
fn the_strategy_covers_every_message_type() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut seen = std::collections::HashSet::new();
    let mut runner = TestRunner::deterministic();
    for _ in 0..20000 {
        let m = any_message().new_tree(&mut runner).unwrap().current();
        seen.insert(m.msg_type());
    }
    assert_eq!(seen.len(), MessageType::ALL.len());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn messages_round_trip_through_frames(m in any_message(), tid in any::<u64>(),
                                          data in proptest::collection::vec(any::<u8>(), 0..300)) {
        let control = m.encode_control();
        let ty = m.msg_type() as u16;
        let mut buf = encode_frame(ty, FrameFlags::default(), tid, &control, &data);
        let f = FrameDecoder::new(FrameLimits::default()).decode(&mut buf).unwrap().unwrap();
        prop_assert_eq!(f.header.tid, tid);
        prop_assert_eq!(&f.data[..], &data[..]);
        prop_assert_eq!(Message::decode(f.header.msg_type, &f.control).unwrap(), m);
    }

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512),
                                ty in any::<u16>()) {
        let _ = Message::decode(ty, &bytes);
        let mut buf = BytesMut::from(&bytes[..]);
        let mut d = FrameDecoder::new(FrameLimits::default());
        while let Ok(Some(_)) = d.decode(&mut buf) {}
    }

    #[test]
    fn mutated_frames_never_panic_and_single_byte_damage_is_caught(
        m in any_message(),
        flips in proptest::collection::vec((any::<usize>(), 1u8..=255), 1..6),
        cut in any::<usize>(),
    ) {
        let control = m.encode_control();
        let mut buf = encode_frame(m.msg_type() as u16, FrameFlags::default(), 1, &control, b"xyz");
        let len = buf.len();
        let single = flips.len() == 1;
        for (at, x) in flips {
            buf[at % len] ^= x;
        }
        // Truncated input: never a frame, never a panic.
        let mut part = BytesMut::from(&buf[..cut % len]);
        prop_assert!(!matches!(FrameDecoder::new(FrameLimits::default()).decode(&mut part), Ok(Some(_))));
        let mut whole = buf.clone();
        if let Ok(Some(f)) = FrameDecoder::new(FrameLimits::default()).decode(&mut whole) {
            // Every byte is covered by a checksum (crc32c catches any error
            // burst of up to 32 bits), so one damaged byte never passes.
            prop_assert!(!single, "a single damaged byte was accepted");
            let _ = Message::decode(f.header.msg_type, &f.control);
        }
    }
}

#[test]
fn unknown_and_malformed_are_errors() {
    assert_eq!(
        Message::decode(999, b""),
        Err(DecodeError::UnknownType(999))
    );
    // Field 1 as a length-delimited string with a length running past the end.
    let e = Message::decode(MessageType::Hello as u16, &[0x1a, 0x7f, b'a']).unwrap_err();
    assert!(
        matches!(e, DecodeError::Malformed { ty: "Hello", .. }),
        "{e}"
    );
}

#[test]
fn an_osd_refusal_is_the_requests_own_reply_type() {
    let requests: Vec<(Message, MessageType)> = vec![
        (OsdOp::default().into(), MessageType::OsdOpReply),
        (PgList::default().into(), MessageType::PgListReply),
        (PgCommand::default().into(), MessageType::PgCommandReply),
        (OsdWatch::default().into(), MessageType::OsdWatchReply),
        (OsdNotify::default().into(), MessageType::OsdNotifyReply),
        (EcRead::default().into(), MessageType::EcReadReply),
        (RepOp::default().into(), MessageType::RepOpReply),
        (PgPush::default().into(), MessageType::RepOpReply),
        (PgPushBatch::default().into(), MessageType::RepOpReply),
        (PgStray::default().into(), MessageType::RepOpReply),
    ];
    for (req, ty) in requests {
        let reply = req.osd_refusal(11, "no such pool".into(), 7);
        assert_eq!(reply.msg_type(), ty, "{req:?}");
        // Code, message and epoch survive the wire.
        let back = Message::decode(ty as u16, &reply.encode_control()).unwrap();
        assert_eq!(back, reply);
        let text = format!("{back:?}");
        assert!(
            text.contains("code: 11") && text.contains("no such pool") && text.contains("epoch: 7"),
            "{text}"
        );
    }
}
