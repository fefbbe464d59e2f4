//! How `mara serve` takes connections (docs/commands.md, "serve"; docs/decisions.md, "mara
//! serve stays up"): HTTP/1.1, each connection closed when it sends no request head within
//! `HEAD_TIMEOUT` — a connection that opens and says nothing, or a kept-alive one left idle —,
//! and at most `limit()` connections at once. The ones past it are not accepted: they wait in
//! the kernel's queue, holding no file of the server's, until a connection closes; so idle
//! connections can neither exhaust the server's files nor keep a real request out for longer
//! than the timeout. A running run's stream is a response, not a head: it stays open.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::sync::{Semaphore, watch};

/// How long a connection may take to send a request's head, from when it opened or its last
/// response ended.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);

/// How many connections are served at once: half the files the process may open (the ledger,
/// its logs and the engines' pipes need the rest), at most 1024.
pub fn limit() -> usize {
    let mut files = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: one valid rlimit to fill.
    let known = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut files) } == 0;
    let soft = if known { files.rlim_cur as usize } else { 256 };
    (soft / 2).clamp(16, 1024)
}

/// Serves `listener` with `router` until `stop` becomes true; then each connection finishes
/// the request it is answering and closes (a running run's stream ends with the server's
/// `stopping`).
pub async fn accept(
    listener: tokio::net::TcpListener,
    router: Router,
    limit: usize,
    mut stop: watch::Receiver<bool>,
) {
    let open = Arc::new(Semaphore::new(limit));
    loop {
        let permit = tokio::select! {
            permit = open.clone().acquire_owned() => permit,
            () = stopped(&mut stop) => return,
        };
        let Ok(permit) = permit else {
            return;
        };
        let stream = tokio::select! {
            accepted = listener.accept() => accepted,
            () = stopped(&mut stop) => return,
        };
        let stream = match stream {
            Ok((stream, _)) => stream,
            // Out of files, or a connection reset before it was taken: try again shortly.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let service = TowerToHyperService::new(router.clone());
        let stop = stop.clone();
        tokio::spawn(async move {
            let _held = permit;
            connection(stream, service, stop).await;
        });
    }
}

/// Once the server stops.
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stopping| *stopping).await;
}

/// One connection, served until it closes, times out, or the server stops.
async fn connection(
    stream: tokio::net::TcpStream,
    service: TowerToHyperService<Router>,
    mut stop: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT)
        .keep_alive(true);
    let served = builder.serve_connection(TokioIo::new(stream), service);
    let mut served = std::pin::pin!(served);
    let stopped = tokio::select! {
        _ = served.as_mut() => false,
        () = stopped(&mut stop) => true,
    };
    if stopped {
        served.as_mut().graceful_shutdown();
        let _ = served.await;
    }
}
