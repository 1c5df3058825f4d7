//! Raft RPCs between monitors over the messenger. Each RPC is a
//! [`MonRaft`](shoal_proto::MonRaft) request whose data part is the JSON of
//! openraft's request; the reply's data part is the JSON of the response or
//! of the remote Raft error.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use openraft::BasicNode;
use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use shoal_net::{Messenger, NetError};
use shoal_proto::{Message, MonRaft, MonRaftReply};
use tokio::time::Instant;

use crate::types::TypeConfig;

/// RPC kinds in [`MonRaft::rpc`].
pub(crate) const RPC_APPEND: u32 = 1;
pub(crate) const RPC_VOTE: u32 = 2;
pub(crate) const RPC_SNAPSHOT: u32 = 3;

/// When each peer monitor last answered one of our Raft RPCs. A leader
/// sends every follower a heartbeat each tick, so on the leader this is
/// the quorum as it stands, known without asking anyone.
#[derive(Debug, Default)]
pub struct PeerContact {
    heard: Mutex<BTreeMap<u64, Instant>>,
}

impl PeerContact {
    fn heard(&self, node: u64) {
        let mut h = self.heard.lock().unwrap_or_else(|p| p.into_inner());
        h.insert(node, Instant::now());
    }

    /// Whether `node` answered within `window` before now.
    pub fn heard_within(&self, node: u64, window: Duration) -> bool {
        let h = self.heard.lock().unwrap_or_else(|p| p.into_inner());
        h.get(&node).is_some_and(|t| t.elapsed() <= window)
    }
}

/// Creates one RPC client per target monitor.
#[derive(Clone, Debug)]
pub struct MonNetwork {
    msgr: Messenger,
    contact: Arc<PeerContact>,
}

impl MonNetwork {
    /// Raft RPCs through `msgr`.
    pub fn new(msgr: Messenger) -> Self {
        MonNetwork {
            msgr,
            contact: Arc::default(),
        }
    }

    /// When each peer last answered an RPC of this network's.
    pub fn contact(&self) -> Arc<PeerContact> {
        Arc::clone(&self.contact)
    }
}

/// The RPC client for one target monitor.
#[derive(Debug)]
pub struct MonPeer {
    msgr: Messenger,
    target: u64,
    addr: Result<SocketAddr, String>,
    contact: Arc<PeerContact>,
}

impl RaftNetworkFactory<TypeConfig> for MonNetwork {
    type Network = MonPeer;

    async fn new_client(&mut self, target: u64, node: &BasicNode) -> MonPeer {
        MonPeer {
            msgr: self.msgr.clone(),
            target,
            contact: Arc::clone(&self.contact),
            addr: node
                .addr
                .parse()
                .map_err(|_| format!("bad monitor address {:?}", node.addr)),
        }
    }
}

type RpcResult<T, E> = Result<T, RPCError<u64, BasicNode, RaftError<u64, E>>>;

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Failure(String);

impl MonPeer {
    async fn call<Req, Resp, E>(
        &self,
        rpc: u32,
        req: &Req,
        option: &RPCOption,
    ) -> RpcResult<Resp, E>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let unreachable = |e: &dyn std::fmt::Display| {
            RPCError::Unreachable(Unreachable::new(&Failure(e.to_string())))
        };
        let addr = self.addr.as_ref().map_err(|e| unreachable(e))?;
        let body = serde_json::to_vec(req).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        let conn = self
            .msgr
            .connect(*addr)
            .await
            .map_err(|e| unreachable(&e))?;
        let reply = conn
            .request_with_timeout(MonRaft { rpc }, Bytes::from(body), option.hard_ttl())
            .await
            .map_err(|e: NetError| unreachable(&e))?;
        let Message::MonRaftReply(MonRaftReply { error }) = reply.msg else {
            return Err(unreachable(&"unexpected reply to a Raft RPC"));
        };
        // An answer, even a refusal, shows the peer is up and reachable.
        self.contact.heard(self.target);
        let bad = |e: serde_json::Error| RPCError::Network(NetworkError::new(&e));
        if error {
            let e: RaftError<u64, E> = serde_json::from_slice(&reply.data).map_err(bad)?;
            return Err(RPCError::RemoteError(RemoteError::new(self.target, e)));
        }
        serde_json::from_slice(&reply.data).map_err(bad)
    }
}

impl RaftNetwork<TypeConfig> for MonPeer {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<AppendEntriesResponse<u64>, openraft::error::Infallible> {
        self.call(RPC_APPEND, &rpc, &option).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<InstallSnapshotResponse<u64>, InstallSnapshotError> {
        self.call(RPC_SNAPSHOT, &rpc, &option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<u64>,
        option: RPCOption,
    ) -> RpcResult<VoteResponse<u64>, openraft::error::Infallible> {
        self.call(RPC_VOTE, &rpc, &option).await
    }
}
