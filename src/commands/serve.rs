//! `mara serve` (docs/commands.md, "serve"): checks where it may listen, then serves the
//! workspace's ledger (`crate::serve`) until Ctrl-C or SIGTERM.

use std::net::SocketAddr;

use crate::error::{Error, Problem, Result};
use crate::serve::{self, App, Source};
use crate::settings::Settings;

/// The variable whose value the two actions need.
const TOKEN: &str = "MARA_SERVE_TOKEN";

pub fn run(settings: &Settings, listen: &str) -> Result<()> {
    let address = address(listen)?;
    let token = (settings.env.get(TOKEN).map(|t| t.trim().to_string())).filter(|t| !t.is_empty());
    let loopback = serve::is_loopback(&address);
    if !loopback && token.is_none() {
        return Err(Error::usage(
            Problem::new(format!(
                "refusing to serve on {address} without {TOKEN}: it is not a loopback address, \
                 so other machines could reach the page"
            ))
            .hint(format!(
                "set {TOKEN} (cancel and unlock then need it), or listen on 127.0.0.1"
            )),
        ));
    }
    let workspace = crate::deployment::discover(settings)?;
    let place = crate::ledger::place(&workspace, &settings.env)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(Error::Runtime)?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(address)
            .await
            .map_err(|e| Error::usage(Problem::new(format!("cannot listen on {address}: {e}"))))?;
        let bound = listener.local_addr().map_err(Error::Runtime)?;
        let source = Source::start(workspace, place);
        let actions = match &token {
            Some(_) => "cancel and unlock need the token in MARA_SERVE_TOKEN",
            None => "read-only: set MARA_SERVE_TOKEN to cancel and unlock from the page",
        };
        eprintln!(
            "Serving the run ledger {} on http://{bound}/ ({actions}). Ctrl-C stops.",
            source.place
        );
        let (stopping, stopped) = tokio::sync::watch::channel(false);
        let router = serve::router(App {
            source,
            token,
            loopback,
            stopping: stopped,
        });
        serve::serve(listener, router, stopping, stop_signal())
            .await
            .map_err(Error::Runtime)
    })
}

/// `--listen`: an address with its port.
fn address(listen: &str) -> Result<SocketAddr> {
    let resolved = match listen.split_once(':') {
        Some(("localhost", port)) => format!("127.0.0.1:{port}"),
        _ => listen.to_string(),
    };
    resolved.parse().map_err(|_| {
        Error::usage(
            Problem::new(format!("--listen `{listen}` is not an address with a port"))
                .hint("such as 127.0.0.1:7300, [::1]:7300, or 0.0.0.0:7300 with MARA_SERVE_TOKEN"),
        )
    })
}

/// Ctrl-C or SIGTERM.
async fn stop_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).ok();
    let terminated = async {
        match term.as_mut() {
            Some(term) => {
                term.recv().await;
            }
            None => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminated => {}
    }
    eprintln!("Stopped.");
}
