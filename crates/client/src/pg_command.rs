//! Administrative commands for one PG (`scrub`, `deep-scrub`, `repair`,
//! `query`), sent to its primary with the same resend rules as ops.

use std::net::SocketAddr;
use std::time::Duration;
use tokio::time::Instant;

use bytes::Bytes;
use serde_json::Value;
use shoal_maps::PgId;
use shoal_proto::{Message, OsdErrorCode, PgCommand};

use crate::client::Client;
use crate::error::{Error, Result};

impl Client {
    /// Runs `command` on PG `pg` at its primary and returns its JSON
    /// output. A scrub answers when it has finished; `timeout` bounds the wait.
    pub async fn pg_command(&self, pg: PgId, command: &str, timeout: Duration) -> Result<Value> {
        let deadline = Instant::now() + timeout;
        let mut last = String::from("not sent");
        while Instant::now() < deadline {
            let map = self.map()?;
            let pool = map
                .pool(pg.pool)
                .ok_or_else(|| Error::NoPool(format!("pool {}", pg.pool)))?;
            if pg.seed >= pool.pg_num {
                return Err(Error::InvalidArgument(format!("pg {pg} does not exist")));
            }
            let primary = map
                .pg_to_up_acting(pg)
                .map(|m| m.acting_primary)
                .unwrap_or(-1);
            let addr = map
                .osd(primary)
                .and_then(|i| i.addr.clone())
                .and_then(|a| a.parse::<SocketAddr>().ok());
            let Some(addr) = addr else {
                last = format!("pg {pg} has no primary in epoch {}", map.epoch.0);
                self.wait_epoch(
                    map.epoch.0 + 1,
                    (Instant::now() + Duration::from_millis(500)).min(deadline),
                )
                .await;
                continue;
            };
            let msg = PgCommand {
                pool: pg.pool,
                pg_seed: pg.seed,
                epoch: map.epoch.0,
                command: command.to_string(),
            };
            let remaining = deadline.saturating_duration_since(Instant::now());
            let reply = match self.inner_msgr().connect(addr).await {
                Ok(conn) => {
                    conn.request_with_timeout(msg, Bytes::new(), remaining)
                        .await
                }
                Err(e) => Err(e),
            };
            let r = match reply {
                Ok(r) => r,
                Err(e) => {
                    last = format!("osd.{primary}: {e}");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
            };
            let Message::PgCommandReply(rep) = r.msg else {
                return Err(Error::Protocol(format!(
                    "osd.{primary} answered {:?}",
                    r.msg.msg_type()
                )));
            };
            match OsdErrorCode::from_u32(rep.code) {
                OsdErrorCode::Ok => {
                    return serde_json::from_str(&rep.output)
                        .map_err(|e| Error::Protocol(format!("bad command output: {e}")));
                }
                OsdErrorCode::WrongPrimary
                | OsdErrorCode::StaleEpoch
                | OsdErrorCode::Again
                | OsdErrorCode::ShuttingDown => {
                    last = rep.message;
                    let pause = (Instant::now() + Duration::from_millis(200)).min(deadline);
                    self.wait_epoch(rep.epoch.max(map.epoch.0 + 1), pause).await;
                }
                code => return Err(Error::from_osd(code, rep.message)),
            }
        }
        Err(Error::Timeout(timeout, last))
    }
}
