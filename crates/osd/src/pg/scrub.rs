//! Scrub, run by the primary a chunk of objects at a time: with no change
//! in flight (so every member holds the same changes), it summarizes its own
//! objects of the chunk, asks every replica for the same key range, and
//! compares (`crate::scrub::compare`). With `repair`, each inconsistent
//! object is copied from its authoritative member to the members that
//! differ. Client ops wait between chunks only as long as a chunk takes.
//!
//! Also here: administrative commands for the PG (`scrub`, `deep-scrub`,
//! `repair`, `query`), and the scrub schedule.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use serde_json::{Value, json};
use shoal_net::{Connection, Responder};
use shoal_objectstore::{ObjectKey, Transaction};
use shoal_proto::{Message, OsdErrorCode, PgCommand, PgCommandReply, PgScrub};

use super::engine::SCRUB_LIST_CHUNK as CHUNK;
use super::engine::{Effect, PgCore, ReplyTo};
use super::{Pg, PgEvent};
use crate::object::pg_meta_key;
use crate::recovery;
use crate::scrub::{Inconsistency, compare};

/// Omap key of the scrub stamps in the PG meta object.
pub(crate) const SCRUB_KEY: &[u8] = b"scrub";

/// A scrub in progress.
#[derive(Debug)]
pub(crate) struct ScrubJob {
    deep: bool,
    repair: bool,
    interval_start: u32,
    cursor: Option<ObjectKey>,
    scrubbed: u64,
    found: Vec<Inconsistency>,
    repaired: u64,
    waiters: Vec<ReplyTo>,
}

impl ScrubJob {
    pub(crate) fn is_deep(&self) -> bool {
        self.deep
    }
}

/// What the last scrub found.
#[derive(Debug, Clone, Default)]
pub(crate) struct ScrubRecord {
    /// When the last scrub (of either kind) ended, ms since the Unix epoch.
    pub(crate) stamp_ms: u64,
    /// When the last deep scrub ended.
    pub(crate) deep_stamp_ms: u64,
    /// Inconsistent objects left: (name, what differs).
    pub(crate) inconsistent: Vec<(String, String)>,
}

impl ScrubRecord {
    pub(crate) fn decode(b: &[u8]) -> ScrubRecord {
        let mut r = ScrubRecord::default();
        if b.len() == 17 && b[0] == 1 {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[1..9]);
            r.stamp_ms = u64::from_le_bytes(a);
            a.copy_from_slice(&b[9..17]);
            r.deep_stamp_ms = u64::from_le_bytes(a);
        }
        r
    }

    fn encode(&self) -> Bytes {
        let mut v = vec![1u8];
        v.extend_from_slice(&self.stamp_ms.to_le_bytes());
        v.extend_from_slice(&self.deep_stamp_ms.to_le_bytes());
        Bytes::from(v)
    }
}

fn command_reply(code: OsdErrorCode, epoch: u32, message: String, output: Value) -> PgCommandReply {
    PgCommandReply {
        code: code as u32,
        message,
        epoch,
        output: output.to_string(),
    }
}

/// A command's answer, from a task of its own.
fn answer(to: ReplyTo, reply: PgCommandReply) -> Effect {
    Effect::ReplyLater {
        to,
        msg: reply.into(),
        data: Bytes::new(),
    }
}

/// What one scrubbed chunk found (the driver compares and repairs).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ChunkOutcome {
    /// Objects of ours summarized.
    pub scrubbed: u64,
    /// Objects the members disagree on.
    pub found: Vec<Inconsistency>,
    /// Copies repair replaced.
    pub repaired: u64,
    /// Where the next chunk starts (None: this was the last).
    pub next: Option<ObjectKey>,
}

fn key_name(k: &ObjectKey) -> String {
    String::from_utf8_lossy(&k.name).replace('\0', "/")
}

impl Pg {
    /// `scrub`, `deep-scrub`, `repair` or `query`, sent to the primary.
    pub(super) async fn command(&mut self, msg: PgCommand, responder: Responder) {
        let to = self.token(responder);
        let fx = if msg.command == "query" {
            let out = self.query_json();
            let epoch = self.core.epoch();
            vec![answer(
                to,
                command_reply(OsdErrorCode::Ok, epoch, String::new(), out),
            )]
        } else {
            self.core.scrub_command(&msg.command, to)
        };
        self.drive(fx).await;
    }

    /// Scrubs one chunk (the replicas' summaries and repair are awaited
    /// here: ops wait between chunks only), then hands the engine what it
    /// found.
    pub(super) async fn scrub_chunk(
        &mut self,
        deep: bool,
        repair: bool,
        cursor: Option<ObjectKey>,
    ) {
        let r = self.run_scrub_chunk(deep, repair, cursor).await;
        let fx = self.core.scrub_chunk_done(r);
        self.drive(fx).await;
    }

    /// [`PgEvent::ScrubStep`] after `delay` (or now).
    pub(super) fn scrub_step_after(&self, delay: Duration) {
        self.send_after(delay, PgEvent::ScrubStep);
    }

    /// One chunk from `cursor`: summarize ours, ask every replica for
    /// the same key range, compare, and (with `repair`) copy each
    /// inconsistent object from its authoritative member.
    async fn run_scrub_chunk(
        &mut self,
        deep: bool,
        repair: bool,
        cursor: Option<ObjectKey>,
    ) -> Result<ChunkOutcome, String> {
        let page = shoal_net::runtime::blocking(|| {
            self.ctx
                .store
                .list_objects(&self.core.coll, cursor.as_ref(), CHUNK)
        })
        .map_err(|e| e.to_string())?;
        let mine: Vec<_> = page
            .objects
            .iter()
            .filter(|k| k.name.first() != Some(&0))
            .map(|k| {
                shoal_net::runtime::blocking(|| {
                    self.core
                        .backend
                        .summarize(self.ctx.store.as_ref(), &self.core.coll, k, deep)
                })
            })
            .collect();
        let last = page.objects.last().cloned();
        let more = page.next.is_some();
        let req = PgScrub {
            pool: self.core.id.pool,
            pg_seed: self.core.id.seed,
            epoch: self.core.epoch(),
            deep,
            start_hash: cursor.as_ref().map_or(0, |c| c.hash),
            start_name: cursor.as_ref().map(|c| c.name.clone()).unwrap_or_default(),
            has_start: cursor.is_some(),
            end_hash: last.as_ref().map_or(0, |l| l.hash),
            end_name: last.as_ref().map(|l| l.name.clone()).unwrap_or_default(),
            has_end: more,
            start_snap: cursor.as_ref().map_or(0, crate::object::wire_snap),
            end_snap: last.as_ref().map_or(0, crate::object::wire_snap),
        };
        let mut maps = BTreeMap::new();
        maps.insert(self.core.whoami(), mine);
        for r in self.core.replicas() {
            let conn = self.conn(r).await?;
            let reply = conn
                .request_with_timeout(req.clone(), Bytes::new(), self.ctx.cfg.peer_timeout)
                .await
                .map_err(|e| format!("osd.{r}: {e}"))?;
            let Message::PgScrubMap(m) = reply.msg else {
                return Err(format!(
                    "osd.{r} answered scrub with {:?}",
                    reply.msg.msg_type()
                ));
            };
            if m.code != 0 {
                return Err(format!("osd.{r}: {}", m.message));
            }
            maps.insert(r, m.objects);
        }
        let mut found = compare(self.core.whoami(), &maps);
        if deep && self.core.ec.is_some() {
            found.extend(self.ec_verify_parity(&maps, &found).await);
        }
        let mut repaired = 0;
        if repair {
            for inc in &found {
                repaired += self.repair_object(inc).await?;
            }
        }
        let _ = more;
        Ok(ChunkOutcome {
            scrubbed: maps.get(&self.ctx.whoami).map_or(0, |m| m.len() as u64),
            found,
            repaired,
            next: page.next,
        })
    }

    /// Copies the authoritative copy of one object to every member that
    /// differs; returns how many copies it replaced.
    async fn repair_object(&mut self, inc: &Inconsistency) -> Result<u64, String> {
        let Some(auth) = inc.auth else {
            return Ok(0);
        };
        if self.core.ec.is_some() {
            return self.ec_repair_object(inc).await;
        }
        let me = self.core.whoami();
        if auth != me && inc.bad.contains(&me) {
            let src = self.conn(auth).await?;
            self.pull_one(&src, &inc.key).await?;
        }
        let mut n = u64::from(inc.bad.contains(&me) && auth != me);
        for &m in inc.bad.iter().filter(|m| **m != me) {
            let dst = self.conn(m).await?;
            self.push_one(&dst, &inc.key).await?;
            n += 1;
        }
        Ok(n)
    }

    /// Erasure coding: the bad members' shards are rebuilt by decoding
    /// from the others.
    async fn ec_repair_object(&mut self, inc: &Inconsistency) -> Result<u64, String> {
        let ec = self.core.ec.clone().ok_or("the PG is not erasure coded")?;
        let sources: Vec<(i32, u8)> = self
            .core
            .shards()
            .into_iter()
            .filter(|m| !inc.bad.contains(m))
            .filter_map(|m| ec.shard_of(m).map(|s| (m, s)))
            .collect();
        let reader = self
            .ec_reader_for()
            .await
            .ok_or("the PG is not erasure coded")?;
        let fence = recovery::CopyFence::fixed();
        let backend = std::sync::Arc::clone(&self.core.backend);
        let (done, error) = reader
            .rebuild(&inc.key, &inc.bad, &sources, Some(true), &fence, &backend)
            .await;
        match error {
            Some(e) => Err(e),
            None => Ok(done.len() as u64),
        }
    }

    /// Deep scrub of an erasure-coded PG: every object all members agree
    /// on is read whole from every shard and its coding chunks recomputed
    /// from its data chunks; a mismatch is reported (no shard can be
    /// named as the bad one: each passed its own checksums).
    async fn ec_verify_parity(
        &mut self,
        maps: &BTreeMap<i32, Vec<shoal_proto::ScrubObject>>,
        found: &[Inconsistency],
    ) -> Vec<Inconsistency> {
        let Some(reader) = self.ec_reader_for().await else {
            return Vec::new();
        };
        let mine = maps.get(&self.core.whoami()).cloned().unwrap_or_default();
        let mut out = Vec::new();
        for o in mine {
            let key = crate::object::wire_key(o.hash, &o.name, o.snap);
            if found.iter().any(|i| i.key == key) {
                continue;
            }
            match reader.verify(&key).await {
                Ok(true) => {}
                Ok(false) => out.push(Inconsistency {
                    key,
                    bad: Vec::new(),
                    auth: None,
                    why: "coding chunks do not match the data chunks".into(),
                }),
                Err(e) => out.push(Inconsistency {
                    key,
                    bad: Vec::new(),
                    auth: None,
                    why: format!("shards could not all be read: {e}"),
                }),
            }
        }
        out
    }

    async fn pull_one(&mut self, src: &Connection, key: &ObjectKey) -> Result<(), String> {
        let fence = recovery::CopyFence::fixed();
        recovery::pull_object(self.copier(&fence), src, key, None).await
    }

    async fn push_one(&mut self, dst: &Connection, key: &ObjectKey) -> Result<(), String> {
        let fence = recovery::CopyFence::fixed();
        recovery::push_object(self.copier(&fence), dst, key, None).await
    }

    /// Repair's copies: of this interval, never fenced off.
    fn copier<'a>(&'a self, fence: &'a recovery::CopyFence) -> recovery::Copier<'a> {
        recovery::Copier {
            ctx: &self.ctx,
            backend: &self.core.backend,
            pg: self.core.id,
            epoch: self.core.epoch(),
            fence,
        }
    }

    /// A member's summaries of the objects in the requested range.
    fn query_json(&self) -> Value {
        let info = &self.core.log.info;
        json!({
            "pgid": self.core.id.to_string(),
            "state": self.stat().map(|s| s.state).unwrap_or_else(|| format!("{:?}", self.core.state)),
            "epoch": self.core.epoch(),
            "up": self.core.up,
            "acting": self.core.acting,
            "primary": self.core.primary,
            "interval_start": self.core.interval_start,
            "previous_acting": self.core.prior,
            "info": {
                "last_update": info.last_update.to_string(),
                "log_tail": info.log_tail.to_string(),
                "last_epoch_started": info.last_epoch_started,
                "objects": info.objects,
                "bytes": info.bytes,
            },
            "log_entries": self.core.log.len(),
            "missing": self.missing_json(),
            "peering": self.peering_json(),
            "ops_waiting": self.core.waiting.len(),
            "ops_in_flight": self.core.inflight.len(),
            "scrub": {
                "running": self.core.scrub.is_some(),
                "last_scrub_ms": self.core.scrub_record.stamp_ms,
                "last_deep_scrub_ms": self.core.scrub_record.deep_stamp_ms,
                "inconsistent": self.core.scrub_record.inconsistent.iter()
                    .map(|(o, why)| json!({ "object": o, "why": why }))
                    .collect::<Vec<_>>(),
            },
        })
    }
}

impl PgCore {
    /// Active with nothing to recover.
    pub(super) fn active_clean(&self) -> bool {
        self.state == super::State::Active && self.recovery.is_none()
    }

    /// `scrub`, `deep-scrub` or `repair` asked of this PG.
    pub(super) fn scrub_command(&mut self, command: &str, to: ReplyTo) -> Vec<Effect> {
        let epoch = self.epoch();
        let (deep, repair) = match command {
            "scrub" => (false, false),
            "deep-scrub" => (true, false),
            "repair" => (true, true),
            other => {
                let m = format!("unknown pg command {other:?} (scrub, deep-scrub, repair, query)");
                let r = command_reply(OsdErrorCode::InvalidArgument, epoch, m, Value::Null);
                return vec![answer(to, r)];
            }
        };
        if !self.is_primary() {
            let m = format!("osd.{} is not the primary of pg {}", self.whoami, self.id);
            let r = command_reply(OsdErrorCode::WrongPrimary, epoch, m, Value::Null);
            return vec![answer(to, r)];
        }
        if !self.active_clean() {
            let m = format!("pg {} is not active+clean", self.id);
            let r = command_reply(OsdErrorCode::Again, epoch, m, Value::Null);
            return vec![answer(to, r)];
        }
        self.start_scrub(deep, repair, Some(to))
    }

    pub(super) fn start_scrub(
        &mut self,
        deep: bool,
        repair: bool,
        waiter: Option<ReplyTo>,
    ) -> Vec<Effect> {
        if let Some(job) = &mut self.scrub {
            job.deep |= deep;
            job.repair |= repair;
            job.waiters.extend(waiter);
            return Vec::new();
        }
        self.scrub = Some(ScrubJob {
            deep,
            repair,
            interval_start: self.interval_start,
            cursor: None,
            scrubbed: 0,
            found: Vec::new(),
            repaired: 0,
            waiters: waiter.into_iter().collect(),
        });
        vec![Effect::ScrubStepAfter(Duration::ZERO)]
    }

    /// The periodic check: starts a scrub when one is due.
    pub(super) fn scrub_tick(
        &mut self,
        now_ms: u64,
        every_ms: u64,
        deep_every_ms: u64,
    ) -> Vec<Effect> {
        if !self.is_primary() || !self.active_clean() || self.scrub.is_some() {
            return Vec::new();
        }
        // As Ceph's flags: they hold scheduled scrubs, not asked-for ones.
        let flag = |f: &str| self.map.as_ref().is_some_and(|m| m.has_flag(f));
        let (noscrub, nodeep) = (flag("noscrub"), flag("nodeep-scrub"));
        // A PG never scrubbed (a new one) starts its clocks now, as Ceph
        // stamps a PG at its creation: a new cluster's PGs do not all
        // come due at once, at its first tick.
        if self.scrub_record.stamp_ms == 0 || self.scrub_record.deep_stamp_ms == 0 {
            let rec = &mut self.scrub_record;
            for stamp in [&mut rec.stamp_ms, &mut rec.deep_stamp_ms] {
                if *stamp == 0 {
                    *stamp = now_ms;
                }
            }
            return vec![Effect::Record(self.scrub_record_txn())];
        }
        let rec = &self.scrub_record;
        if !nodeep && now_ms.saturating_sub(rec.deep_stamp_ms) >= deep_every_ms {
            self.start_scrub(true, false, None)
        } else if !noscrub && now_ms.saturating_sub(rec.stamp_ms) >= every_ms {
            self.start_scrub(false, false, None)
        } else {
            Vec::new()
        }
    }

    /// Ends the job with an error for its waiters.
    pub(super) fn abort_scrub(&mut self, why: &str) -> Vec<Effect> {
        let Some(job) = self.scrub.take() else {
            return Vec::new();
        };
        let epoch = self.epoch();
        job.waiters
            .into_iter()
            .map(|w| {
                let m = format!("scrub of pg {} stopped: {why}", self.id);
                answer(w, command_reply(OsdErrorCode::Again, epoch, m, Value::Null))
            })
            .collect()
    }

    /// Scrubs the next chunk: once no change is in flight (every member
    /// has every change), and while the PG stays active+clean in the
    /// interval the scrub began in.
    pub(super) fn scrub_step(&mut self) -> Vec<Effect> {
        let Some(job) = &self.scrub else {
            return Vec::new();
        };
        if job.interval_start != self.interval_start || !self.is_primary() {
            return self.abort_scrub("the PG changed interval");
        }
        if !self.active_clean() {
            return self.abort_scrub("the PG is not active+clean");
        }
        if !self.inflight.is_empty() {
            // Wait until every member has every change.
            return vec![Effect::ScrubStepAfter(Duration::from_millis(20))];
        }
        vec![Effect::ScrubChunk {
            deep: job.deep,
            repair: job.repair,
            cursor: job.cursor.clone(),
        }]
    }

    /// A chunk was scrubbed (or could not be): the next, or the end.
    pub(super) fn scrub_chunk_done(&mut self, r: Result<ChunkOutcome, String>) -> Vec<Effect> {
        let c = match r {
            Ok(c) => c,
            Err(e) => return self.abort_scrub(&e),
        };
        let Some(job) = &mut self.scrub else {
            return Vec::new();
        };
        job.scrubbed += c.scrubbed;
        job.repaired += c.repaired;
        job.found.extend(c.found);
        job.cursor = c.next;
        if job.cursor.is_some() {
            return vec![Effect::ScrubStepAfter(Duration::ZERO)];
        }
        self.finish_scrub()
    }

    /// The transaction persisting the scrub record.
    fn scrub_record_txn(&self) -> Transaction {
        let mut t = Transaction::new();
        t.omap_set_keys(
            self.coll,
            pg_meta_key(),
            BTreeMap::from([(Bytes::from_static(SCRUB_KEY), self.scrub_record.encode())]),
        );
        t
    }

    fn finish_scrub(&mut self) -> Vec<Effect> {
        let Some(job) = self.scrub.take() else {
            return Vec::new();
        };
        let now = (self.clock)();
        let left: Vec<(String, String)> = job
            .found
            .iter()
            .filter(|i| !job.repair || i.auth.is_none())
            .map(|i| (key_name(&i.key), i.why.clone()))
            .collect();
        self.scrub_record.stamp_ms = now;
        if job.deep {
            self.scrub_record.deep_stamp_ms = now;
        }
        self.scrub_record.inconsistent = left;
        let mut fx = vec![Effect::StatsChanged];
        fx.push(Effect::Record(self.scrub_record_txn()));
        if !job.found.is_empty() {
            tracing::warn!(pg = %self.id, errors = job.found.len(), repaired = job.repaired,
                "scrub found inconsistent objects");
        }
        let out = serde_json::to_value(crate::scrub::ScrubReport {
            pgid: self.id.to_string(),
            deep: job.deep,
            repair: job.repair,
            objects: job.scrubbed,
            errors: job.found.len() as u64,
            repaired: job.repaired,
            inconsistent: job
                .found
                .iter()
                .map(|i| crate::scrub::ScrubFinding {
                    object: key_name(&i.key),
                    bad: i.bad.clone(),
                    auth: i.auth,
                    why: i.why.clone(),
                })
                .collect(),
        })
        .unwrap_or(Value::Null);
        let epoch = self.epoch();
        fx.extend(job.waiters.into_iter().map(|w| {
            answer(
                w,
                command_reply(OsdErrorCode::Ok, epoch, String::new(), out.clone()),
            )
        }));
        fx
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message as _;
    use shoal_objectstore::{CollectionId, MemStore, ObjectStore, Transaction};

    #[test]
    fn a_chunk_of_summaries_fits_a_frame_whatever_its_objects_hold() {
        // An object with 2 MB of omap and 64 KiB of xattrs: its summary is
        // two checksums, whatever it holds.
        let s = MemStore::new(1 << 30);
        let c = CollectionId::new(1, 0);
        let k = ObjectKey::new(3, "huge");
        let mut t = Transaction::new();
        t.create_collection(c).set_xattrs(
            c,
            k.clone(),
            [("u.x".to_string(), Bytes::from(vec![7u8; 64 << 10]))].into(),
        );
        let omap = (0..20_000u32)
            .map(|i| {
                (
                    Bytes::from(i.to_be_bytes().to_vec()),
                    Bytes::from(vec![1u8; 100]),
                )
            })
            .collect();
        t.omap_set_keys(c, k.clone(), omap);
        s.apply_transaction(t).unwrap();
        let one = crate::scrub::summarize(&s, &c, &k, true);
        assert!(one.error.is_empty(), "{}", one.error);
        assert!(one.encoded_len() < 64, "{}", one.encoded_len());
        // A whole chunk of the longest names fits the 1 MiB control part.
        let longest =
            vec![b'n'; crate::object::NAME_BYTES_MAX + 1 + crate::object::NSPACE_BYTES_MAX];
        let like = |i: usize| shoal_proto::ScrubObject {
            hash: i as u32,
            name: longest.clone(),
            error: "checksum mismatch in block 12345 of the object".into(),
            ..one.clone()
        };
        let map = shoal_proto::PgScrubMap {
            objects: (0..CHUNK).map(like).collect(),
            ..shoal_proto::PgScrubMap::default()
        };
        assert!(map.encoded_len() < 512 << 10, "{}", map.encoded_len());
    }
}
