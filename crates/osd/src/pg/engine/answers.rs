//! Steps that only read: a page of the PG's objects for a client or a
//! recovering peer, and a replica's scrub summaries of a key range.

use bytes::Bytes;
use shoal_objectstore::ObjectKey;
use shoal_proto::{OsdErrorCode, PgList, PgListReply, PgScrub, PgScrubMap};

use super::{Effect, PgCore, ReplyTo};
use crate::exec::store_error_code;
use crate::object::split_key;
use crate::pg::State;

/// Bytes of names one listing page carries at most.
const LIST_REPLY_BYTES_MAX: usize = 512 << 10;

/// Objects summarized per store listing, and compared per scrub chunk.
pub(in crate::pg) const SCRUB_LIST_CHUNK: usize = 64;

fn reply(to: ReplyTo, msg: impl Into<shoal_proto::Message>) -> Vec<Effect> {
    vec![Effect::Reply {
        to,
        msg: msg.into(),
        data: Bytes::new(),
        data_crc: None,
    }]
}

impl PgCore {
    /// A page of the PG's objects, in hash order. A client lists through
    /// the primary of an active PG that lacks nothing; a peer OSD
    /// (recovery) lists any member's own copy.
    pub(in crate::pg) fn list(&self, from_osd: bool, msg: PgList, to: ReplyTo) -> Vec<Effect> {
        let epoch = self.epoch();
        let fail = |code: OsdErrorCode, message: String| PgListReply {
            code: code as u32,
            message,
            epoch,
            ..PgListReply::default()
        };
        if !from_osd && !self.is_primary() {
            let m = format!("osd.{} is not the primary of pg {}", self.whoami, self.id);
            return reply(to, fail(OsdErrorCode::WrongPrimary, m));
        }
        if !from_osd && (self.state != State::Active || !self.missing.is_empty()) {
            let m = format!("pg {} is not active, or its primary is recovering", self.id);
            return reply(to, fail(OsdErrorCode::Again, m));
        }
        let max = msg.max.clamp(1, self.cfg.list_max) as usize;
        let start = msg
            .has_cursor
            .then(|| crate::object::wire_key(msg.cursor_hash, &msg.cursor_name, msg.cursor_snap));
        let l = match self.store.list_objects(&self.coll, start.as_ref(), max + 1) {
            Ok(l) => l,
            Err(e) => return reply(to, fail(store_error_code(&e), e.to_string())),
        };
        let mut page = PgListReply {
            epoch,
            ..PgListReply::default()
        };
        let mut bytes = 0usize;
        for (taken, k) in l.objects.iter().enumerate() {
            // Names run to 2 KiB: a page stops short of the control part's
            // limit whatever they are.
            bytes += k.name.len() + 8;
            if taken == max || (taken > 0 && bytes > LIST_REPLY_BYTES_MAX) {
                page.more = true;
                page.next_hash = k.hash;
                page.next_name = k.name.clone();
                page.next_snap = crate::object::wire_snap(k);
                break;
            }
            // Clients see heads; peers (recovery) every clone too.
            if k.snap != ObjectKey::HEAD && !from_osd {
                continue;
            }
            if let Some((ns, name)) = split_key(k) {
                page.nspaces.push(ns);
                page.names.push(name);
                if from_osd {
                    page.snaps.push(crate::object::wire_snap(k));
                }
            }
        }
        if !page.more
            && let Some(next) = &l.next
        {
            page.more = true;
            page.next_hash = next.hash;
            page.next_name = next.name.clone();
            page.next_snap = crate::object::wire_snap(next);
        }
        reply(to, page)
    }

    /// Scrub: our summaries of the objects in the primary's key range.
    pub(in crate::pg) fn scrub_map(&self, msg: PgScrub, to: ReplyTo) -> Vec<Effect> {
        let start = msg
            .has_start
            .then(|| crate::object::wire_key(msg.start_hash, &msg.start_name, msg.start_snap));
        let end = msg
            .has_end
            .then(|| crate::object::wire_key(msg.end_hash, &msg.end_name, msg.end_snap));
        let mut objects = Vec::new();
        let mut cursor = start;
        let result: Result<(), String> = loop {
            let page = match self
                .store
                .list_objects(&self.coll, cursor.as_ref(), SCRUB_LIST_CHUNK)
            {
                Ok(p) => p,
                Err(e) => break Err(e.to_string()),
            };
            let past_end = |k: &ObjectKey| end.as_ref().is_some_and(|e| k > e);
            let mut done = false;
            for k in &page.objects {
                if past_end(k) {
                    done = true;
                    break;
                }
                // Hidden objects (the PG's meta object, half-made copies)
                // are not scrubbed.
                if k.name.first() != Some(&0) {
                    objects.push(self.backend.summarize(
                        self.store.as_ref(),
                        &self.coll,
                        k,
                        msg.deep,
                    ));
                }
            }
            match page.next {
                Some(n) if !done => cursor = Some(n),
                _ => break Ok(()),
            }
        };
        let map = match result {
            Ok(()) => PgScrubMap {
                objects,
                ..PgScrubMap::default()
            },
            Err(e) => PgScrubMap {
                code: OsdErrorCode::Io as u32,
                message: e,
                objects: Vec::new(),
            },
        };
        reply(to, map)
    }
}
