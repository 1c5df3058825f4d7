//! What the gateway's tests share: a client of the in-process cluster.

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

use std::sync::Arc;
use std::time::Duration;

use shoal_client::{Client, ClientOptions};
use shoal_testkit::{Cluster, MON, net_cfg};

/// A client of `c` as client.admin, whose ops give up after `op_timeout`
/// and whose watches lapse after `watch_timeout` (none: the default).
pub async fn client(c: &Cluster, op_timeout: Duration, watch_timeout: Option<Duration>) -> Client {
    let mut o = ClientOptions::new(
        vec![MON.parse().unwrap()],
        "client.admin".parse().unwrap(),
        c.admin_key.clone(),
    );
    o.net = net_cfg();
    o.transport = Arc::new(c.net.clone());
    o.op_timeout = op_timeout;
    if let Some(w) = watch_timeout {
        o.watch_timeout = w;
    }
    Client::connect(o).await.unwrap()
}
