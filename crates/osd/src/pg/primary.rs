//! The driver's side of the primary's op path (the decisions are the
//! engine's, `engine/ops.rs`): client ops enter the engine with their reply
//! handles held here, queued ops run one at a time, and changes leave for
//! the members on their connections, each ack coming back as an event.

use shoal_proto::OsdErrorCode;

use super::backend::ShardWrite;
use super::{ClientOp, Pg, PgEvent, engine};
use crate::log::Version;

impl Pg {
    /// The engine's view of a client op: the driver keeps its reply handle.
    pub(super) fn engine_op(&mut self, op: ClientOp) -> engine::Op {
        let ClientOp {
            msg,
            data,
            data_crc,
            peer,
            responder,
        } = op;
        engine::Op {
            msg,
            data,
            data_crc,
            client: peer.name.to_string(),
            to: self.token(responder),
        }
    }

    /// Runs the ops that waited for the PG to become active, one at a
    /// time: each one's effects are carried out before the next reads the
    /// store.
    pub(super) async fn drain_waiting(&mut self) {
        while let Some(op) = self.core.next_waiting() {
            let fx = self.step(|core| core.execute(op));
            self.drive(fx).await;
        }
    }

    /// Runs, in arrival order, the ops that waited for `key` (one at a
    /// time, as [`Pg::drain_waiting`]).
    pub(super) async fn run_waiting_for(&mut self, key: &shoal_objectstore::ObjectKey) {
        for op in self.core.take_waiting_for(key) {
            let fx = self.step(|core| core.execute(op));
            self.drive(fx).await;
        }
    }

    /// Queues the change on the replica's connection (in order with the
    /// PG's earlier changes) and awaits its ack in a task.
    pub(super) async fn send_rep(&mut self, version: Version, write: ShardWrite) {
        let ShardWrite {
            osd,
            msg,
            data,
            data_crc,
        } = write;
        let events = self.events.clone();
        let timeout = self.ctx.cfg.peer_timeout;
        let conn = match self.conn(osd).await {
            Ok(c) => c,
            Err(e) => {
                let _ = events.send(PgEvent::RepAcked {
                    version,
                    from: osd,
                    result: Err((None, e)),
                });
                return;
            }
        };
        let pending = conn.submit_with_data_crc(msg, data, data_crc).await;
        tokio::spawn(async move {
            let result = match pending {
                Ok(p) => match p.wait(timeout).await {
                    Ok(reply) => match reply.msg {
                        shoal_proto::Message::RepOpReply(r) if r.code == 0 => Ok(()),
                        shoal_proto::Message::RepOpReply(r) => {
                            Err((Some(OsdErrorCode::from_u32(r.code)), r.message))
                        }
                        other => Err((
                            Some(OsdErrorCode::Internal),
                            format!("unexpected reply {:?}", other.msg_type()),
                        )),
                    },
                    Err(e) => Err((None, e.to_string())),
                },
                Err(e) => Err((None, e.to_string())),
            };
            let _ = events.send(PgEvent::RepAcked {
                version,
                from: osd,
                result,
            });
        });
    }

    pub(super) async fn conn(&mut self, osd: i32) -> Result<shoal_net::Connection, String> {
        if let Some(c) = self.conns.get(&osd)
            && !c.is_closed()
        {
            return Ok(c.clone());
        }
        let map = self
            .core
            .map
            .clone()
            .ok_or_else(|| "no map yet".to_string())?;
        let c = self.ctx.peer(&map, osd).await?;
        self.conns.insert(osd, c.clone());
        Ok(c)
    }
}
