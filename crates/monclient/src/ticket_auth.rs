//! [`TicketAuth`]: the authentication provider of everything that talks to
//! OSDs. It proves its own key to monitors, presents a monitor-issued ticket
//! to OSDs (renewed before it expires), and, inside an OSD, checks the
//! tickets that connecting clients and peers present, with the service
//! secrets alone.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use shoal_net::{AuthProvider, Secret, ServiceSecrets, now_ms};
use shoal_types::{EntityName, EntityType};

use crate::client::MonClient;
use crate::error::MonError;

#[derive(Debug, Default)]
struct Held {
    ticket: Option<(Vec<u8>, Secret, u64)>,
    secrets: ServiceSecrets,
}

/// An [`AuthProvider`] for clients and OSDs: its own key for monitors, a
/// ticket for OSDs, and (in an OSD) the service secrets to check tickets.
#[derive(Debug, Clone)]
pub struct TicketAuth {
    me: EntityName,
    own: Secret,
    /// The service whose daemons the ticket is for (`osd`, or `mds`).
    service: EntityType,
    held: Arc<RwLock<Held>>,
}

impl TicketAuth {
    /// A provider for `me`, whose key is `own`, with no ticket yet.
    pub fn new(me: EntityName, own: Secret) -> Self {
        TicketAuth {
            me,
            own,
            service: EntityType::Osd,
            held: Arc::default(),
        }
    }

    /// A provider whose ticket is for `service`'s daemons (`mds` for a
    /// file-system client) rather than the OSDs.
    pub fn for_service(me: EntityName, own: Secret, service: EntityType) -> Self {
        TicketAuth {
            service,
            ..TicketAuth::new(me, own)
        }
    }

    /// The expiry of the ticket held, ms since the Unix epoch.
    pub fn ticket_expires_ms(&self) -> Option<u64> {
        self.read().ticket.as_ref().map(|t| t.2)
    }

    /// Fetches a fresh ticket for the service from the monitors.
    pub async fn refresh_ticket(&self, monc: &MonClient) -> Result<u64, MonError> {
        let service = self.service.to_string();
        let (sealed, session, expires) = monc.ticket(&self.own, &service).await?;
        self.write().ticket = Some((sealed, session, expires));
        Ok(expires)
    }

    /// Fetches the service secrets of our own kind (OSDs and MDSs only).
    pub async fn refresh_secrets(&self, monc: &MonClient) -> Result<(), MonError> {
        let secrets = monc.service_secrets(&self.me.ty().to_string()).await?;
        self.write().secrets = secrets;
        Ok(())
    }

    /// Keeps the ticket (and, with `secrets`, the service secrets) fresh for
    /// as long as the task runs: renews the ticket when a third of its life
    /// is left, and the secrets every 5 s (the monitors seal new tickets
    /// with a new secret as soon as they rotate it), retrying every second
    /// on failure. Abort the handle to stop.
    pub fn spawn_renewal(&self, monc: MonClient, secrets: bool) -> tokio::task::JoinHandle<()> {
        const SECRETS_EVERY: Duration = Duration::from_secs(5);
        let auth = self.clone();
        tokio::spawn(async move {
            let mut ticket_due = tokio::time::Instant::now();
            loop {
                let now = tokio::time::Instant::now();
                let mut wait = SECRETS_EVERY;
                if now >= ticket_due {
                    ticket_due = match auth.refresh_ticket(&monc).await {
                        Ok(exp) => {
                            let left = exp.saturating_sub(now_ms());
                            now + Duration::from_millis(left * 2 / 3)
                                .max(Duration::from_millis(200))
                        }
                        Err(_) => now + Duration::from_secs(1),
                    };
                }
                if secrets && auth.refresh_secrets(&monc).await.is_err() {
                    wait = Duration::from_secs(1);
                }
                let until_ticket =
                    ticket_due.saturating_duration_since(tokio::time::Instant::now());
                let wait = if secrets {
                    wait.min(until_ticket)
                } else {
                    until_ticket
                };
                tokio::time::sleep(wait.max(Duration::from_millis(200))).await;
            }
        })
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Held> {
        self.held.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Held> {
        self.held.write().unwrap_or_else(|p| p.into_inner())
    }
}

impl AuthProvider for TicketAuth {
    fn own_secret(&self) -> Option<Secret> {
        Some(self.own.clone())
    }

    fn secret_for(&self, _peer: &EntityName) -> Option<Secret> {
        // Only monitors know other entities' keys; everyone else takes tickets.
        None
    }

    fn ticket(&self) -> Option<(Vec<u8>, Secret)> {
        let held = self.read();
        let (sealed, session, expires) = held.ticket.as_ref()?;
        (*expires > now_ms()).then(|| (sealed.clone(), session.clone()))
    }

    fn open_ticket(
        &self,
        peer: &EntityName,
        ticket: &[u8],
    ) -> Option<Result<(Secret, String), String>> {
        let service = self.me.ty();
        if !matches!(service, EntityType::Osd | EntityType::Mds) {
            return None;
        }
        let held = self.read();
        Some(
            held.secrets
                .open(ticket, service, now_ms())
                .map_err(|e| e.to_string())
                .and_then(|(t, session)| {
                    if &t.entity == peer {
                        Ok((session, t.caps))
                    } else {
                        Err(format!("the ticket belongs to {}, not {peer}", t.entity))
                    }
                }),
        )
    }
}
