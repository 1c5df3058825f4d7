//! `shoal gateway`: the S3 gateway daemon (on 127.0.0.1:7480 unless told
//! otherwise), and `shoal gateway user ...`, its users and keys (printed
//! as JSON, as `radosgw-admin` does). Everything lives in one replicated
//! pool (`--pool`, `.shoal.gateway` by default), which must exist.

use std::net::SocketAddr;

use anyhow::Context;
use clap::{Args, Subcommand};
use shoal_gateway::{Meta, MetaError};

use super::common::Ctx;

/// The gateway's pool unless told otherwise.
pub const DEFAULT_POOL: &str = ".shoal.gateway";

/// `shoal gateway`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct GatewayArgs {
    #[command(subcommand)]
    cmd: Option<GatewayCmd>,
    /// Listen here (loopback unless told otherwise).
    #[arg(long, default_value = "127.0.0.1:7480")]
    bind: SocketAddr,
    /// The pool holding users, buckets, indexes and data.
    #[arg(long, default_value = DEFAULT_POOL)]
    pool: String,
    /// Once listening, write `{"pid", "addr"}` here (removed on exit).
    #[arg(long)]
    state_file: Option<std::path::PathBuf>,
    /// Serve HTTPS with this certificate chain (PEM).
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<std::path::PathBuf>,
    /// The certificate's private key (PEM).
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<std::path::PathBuf>,
    #[command(flatten)]
    sweep: SweepArgs,
    /// Sweep (see `shoal gateway sweep`) at start and this often.
    #[arg(long, default_value_t = 3600)]
    sweep_every_secs: u64,
}

/// What a sweep removes.
#[derive(Debug, Clone, Copy, Args)]
struct SweepArgs {
    /// Stripes of writes that died midway, once recorded this long ago.
    #[arg(long, default_value_t = 3600)]
    stale_write_secs: u64,
    /// Multipart uploads begun this long ago, with their parts.
    #[arg(long, default_value_t = 7 * 24 * 3600)]
    upload_expiry_secs: u64,
}

#[derive(Debug, Subcommand)]
enum GatewayCmd {
    /// Gateway users and their keys.
    #[command(subcommand)]
    User(UserCmd),
    /// Removes what writes that died midway left and abandoned multipart
    /// uploads, once; prints what it removed.
    Sweep {
        /// The gateway's pool.
        #[arg(long, default_value = DEFAULT_POOL)]
        pool: String,
        #[command(flatten)]
        sweep: SweepArgs,
    },
}

#[derive(Debug, Subcommand)]
enum UserCmd {
    /// Creates a user with one key pair (printed).
    Create {
        /// The user's id.
        #[arg(long)]
        uid: String,
        /// The name shown as its buckets' owner (the uid by default).
        #[arg(long)]
        display_name: Option<String>,
        /// Its e-mail address, which ACL grants may name (none by default).
        #[arg(long, default_value = "")]
        email: String,
        /// The gateway's pool.
        #[arg(long, default_value = DEFAULT_POOL)]
        pool: String,
    },
    /// Lists the users' ids.
    Ls {
        /// The gateway's pool.
        #[arg(long, default_value = DEFAULT_POOL)]
        pool: String,
    },
    /// Shows a user and its keys.
    Info {
        /// The user's id.
        #[arg(long)]
        uid: String,
        /// The gateway's pool.
        #[arg(long, default_value = DEFAULT_POOL)]
        pool: String,
    },
    /// Removes a user (refused while it owns buckets).
    Rm {
        /// The user's id.
        #[arg(long)]
        uid: String,
        /// The gateway's pool.
        #[arg(long, default_value = DEFAULT_POOL)]
        pool: String,
    },
    /// A user's keys.
    #[command(subcommand)]
    Key(KeyCmd),
}

#[derive(Debug, Subcommand)]
enum KeyCmd {
    /// Adds a key pair to a user.
    Create {
        /// The user's id.
        #[arg(long)]
        uid: String,
        /// The gateway's pool.
        #[arg(long, default_value = DEFAULT_POOL)]
        pool: String,
    },
    /// Removes a key from a user.
    Rm {
        /// The user's id.
        #[arg(long)]
        uid: String,
        /// The access key.
        #[arg(long)]
        access_key: String,
        /// The gateway's pool.
        #[arg(long, default_value = DEFAULT_POOL)]
        pool: String,
    },
}

async fn meta_of(client: &shoal_client::Client, pool: &str) -> anyhow::Result<Meta> {
    Ok(Meta::new(pool_of(client, pool).await?))
}

async fn pool_of(client: &shoal_client::Client, pool: &str) -> anyhow::Result<shoal_client::Pool> {
    client.pool_latest(pool).await.with_context(|| {
        format!("the gateway's pool {pool} (create it: shoal osd pool create {pool} 8)")
    })
}

fn print(v: serde_json::Value) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = super::out::Stdout::new();
    writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
    out.flush()?;
    Ok(())
}

fn clear(e: MetaError) -> anyhow::Error {
    anyhow::anyhow!("{e}")
}

/// Runs `shoal gateway`.
pub fn run(a: GatewayArgs, ctx: &Ctx) -> anyhow::Result<()> {
    match a.cmd {
        Some(GatewayCmd::User(u)) => users(u, ctx),
        Some(GatewayCmd::Sweep { pool, sweep }) => {
            super::common::with_data_client(ctx, |client| async move {
                let m = meta_of(&client, &pool).await?;
                let (runs, uploads) = m
                    .sweep(
                        sweep.stale_write_secs * 1000,
                        sweep.upload_expiry_secs * 1000,
                    )
                    .await
                    .map_err(clear)?;
                print(serde_json::json!({"writes_removed": runs, "uploads_aborted": uploads}))
            })
        }
        None => {
            let tls = match (&a.tls_cert, &a.tls_key) {
                (Some(c), Some(k)) => Some(shoal_nbd::Tls::from_pem_files(c, k, true)?.acceptor()),
                _ => None,
            };
            daemon(
                a.bind,
                a.pool,
                a.state_file,
                tls,
                a.sweep,
                a.sweep_every_secs,
                ctx,
            )
        }
    }
}

fn users(cmd: UserCmd, ctx: &Ctx) -> anyhow::Result<()> {
    super::common::with_data_client(ctx, |client| async move {
        match cmd {
            UserCmd::Create {
                uid,
                display_name,
                email,
                pool,
            } => {
                let m = meta_of(&client, &pool).await?;
                let name = display_name.unwrap_or_else(|| uid.clone());
                print(serde_json::to_value(
                    m.user_create(&uid, &name, &email).await.map_err(clear)?,
                )?)
            }
            UserCmd::Ls { pool } => {
                let m = meta_of(&client, &pool).await?;
                let ids: Vec<String> = m
                    .users()
                    .await
                    .map_err(clear)?
                    .into_iter()
                    .map(|u| u.uid)
                    .collect();
                print(serde_json::to_value(ids)?)
            }
            UserCmd::Info { uid, pool } => {
                let m = meta_of(&client, &pool).await?;
                match m.user(&uid).await.map_err(clear)? {
                    Some(u) => print(serde_json::to_value(u)?),
                    None => anyhow::bail!("user {uid} does not exist"),
                }
            }
            UserCmd::Rm { uid, pool } => {
                let m = meta_of(&client, &pool).await?;
                m.user_remove(&uid).await.map_err(clear)
            }
            UserCmd::Key(KeyCmd::Create { uid, pool }) => {
                let m = meta_of(&client, &pool).await?;
                print(serde_json::to_value(
                    m.key_create(&uid).await.map_err(clear)?,
                )?)
            }
            UserCmd::Key(KeyCmd::Rm {
                uid,
                access_key,
                pool,
            }) => {
                let m = meta_of(&client, &pool).await?;
                print(serde_json::to_value(
                    m.key_remove(&uid, &access_key).await.map_err(clear)?,
                )?)
            }
        }
    })
}

fn daemon(
    bind: SocketAddr,
    pool: String,
    state_file: Option<std::path::PathBuf>,
    tls: Option<tokio_rustls::TlsAcceptor>,
    sweep: SweepArgs,
    sweep_every_secs: u64,
    ctx: &Ctx,
) -> anyhow::Result<()> {
    super::common::with_data_client(ctx, |client| async move {
        super::crash::for_front_end(ctx, "gateway");
        // User and bucket records cached, kept coherent by watch/notify.
        let meta = Meta::cached(pool_of(&client, &pool).await?)
            .await
            .with_context(|| format!("watching the gateway's control object in pool {pool}"))?;
        let listener = tokio::net::TcpListener::bind(bind)
            .await
            .with_context(|| format!("listening on {bind}"))?;
        let addr = listener.local_addr()?;
        let scheme = if tls.is_some() { "https" } else { "http" };
        super::common::announce(
            &format!("serving S3 on {scheme}://{addr}/ (pool {pool})"),
            addr,
            state_file.as_deref(),
        )?;
        let sweeper = meta.freeing();
        tokio::spawn(async move {
            let every = std::time::Duration::from_secs(sweep_every_secs.max(1));
            loop {
                let r = sweeper
                    .sweep(
                        sweep.stale_write_secs * 1000,
                        sweep.upload_expiry_secs * 1000,
                    )
                    .await;
                if let Err(e) = r {
                    tracing::warn!("sweep: {e}");
                }
                tokio::time::sleep(every).await;
            }
        });
        let counters = std::sync::Arc::new(shoal_gateway::metrics::Metrics::default());
        let reported = std::sync::Arc::clone(&counters);
        super::common::report_perf(ctx, format!("gateway.{addr}"), "gateway", move || {
            reported.metrics()
        });
        let opts = shoal_gateway::Options {
            region: Some(ctx.config.options.gateway_region.clone()).filter(|r| !r.is_empty()),
            sse_c_over_http: !ctx.config.options.gateway_sse_c_require_tls,
        };
        let serving = tokio::spawn(shoal_gateway::serve_counted(
            listener, meta, tls, counters, opts,
        ));
        tokio::select! {
            r = super::mon::wait_for_signal() => r?,
            r = serving => r.context("the gateway stopped")??,
        }
        if let Some(path) = &state_file {
            let _ = std::fs::remove_file(path);
        }
        Ok(())
    })
}
