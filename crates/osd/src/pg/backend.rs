//! The PG backend: the one seam between a PG's engine and its objects'
//! data. The engine orders and logs changes, peers and decides what to
//! recover; the backend says how a client op runs against the PG's
//! objects, how a logged change becomes what each member applies, how one
//! step of an object's copy is read on a source and installed on a target,
//! and what a member holds of an object for scrub to compare. Replication
//! ([`Replicated`]): every member holds whole objects and applies the
//! same transaction. Erasure coding (`ec.rs`): each member holds one
//! shard of every stripe, at the collection of its position in the acting
//! set.

use bytes::{Bytes, BytesMut};
use shoal_objectstore::{CollectionId, ObjectKey, ObjectStore, Transaction};
use shoal_proto::{PgPush, RepOp, ScrubObject};

use crate::codec::{self, CodecError};
use crate::copy::{self, StepLimits};
use crate::exec::{self, ExecError, ExecInput, ExecOutcome};
use shoal_proto::CopyProgress;

/// A logged change on its way to the members: what the engine hands the
/// backend.
#[derive(Debug)]
pub struct Change<'a> {
    /// The PG's collection on this OSD.
    pub coll: CollectionId,
    /// What the op does to the objects (the engine adds the log entry).
    pub txn: Transaction,
    /// The members other than this OSD that take the change, in order.
    pub members: &'a [i32],
    /// Erasure coding: the shard each of `members` holds (empty for
    /// replication).
    pub member_shards: &'a [u8],
    /// The replicated-op message without its transaction: the PG, epochs,
    /// log entry and statistics deltas.
    pub rep: RepOp,
    /// The client's data part and its checksum (checked on arrival): a
    /// member's data part that is exactly it is not checksummed again.
    pub received: Option<(Bytes, u32)>,
}

/// What each member applies for one change.
#[derive(Debug, PartialEq)]
pub struct Submission {
    /// This OSD's transaction (the engine appends the log entry).
    pub local: Transaction,
    /// For each other member: the message and its data part.
    pub shards: Vec<ShardWrite>,
}

/// One member's part of a change.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardWrite {
    /// The member.
    pub osd: i32,
    /// The message.
    pub msg: RepOp,
    /// Its data part.
    pub data: Bytes,
    /// The data part's checksum ([`shoal_proto::data_crc`]), computed once.
    pub data_crc: u32,
}

/// How a PG's data reaches its members (see the module doc).
pub trait PgBackend: Send + Sync + std::fmt::Debug {
    /// Runs a client op's sub-operations: reads are served, changes come
    /// back as a transaction on this OSD's collection.
    fn execute(&self, input: ExecInput<'_>) -> Result<ExecOutcome, ExecError>;

    /// How a change becomes this OSD's transaction and each other
    /// member's message.
    fn submit(&self, change: Change<'_>) -> Result<Submission, CodecError>;

    /// A recovery source: the next step of our copy of `key` after `before`.
    fn read_step(
        &self,
        store: &dyn ObjectStore,
        coll: CollectionId,
        key: &ObjectKey,
        before: &CopyProgress,
        limits: StepLimits,
    ) -> shoal_objectstore::Result<(PgPush, Bytes)>;

    /// A recovery target: the transaction that installs one step of a copy.
    fn install_step(
        &self,
        store: &dyn ObjectStore,
        coll: CollectionId,
        push: &PgPush,
        data: Bytes,
    ) -> Result<Transaction, String>;

    /// Scrub: what this member holds of `key`, to compare with the others
    /// (`deep`: with a digest of the data and omap).
    fn summarize(
        &self,
        store: &dyn ObjectStore,
        coll: &CollectionId,
        key: &ObjectKey,
        deep: bool,
    ) -> ScrubObject;
}

/// Replication: every member holds whole objects and applies the same
/// transaction, encoded once for all of them.
#[derive(Debug, Default, Clone, Copy)]
pub struct Replicated;

/// The chunks of a data part as one buffer (one chunk is passed as is).
pub(crate) fn concat(chunks: Vec<Bytes>) -> Bytes {
    match chunks.len() {
        0 => Bytes::new(),
        1 => chunks.into_iter().next().unwrap_or_default(),
        _ => {
            let mut b = BytesMut::with_capacity(chunks.iter().map(Bytes::len).sum());
            for c in chunks {
                b.extend_from_slice(&c);
            }
            b.freeze()
        }
    }
}

impl PgBackend for Replicated {
    fn execute(&self, input: ExecInput<'_>) -> Result<ExecOutcome, ExecError> {
        exec::execute(input)
    }

    fn submit(&self, change: Change<'_>) -> Result<Submission, CodecError> {
        let (ops, chunks) = codec::encode(change.coll, &change.txn)?;
        let data = concat(chunks);
        let data_crc = match change.received {
            Some((d, crc)) if d.len() == data.len() && d.as_ptr() == data.as_ptr() => crc,
            _ if change.members.is_empty() => 0,
            _ => shoal_proto::data_crc(&data),
        };
        let mut rep = change.rep;
        rep.txn = ops;
        let shards = change
            .members
            .iter()
            .map(|&osd| ShardWrite {
                osd,
                msg: rep.clone(),
                data: data.clone(),
                data_crc,
            })
            .collect();
        Ok(Submission {
            local: change.txn,
            shards,
        })
    }

    fn read_step(
        &self,
        store: &dyn ObjectStore,
        coll: CollectionId,
        key: &ObjectKey,
        before: &CopyProgress,
        limits: StepLimits,
    ) -> shoal_objectstore::Result<(PgPush, Bytes)> {
        copy::read_step(store, coll, key, before, limits)
    }

    fn install_step(
        &self,
        store: &dyn ObjectStore,
        coll: CollectionId,
        push: &PgPush,
        data: Bytes,
    ) -> Result<Transaction, String> {
        copy::install_step(store, coll, push, data)
    }

    fn summarize(
        &self,
        store: &dyn ObjectStore,
        coll: &CollectionId,
        key: &ObjectKey,
        deep: bool,
    ) -> ScrubObject {
        crate::scrub::summarize(store, coll, key, deep)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_objectstore::ObjectKey;

    #[test]
    fn replication_sends_every_member_the_same_transaction_encoded_once() {
        let coll = CollectionId::new(1, 0);
        let key = ObjectKey::new(7, b"obj".to_vec());
        let mut txn = Transaction::new();
        txn.write(coll, key.clone(), 0, Bytes::from_static(b"hello"));
        txn.write(coll, key, 8, Bytes::from_static(b"world"));
        let rep = RepOp {
            pool: 1,
            epoch: 5,
            ..RepOp::default()
        };
        let sub = Replicated
            .submit(Change {
                coll,
                txn: txn.clone(),
                members: &[2, 3],
                member_shards: &[],
                rep: rep.clone(),
                received: None,
            })
            .unwrap();
        assert_eq!(sub.local, txn);
        let (ops, _) = codec::encode(coll, &txn).unwrap();
        let want = RepOp { txn: ops, ..rep };
        let data = Bytes::from_static(b"helloworld");
        let data_crc = crc32c::crc32c(&data);
        assert_eq!(
            sub.shards,
            vec![
                ShardWrite {
                    osd: 2,
                    msg: want.clone(),
                    data: data.clone(),
                    data_crc,
                },
                ShardWrite {
                    osd: 3,
                    msg: want,
                    data,
                    data_crc,
                },
            ]
        );
        // Both members share one buffer: the data is not copied per member.
        assert_eq!(sub.shards[0].data.as_ptr(), sub.shards[1].data.as_ptr());
        // And it decodes back to the transaction.
        let back = codec::decode(coll, &sub.shards[0].msg.txn, &sub.shards[0].data).unwrap();
        assert_eq!(back, txn);
    }

    #[test]
    fn a_change_outside_the_pg_is_refused() {
        let coll = CollectionId::new(1, 0);
        let other = CollectionId::new(1, 1);
        let mut txn = Transaction::new();
        txn.touch(other, ObjectKey::new(1, b"x".to_vec()));
        let r = Replicated.submit(Change {
            coll,
            txn,
            members: &[2],
            member_shards: &[],
            rep: RepOp::default(),
            received: None,
        });
        assert!(r.is_err());
    }

    #[test]
    fn the_clients_checksum_travels_with_its_data_and_is_not_recomputed() {
        let coll = CollectionId::new(1, 0);
        let client = Bytes::from(vec![7u8; 8192]);
        let crc = crc32c::crc32c(&client);
        let mut txn = Transaction::new();
        txn.write(coll, ObjectKey::new(1, b"x".to_vec()), 0, client.clone());
        let change = |received| Change {
            coll,
            txn: txn.clone(),
            members: &[2],
            member_shards: &[],
            rep: RepOp::default(),
            received,
        };
        // The member's data part is the client's buffer: its checksum as
        // it arrived (a made-up one here, to show it is not recomputed).
        let sub = Replicated
            .submit(change(Some((client.clone(), 0xfeed))))
            .unwrap();
        assert_eq!(sub.shards[0].data.as_ptr(), client.as_ptr());
        assert_eq!(sub.shards[0].data_crc, 0xfeed);
        // Other data (here: part of the client's) is checksummed afresh.
        let sub = Replicated
            .submit(change(Some((client.slice(..4096), 0xfeed))))
            .unwrap();
        assert_eq!(sub.shards[0].data_crc, crc);
        let sub = Replicated.submit(change(None)).unwrap();
        assert_eq!(sub.shards[0].data_crc, crc);
    }
}
