//! `shoal nbd serve`: exports block images over NBD (as `rbd-nbd` and
//! `qemu-nbd` do), on 127.0.0.1:10809 unless told otherwise. Clients name
//! an export `POOL/IMAGE` (or `IMAGE` in `-p`'s pool), or
//! `POOL/IMAGE@SNAP` for a snapshot, read-only.

use std::net::SocketAddr;

use anyhow::Context;
use clap::{Args, Subcommand};
use shoal_nbd::{Server, ServerOptions};

use super::common::Ctx;

/// `shoal nbd`.
#[derive(Debug, Args)]
pub struct NbdArgs {
    #[command(subcommand)]
    cmd: NbdCmd,
}

#[derive(Debug, Subcommand)]
enum NbdCmd {
    /// Serve images over NBD until stopped (SIGINT or SIGTERM).
    Serve {
        /// Listen here (loopback unless told otherwise).
        #[arg(long, default_value = "127.0.0.1:10809")]
        bind: SocketAddr,
        /// The pool of exports named without one.
        #[arg(short = 'p', long, default_value = "rbd")]
        pool: String,
        /// Serve only these exports (`POOL/IMAGE[@SNAP]`, repeatable);
        /// any image by default.
        #[arg(long = "export")]
        exports: Vec<String>,
        /// Take each image's exclusive lock when it is opened and keep it
        /// when another client asks for it (images without the
        /// exclusive-lock feature are refused).
        #[arg(long, conflicts_with = "read_only")]
        exclusive: bool,
        /// Serve every export read-only.
        #[arg(long)]
        read_only: bool,
        /// Requests in flight per connection (1 to 65536).
        #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u32).range(1..=65536))]
        max_inflight: u32,
        /// TLS certificate chain (PEM): clients may upgrade with STARTTLS.
        #[arg(long, requires = "tls_key")]
        tls_cert: Option<std::path::PathBuf>,
        /// TLS private key (PEM).
        #[arg(long, requires = "tls_cert")]
        tls_key: Option<std::path::PathBuf>,
        /// Refuse clients that do not upgrade to TLS (the default when
        /// listening off loopback).
        #[arg(long, requires = "tls_cert")]
        tls_required: bool,
        /// Listen off loopback without TLS (anyone on the network may read
        /// and write the images).
        #[arg(long, conflicts_with = "tls_cert")]
        insecure_no_tls: bool,
        /// Runtime threads. One (the default) runs every connection and
        /// the cluster client on one thread: no wake-ups across threads,
        /// 40 % more 4 KiB reads than two on a 2-core machine.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
        threads: u16,
        /// Once listening, write `{"pid", "addr"}` here (removed on exit):
        /// how `shoal rbd device map` learns where its server listens.
        #[arg(long)]
        state_file: Option<std::path::PathBuf>,
    },
}

/// Runs `shoal nbd`.
pub fn run(a: NbdArgs, ctx: &Ctx) -> anyhow::Result<()> {
    let NbdCmd::Serve {
        bind,
        pool,
        exports,
        exclusive,
        read_only,
        max_inflight,
        state_file,
        tls_cert,
        tls_key,
        tls_required,
        insecure_no_tls,
        threads,
    } = a.cmd;
    let off_loopback = !bind.ip().is_loopback();
    if off_loopback && tls_cert.is_none() && !insecure_no_tls {
        anyhow::bail!(
            "{bind} is off loopback: give --tls-cert and --tls-key (clients upgrade with \
             STARTTLS), or --insecure-no-tls to serve in the clear"
        );
    }
    let tls = match (&tls_cert, &tls_key) {
        (Some(c), Some(k)) => Some(shoal_nbd::Tls::from_pem_files(
            c,
            k,
            tls_required || off_loopback,
        )?),
        _ => None,
    };
    super::common::with_data_client_on(ctx, usize::from(threads), |client| async move {
        super::crash::for_front_end(ctx, "nbd");
        let listener = tokio::net::TcpListener::bind(bind)
            .await
            .with_context(|| format!("listening on {bind}"))?;
        let addr = listener.local_addr()?;
        let server = Server::new(
            client.clone(),
            ServerOptions {
                default_pool: pool,
                allowed: (!exports.is_empty()).then_some(exports),
                max_inflight: max_inflight as usize,
                exclusive,
                read_only,
                tls,
            },
        );
        server.open_exports().await.map_err(anyhow::Error::msg)?;
        super::common::announce(
            &format!("serving NBD on nbd://{addr}/ (exports: POOL/IMAGE, POOL/IMAGE@SNAP)"),
            addr,
            state_file.as_deref(),
        )?;
        let counters = std::sync::Arc::clone(&server.metrics);
        super::common::report_perf(ctx, format!("nbd.{addr}"), "nbd", move || {
            counters.metrics()
        });
        let serving = tokio::spawn(std::sync::Arc::clone(&server).serve(listener));
        tokio::select! {
            r = super::mon::wait_for_signal() => r?,
            r = serving => r.context("the server stopped")??,
        }
        server.shutdown().await;
        if let Some(path) = &state_file {
            let _ = std::fs::remove_file(path);
        }
        Ok(())
    })
}
