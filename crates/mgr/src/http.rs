//! The manager's HTTP side: `/metrics`, the dashboard's page and assets
//! (built into the binary: no CDN, works offline), and its JSON API —
//! `POST /api/login`, `POST /api/logout`, `GET /api/whoami`,
//! `GET /api/summary`, `POST /api/action`. A standby answers `/metrics` with 503 and sends
//! browsers to the active manager.

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::http::{HeaderValue, Method, StatusCode, header};
use hyper::{Request, Response};
use serde_json::{Value, json};
use shoal_monclient::replies::AuthReply;
use shoal_monclient::{Command, ErrorCode, PoolSpec, parse_mon_caps};
use shoal_net::Secret;
use shoal_types::EntityName;

use crate::Shared;
use crate::session::Session;

const INDEX_HTML: &str = include_str!("../assets/index.html");
const APP_JS: &str = include_str!("../assets/app.js");
const STYLE_CSS: &str = include_str!("../assets/style.css");

/// Request bodies are small JSON documents.
const BODY_MAX: usize = 64 << 10;
const COOKIE: &str = "shoal_session";

type Resp = Response<Full<Bytes>>;

/// Accepts connections until the manager stops.
pub(crate) async fn serve(s: Arc<Shared>, listener: tokio::net::TcpListener) {
    loop {
        let (io, _) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!("mgr accept: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let s = Arc::clone(&s);
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let s = Arc::clone(&s);
                async move { Ok::<_, std::convert::Infallible>(route(&s, req).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(io), service)
                .await;
        });
    }
}

fn respond(status: StatusCode, ctype: &'static str, body: impl Into<Bytes>) -> Resp {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(ctype));
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

fn json_resp(status: StatusCode, v: &Value) -> Resp {
    respond(status, "application/json", v.to_string())
}

fn error(status: StatusCode, msg: impl Into<String>) -> Resp {
    json_resp(status, &json!({ "error": msg.into() }))
}

/// A request refused: its status and why (answered as `{"error": ...}`).
struct Refused(StatusCode, String);

impl Refused {
    fn bad(msg: impl Into<String>) -> Refused {
        Refused(StatusCode::BAD_REQUEST, msg.into())
    }

    fn resp(self) -> Resp {
        error(self.0, self.1)
    }
}

/// The session cookie's token, if the request has one.
fn token(req: &Request<hyper::body::Incoming>) -> Option<String> {
    req.headers()
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == COOKIE)
        .map(|(_, v)| v.to_string())
}

async fn body_json<T: serde::de::DeserializeOwned>(
    req: Request<hyper::body::Incoming>,
) -> Result<T, Refused> {
    let body = Limited::new(req.into_body(), BODY_MAX)
        .collect()
        .await
        .map_err(|e| Refused::bad(format!("request body: {e}")))?
        .to_bytes();
    serde_json::from_slice(&body).map_err(|e| Refused::bad(format!("request body: {e}")))
}

/// `POST /api/login`'s body.
#[derive(Debug, serde::Deserialize)]
struct Login {
    entity: String,
    key: String,
}

/// `POST /api/action`'s body: the action's name in `action`, its
/// arguments beside it (`{"action": "osd-out", "osd": 3}`).
#[derive(Debug, PartialEq, serde::Deserialize)]
#[serde(tag = "action", rename_all = "kebab-case")]
enum Action {
    OsdOut {
        osd: i32,
    },
    OsdIn {
        osd: i32,
    },
    OsdScrub {
        osd: i32,
    },
    OsdDeepScrub {
        osd: i32,
    },
    PoolCreate {
        pool: String,
        #[serde(default = "default_pg_num")]
        pg_num: u32,
        #[serde(default = "default_size")]
        size: u32,
    },
    PoolSet {
        pool: String,
        key: String,
        value: String,
    },
    FlagSet {
        flag: String,
    },
    FlagUnset {
        flag: String,
    },
}

fn default_pg_num() -> u32 {
    32
}

fn default_size() -> u32 {
    3
}

async fn route(s: &Shared, req: Request<hyper::body::Incoming>) -> Resp {
    let path = req.uri().path().to_string();
    let method = req.method().clone();
    if !s.active() {
        return standby(s, &path);
    }
    match (&method, path.as_str()) {
        (&Method::GET, "/metrics") => match s.snapshot_now().await {
            Ok(snap) => respond(
                StatusCode::OK,
                "text/plain; version=0.0.4; charset=utf-8",
                crate::prom::render(&snap),
            ),
            Err(e) => error(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("could not gather the cluster's state: {e}"),
            ),
        },
        (&Method::GET, "/" | "/index.html") => {
            respond(StatusCode::OK, "text/html; charset=utf-8", INDEX_HTML)
        }
        (&Method::GET, "/static/app.js") => {
            respond(StatusCode::OK, "text/javascript; charset=utf-8", APP_JS)
        }
        (&Method::GET, "/static/style.css") => {
            respond(StatusCode::OK, "text/css; charset=utf-8", STYLE_CSS)
        }
        (&Method::GET, "/favicon.ico") => respond(StatusCode::NO_CONTENT, "image/x-icon", ""),
        (&Method::POST, "/api/login") => login(s, req).await,
        (&Method::POST, "/api/logout") => {
            if let Some(t) = token(&req) {
                s.sessions.close(&t);
            }
            let mut r = json_resp(StatusCode::OK, &json!({ "ok": true }));
            set_cookie(&mut r, "", 0);
            r
        }
        (&Method::GET, "/api/whoami") => {
            let user = session(s, &req)
                .ok()
                .map(|x| json!({ "entity": x.entity, "admin": x.admin }));
            json_resp(StatusCode::OK, &json!({ "user": user }))
        }
        (&Method::GET, "/api/summary") => match session(s, &req) {
            Ok(sess) => json_resp(StatusCode::OK, &summary(s, &sess)),
            Err(r) => r.resp(),
        },
        (&Method::POST, "/api/action") => {
            let sess = match session(s, &req) {
                Ok(x) => x,
                Err(r) => return r.resp(),
            };
            match body_json(req).await {
                Ok(act) => action(s, &sess, act).await,
                Err(r) => r.resp(),
            }
        }
        _ => error(StatusCode::NOT_FOUND, format!("no {method} {path}")),
    }
}

/// A standby's answer: browsers go to the active manager, Prometheus
/// gets 503 (it scrapes every manager; only the active one answers).
fn standby(s: &Shared, path: &str) -> Resp {
    let active = crate::read(&s.mgrmap)
        .active
        .as_ref()
        .map(|a| a.addr.clone());
    match active {
        Some(addr) if path != "/metrics" && !path.starts_with("/api/") => {
            let mut r = respond(StatusCode::TEMPORARY_REDIRECT, "text/plain", "");
            if let Ok(v) = HeaderValue::from_str(&format!("http://{addr}{path}")) {
                r.headers_mut().insert(header::LOCATION, v);
            }
            r
        }
        Some(addr) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "mgr.{} is a standby; the active manager is at {addr}",
                s.opts.name
            ),
        ),
        None => error(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("mgr.{} is not active and no manager is", s.opts.name),
        ),
    }
}

fn set_cookie(r: &mut Resp, token: &str, max_age: u64) {
    let c = format!("{COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age}");
    if let Ok(v) = HeaderValue::from_str(&c) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
}

fn session(s: &Shared, req: &Request<hyper::body::Incoming>) -> Result<Arc<Session>, Refused> {
    token(req)
        .and_then(|t| s.sessions.get(&t))
        .ok_or_else(|| Refused(StatusCode::UNAUTHORIZED, "log in first".into()))
}

/// Logs a user in: their key opens a monitor session (the monitors check
/// it); their `mon` caps, read with the manager's own session, say whether
/// the dashboard offers them actions.
async fn login(s: &Shared, req: Request<hyper::body::Incoming>) -> Resp {
    let Login { entity, key } = match body_json(req).await {
        Ok(v) => v,
        Err(r) => return r.resp(),
    };
    let Ok(name) = entity.trim().parse::<EntityName>() else {
        return error(
            StatusCode::BAD_REQUEST,
            format!("{entity:?} is not an entity name (client.admin)"),
        );
    };
    let Ok(secret) = Secret::from_base64(key.trim()) else {
        return error(StatusCode::UNAUTHORIZED, "wrong entity or key");
    };
    let monc = (s.hooks.login)(name.clone(), secret.clone());
    if let Err(e) = monc.command(&Command::MonStat).await {
        tracing::info!(%name, "dashboard login refused: {e}");
        return error(StatusCode::UNAUTHORIZED, "wrong entity or key");
    }
    let entity = name.to_string();
    let caps = s
        .monc
        .command_as::<AuthReply>(&Command::AuthGet {
            entity: entity.clone(),
        })
        .await
        .ok()
        .and_then(|mut v| v.remove(&entity))
        .and_then(|mut e| e.caps.remove("mon"))
        .unwrap_or_default();
    let caps = parse_mon_caps(&caps);
    let sess = Session {
        entity: entity.clone(),
        admin: caps.write,
        monc,
        key: secret,
    };
    let admin = sess.admin;
    let token = s.sessions.open(sess);
    if token.is_empty() {
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "no randomness for a session",
        );
    }
    let mut r = json_resp(StatusCode::OK, &json!({ "entity": entity, "admin": admin }));
    set_cookie(&mut r, &token, crate::session::IDLE.as_secs());
    r
}

/// A pool as the dashboard shows it: its `df` line and its recent I/O.
#[derive(serde::Serialize)]
struct PoolView<'a> {
    #[serde(flatten)]
    pool: &'a shoal_monclient::replies::PoolDf,
    io: crate::gather::Io,
}

/// Everything the dashboard shows, from the newest snapshot.
fn summary(s: &Shared, sess: &Session) -> Value {
    let Some(snap) = s.snapshot() else {
        return json!({ "ready": false, "user": { "entity": sess.entity, "admin": sess.admin } });
    };
    let history = crate::lock(&s.history);
    let pools: Vec<PoolView> = snap
        .df
        .pools
        .iter()
        .map(|pool| PoolView {
            pool,
            io: history.pools.get(&pool.id).copied().unwrap_or_default(),
        })
        .collect();
    let pg = snap.status.pgmap.clone().unwrap_or_default();
    let left = pg.recovery_objects_left;
    let rate = pg.recovery_objects_per_s;
    let eta = (left > 0 && rate > 0).then(|| left.div_ceil(rate));
    json!({
        "ready": true,
        "at_ms": snap.at_ms,
        "user": { "entity": sess.entity, "admin": sess.admin },
        "mgr": { "name": s.opts.name, "map": serde_json::to_value(&*crate::read(&s.mgrmap)).unwrap_or(Value::Null) },
        "status": snap.status,
        "osds": snap.tree.nodes,
        "pools": pools,
        "recovery": {
            "objects_left": left,
            "objects_per_s": rate,
            "degraded": pg.num_objects_degraded,
            "misplaced": pg.num_objects_misplaced,
            "copies": pg.num_object_copies,
            "eta_secs": eta,
        },
        "history": history.points.iter().collect::<Vec<_>>(),
        "catalog": *crate::read(&s.catalog),
    })
}

/// An admin action, as the monitors' ordinary command, run with the
/// user's own session: the monitors decide whether they may.
async fn action(s: &Shared, sess: &Session, act: Action) -> Resp {
    let cmd = match target(act) {
        Target::Osd { osd, deep } => return scrub(s, sess, osd, deep).await,
        Target::Mon(cmd) => cmd,
    };
    match sess.monc.command(&cmd).await {
        Ok(out) => json_resp(StatusCode::OK, &json!({ "ok": true, "output": out })),
        Err(e) => {
            let status = match e.code {
                ErrorCode::PermissionDenied => StatusCode::FORBIDDEN,
                ErrorCode::NotFound => StatusCode::NOT_FOUND,
                ErrorCode::InvalidArgument | ErrorCode::Exists => StatusCode::BAD_REQUEST,
                _ => StatusCode::SERVICE_UNAVAILABLE,
            };
            error(status, e.message)
        }
    }
}

/// A scrub of an OSD's PGs, sent to the OSDs as the user.
async fn scrub(s: &Shared, sess: &Session, osd: i32, deep: bool) -> Resp {
    let Some(hook) = &s.hooks.scrub else {
        return error(
            StatusCode::NOT_IMPLEMENTED,
            "this manager cannot reach the OSDs",
        );
    };
    let Ok(name) = sess.entity.parse::<EntityName>() else {
        return error(StatusCode::INTERNAL_SERVER_ERROR, "bad session entity");
    };
    match hook(name, sess.key.clone(), osd, deep).await {
        Ok(out) => json_resp(StatusCode::ACCEPTED, &json!({ "ok": true, "output": out })),
        Err(r) if r.denied => error(StatusCode::FORBIDDEN, r.message),
        Err(r) => error(StatusCode::SERVICE_UNAVAILABLE, r.message),
    }
}

/// Where an action goes: most are a monitor command; scrubs go to the
/// OSD itself.
#[derive(Debug, PartialEq)]
enum Target {
    Mon(Command),
    Osd { osd: i32, deep: bool },
}

fn target(act: Action) -> Target {
    Target::Mon(match act {
        Action::OsdScrub { osd } => return Target::Osd { osd, deep: false },
        Action::OsdDeepScrub { osd } => return Target::Osd { osd, deep: true },
        Action::OsdOut { osd } => Command::OsdOut { ids: vec![osd] },
        Action::OsdIn { osd } => Command::OsdIn { ids: vec![osd] },
        Action::PoolCreate { pool, pg_num, size } => Command::PoolCreate {
            name: pool,
            pg_num,
            spec: PoolSpec::Replicated {
                size,
                min_size: size.div_ceil(2).max(1),
            },
            set: Vec::new(),
        },
        Action::PoolSet { pool, key, value } => Command::PoolSet {
            name: pool,
            key,
            value,
        },
        Action::FlagSet { flag } => Command::OsdFlag { flag, on: true },
        Action::FlagUnset { flag } => Command::OsdFlag { flag, on: false },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(body: &str) -> Result<Target, String> {
        serde_json::from_str::<Action>(body)
            .map(target)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn actions_decode_into_their_commands() {
        assert_eq!(
            parse(r#"{"action": "osd-out", "osd": 3}"#),
            Ok(Target::Mon(Command::OsdOut { ids: vec![3] }))
        );
        assert_eq!(
            parse(r#"{"action": "osd-deep-scrub", "osd": 1}"#),
            Ok(Target::Osd { osd: 1, deep: true })
        );
        assert_eq!(
            parse(r#"{"action": "pool-create", "pool": "p", "size": 2}"#),
            Ok(Target::Mon(Command::PoolCreate {
                name: "p".into(),
                pg_num: 32,
                spec: PoolSpec::Replicated {
                    size: 2,
                    min_size: 1
                },
                set: Vec::new(),
            }))
        );
        assert_eq!(
            parse(r#"{"action": "flag-unset", "flag": "noout"}"#),
            Ok(Target::Mon(Command::OsdFlag {
                flag: "noout".into(),
                on: false
            }))
        );
    }

    #[test]
    fn a_bad_action_says_what_is_wrong() {
        let missing = parse(r#"{"action": "osd-in"}"#).unwrap_err();
        assert!(missing.contains("missing field `osd`"), "{missing}");
        let unknown = parse(r#"{"action": "osd-purge", "osd": 1}"#).unwrap_err();
        assert!(unknown.contains("unknown variant `osd-purge`"), "{unknown}");
        let big =
            parse(r#"{"action": "pool-create", "pool": "p", "pg_num": 5000000000}"#).unwrap_err();
        assert!(big.contains("invalid value"), "{big}");
        let osd = parse(r#"{"action": "osd-out", "osd": "zero"}"#).unwrap_err();
        assert!(osd.contains("invalid type"), "{osd}");
        assert!(
            parse(r#"{"osd": 1}"#)
                .unwrap_err()
                .contains("missing field `action`")
        );
    }
}
