//! [`MonClient`]: how tools and daemons send commands to the monitors. It
//! tries each monitor in turn (starting with the last that answered) until
//! one answers or the timeout passes.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::Value;
use shoal_net::{Messenger, Secret, ServiceSecrets, Ticket};
use shoal_proto::{Message, MonCommand, MonCommandReply};

use crate::command::Command;
use crate::error::{ErrorCode, MonError};

/// A client of the monitor quorum.
#[derive(Debug, Clone)]
pub struct MonClient {
    msgr: Messenger,
    mons: Arc<Vec<SocketAddr>>,
    timeout: Duration,
    last_good: Arc<AtomicUsize>,
}

impl MonClient {
    /// A client reaching `mons` through `msgr`; each command gives up after
    /// `timeout`.
    pub fn new(msgr: Messenger, mons: Vec<SocketAddr>, timeout: Duration) -> Self {
        MonClient {
            msgr,
            mons: Arc::new(mons),
            timeout,
            last_good: Arc::default(),
        }
    }

    /// Sends `cmd` and returns its JSON output.
    pub async fn command(&self, cmd: &Command) -> Result<Value, MonError> {
        if self.mons.is_empty() {
            return Err(MonError::new(
                ErrorCode::InvalidArgument,
                "no monitors configured (set mon_host)",
            ));
        }
        let json = serde_json::to_string(cmd)
            .map_err(|e| MonError::new(ErrorCode::Internal, e.to_string()))?;
        let deadline = Instant::now() + self.timeout;
        let start = self.last_good.load(Ordering::Relaxed);
        let mut last = String::new();
        let mut attempt = 0usize;
        while Instant::now() < deadline {
            let i = (start + attempt) % self.mons.len();
            attempt += 1;
            let addr = self.mons[i];
            match self.try_one(addr, &json, deadline).await {
                Ok(r) => {
                    self.last_good.store(i, Ordering::Relaxed);
                    return reply_to_result(r);
                }
                Err(e) => last = format!("mon at {addr}: {e}"),
            }
            if attempt % self.mons.len() == 0 {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        Err(MonError::new(
            ErrorCode::NoQuorum,
            format!(
                "no monitor answered within {:?}; last error: {last}",
                self.timeout
            ),
        ))
    }

    /// Asks for a ticket to `service` (e.g. `osd`) for this client, whose
    /// own key is `own_key`; returns the sealed ticket, its session key and
    /// its expiry (ms since the Unix epoch).
    pub async fn ticket(
        &self,
        own_key: &Secret,
        service: &str,
    ) -> Result<(Vec<u8>, Secret, u64), MonError> {
        let v = self
            .command(&Command::AuthGetTicket {
                service: service.to_string(),
            })
            .await?;
        let bad =
            |what: &str| MonError::new(ErrorCode::Internal, format!("bad ticket reply: {what}"));
        let sealed = Secret::decode_base64(v["ticket"].as_str().ok_or_else(|| bad("ticket"))?)
            .map_err(|e| bad(&e))?;
        let wrapped: [u8; 32] = Secret::decode_base64(
            v["session_key"]
                .as_str()
                .ok_or_else(|| bad("session_key"))?,
        )
        .map_err(|e| bad(&e))?
        .try_into()
        .map_err(|_| bad("session key length"))?;
        let t = Ticket::parse(&sealed).map_err(|e| bad(&e.to_string()))?;
        let session = Ticket::unwrap_session_key(&t.nonce, &wrapped, own_key);
        Ok((sealed, session, t.expires_ms))
    }

    /// The service secrets of `service`, for its daemons to check tickets.
    pub async fn service_secrets(&self, service: &str) -> Result<ServiceSecrets, MonError> {
        let v = self
            .command(&Command::AuthServiceSecrets {
                service: service.to_string(),
            })
            .await?;
        let mut out = ServiceSecrets::default();
        for (id, key) in v["secrets"].as_object().into_iter().flatten() {
            let id: u64 = id
                .parse()
                .map_err(|_| MonError::new(ErrorCode::Internal, "bad secret id"))?;
            let key = Secret::from_base64(key.as_str().unwrap_or(""))
                .map_err(|e| MonError::new(ErrorCode::Internal, e))?;
            out.insert(id, key);
        }
        Ok(out)
    }

    async fn try_one(
        &self,
        addr: SocketAddr,
        json: &str,
        deadline: Instant,
    ) -> Result<MonCommandReply, String> {
        let remaining = deadline.saturating_duration_since(Instant::now());
        let conn = tokio::time::timeout(remaining, self.msgr.connect(addr))
            .await
            .map_err(|_| "connect timed out".to_string())?
            .map_err(|e| e.to_string())?;
        let cmd = MonCommand {
            command: json.to_string(),
        };
        let remaining = deadline.saturating_duration_since(Instant::now());
        let reply = conn
            .request_with_timeout(cmd, Bytes::new(), remaining)
            .await
            .map_err(|e| e.to_string())?;
        match reply.msg {
            Message::MonCommandReply(r) => Ok(r),
            other => Err(format!("unexpected reply {}", other.msg_type().name())),
        }
    }
}

fn reply_to_result(r: MonCommandReply) -> Result<Value, MonError> {
    if r.code == 0 {
        serde_json::from_str(&r.output)
            .map_err(|e| MonError::new(ErrorCode::Internal, e.to_string()))
    } else {
        Err(MonError::new(ErrorCode::from_u32(r.code), r.output))
    }
}
