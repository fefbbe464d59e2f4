//! `mara serve` (docs/commands.md, "serve"): the ledger's runs, locks and logs on a web page and
//! as JSON, a running run's page kept current through a stream of its events, and two actions
//! (cancel a run, clear a stack's lock) only for a caller with an operator's token. `run` checks
//! where it may listen and that a token guards an address beyond loopback, then serves until
//! Ctrl-C or SIGTERM; `tokens` is `mara serve token add|list|revoke`.
//!
//! `source` reads the ledger, the logs and the graphs; `views` shapes what they hold for the
//! pages (`pages`, `svg`) and the JSON (`routes`; `projects`, a project across its runs);
//! `events` streams a running run; `auth` says
//! who a request's token names; `actions` are the two writes, each recorded with who asked. The
//! server writes nothing else but a token's last use.

mod actions;
mod auth;
mod events;
mod layout;
mod listener;
mod pages;
mod poller;
mod projects;
mod routes;
mod source;
mod svg;
pub mod tokens;
mod views;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tokio::sync::watch;

use crate::error::{Error, Problem, Result};
use crate::settings::Settings;

use source::Source;

/// The measure of a drawn graph's edge crossings, for the browser test (docs/testing.md).
pub use svg::crossings;

use crate::configure::SERVE_TOKEN_VARIABLE as TOKEN;

pub fn run(settings: &Settings, listen: &str, allow_hosts: Vec<String>) -> Result<()> {
    let address = address(listen)?;
    let token = crate::configure::serve_token(&settings.env);
    let guarded = !is_loopback(&address);
    let (workspace, place) = crate::deployment::ledger_workspace(settings)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(Error::Runtime)?;
    runtime.block_on(async move {
        // The ledger is reached once before anything is served: a server that cannot be
        // reached, or refuses mara, is said now (exit 3), not on every page.
        let source = Source::start(workspace, place);
        let named = (source.read(|ledger| Ok(ledger.tokens()?.len())).await?).unwrap_or(0);
        let tokens = named + usize::from(token.is_some());
        if guarded && tokens == 0 {
            return Err(beyond_loopback_without_token(address));
        }
        let listener = tokio::net::TcpListener::bind(address).await.map_err(|e| {
            Error::Problems(vec![
                Problem::new(format!("cannot listen on {address}: {e}"))
                    .hint("another port: `--listen 127.0.0.1:PORT` (port 0: any free one)"),
            ])
        })?;
        let bound = listener.local_addr().map_err(Error::Runtime)?;
        let actions = match (guarded, tokens) {
            (true, _) => "reading needs a token, a viewer's or an operator's; cancel and unlock an operator's",
            (false, 0) => "read-only: `mara serve token add NAME --role operator` turns on cancel and unlock",
            (false, _) => "cancel and unlock need an operator's token",
        };
        match settings.output {
            // For a script that asked for any free port: where, as one JSON line on stdout.
            crate::settings::OutputFormat::Json => {
                let line = serde_json::json!({"url": format!("http://{bound}/"),
                    "ledger": source.place, "actions": tokens > 0, "reading_needs_token": guarded});
                // Whoever asked may have gone: the server still serves.
                let _ = crate::ui::print(&format!("{line}\n"));
            }
            crate::settings::OutputFormat::Human => crate::ui::errln!(
                "Serving the run ledger {} on http://{bound}/ ({actions}). Ctrl-C stops.",
                source.place
            ),
        }
        if guarded && let Some(short) = token.as_ref().filter(|t| t.chars().count() < 16) {
            crate::ui::errln!(
                "warning: {TOKEN} is {} characters long, and guards an address others reach: a named token (`mara serve token add NAME --role operator`) is 32 random bytes",
                short.chars().count()
            );
        }
        let (stopping, stopped) = tokio::sync::watch::channel(false);
        let mut hosts = allow_hosts;
        hosts.push(crate::ledger::whoami().1);
        let router = router(App {
            source,
            token,
            guarded,
            hosts,
            stopping: stopped,
            pollers: poller::Pollers::default(),
        });
        serve(listener, router, stopping, stop_signal())
            .await
            .map_err(Error::Runtime)
    })
}

/// The refusal of an address beyond loopback while no token would guard it.
fn beyond_loopback_without_token(address: SocketAddr) -> Error {
    Error::usage(
        Problem::new(format!(
            "refusing to serve on {address} with no token: it is not a loopback address, so other \
             machines could reach the page"
        ))
        .hint(format!(
            "make one (`mara serve token add NAME --role viewer|operator`: reading there needs a \
             token too), or set {TOKEN} (an operator's), or listen on 127.0.0.1"
        )),
    )
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
                .hint("such as 127.0.0.1:7300, [::1]:7300, or 0.0.0.0:7300 (with a token)"),
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
    crate::ui::errln!("Stopped.");
}

/// What every request is served with.
struct App {
    source: Source,
    /// `MARA_SERVE_TOKEN`: an operator's token besides the ledger's named ones (`auth`).
    token: Option<String>,
    /// Listening beyond loopback: reading needs a token too.
    guarded: bool,
    /// The host names requests may name besides `localhost` and IP addresses (`guard`): this
    /// machine's, and those given with `--allow-host`.
    hosts: Vec<String>,
    /// Becomes `true` when the server stops: the streams of running runs end.
    stopping: watch::Receiver<bool>,
    /// The running runs being watched, one reader each (`poller`).
    pollers: poller::Pollers,
}

type Shared = Arc<App>;

/// The routes, each response with the headers `guard` adds.
fn router(app: App) -> Router {
    let app: Shared = Arc::new(app);
    Router::new()
        .route("/", get(routes::index))
        .route("/runs/{id}", get(routes::run_page))
        .route("/runs/{id}/log", get(routes::log_page))
        .route("/stacks", get(routes::stacks_page))
        .route("/projects/{*path}", get(projects::project_page))
        .route("/api/projects/{*path}", get(projects::project_json))
        .route("/api/runs", get(routes::runs_json))
        .route("/api/runs/{id}", get(routes::run_json))
        .route("/api/runs/{id}/log", get(routes::log_json))
        .route("/api/runs/{id}/events", get(events::stream))
        .route("/api/runs/{id}/cancel", post(actions::cancel))
        .route("/api/stacks", get(routes::stacks_json))
        .route("/api/stacks/{name}/unlock", post(actions::unlock))
        .route("/assets/{file}", get(asset))
        .fallback(routes::not_found)
        .layer(middleware::from_fn_with_state(app.clone(), guard))
        .with_state(app)
}

/// Serves `listener` until `stop` resolves; then the running runs' streams end, and requests
/// still open get a few seconds to finish.
async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    stopping: watch::Sender<bool>,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let server = listener::accept(listener, router, listener::limit(), stopping.subscribe());
    let server = tokio::spawn(server);
    stop.await;
    let _ = stopping.send(true);
    // A request still open after that is dropped with the process.
    let _ = tokio::time::timeout(Duration::from_secs(5), server).await;
    Ok(())
}

/// Whether `address` is one only this machine can reach.
fn is_loopback(address: &SocketAddr) -> bool {
    match address.ip() {
        IpAddr::V4(ip) => ip.is_loopback(),
        IpAddr::V6(ip) => {
            ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

/// The content security policy of every response: the page's own script and stylesheet, nothing
/// inline, nothing from another origin, no frame.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
    connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

/// Refuses a request that names a host other than this machine's (a page of another site whose
/// name was pointed at this server could read the ledger through its visitors' browsers
/// otherwise); says every failure as the rest of its kind (JSON under `/api/`, a page elsewhere:
/// `uniform`); adds the security headers to every response.
async fn guard(State(app): State<Shared>, request: Request, next: Next) -> Response {
    let path = request.uri().path().to_string();
    let response = match names_this_server(request.headers(), &app.hosts) {
        false => routes::Failure::new(
            StatusCode::MISDIRECTED_REQUEST,
            "This server answers requests for localhost, an IP address, this machine's name, \
             and the names given with --allow-host.",
        )
        .into_response(),
        // The stylesheet, the script and the icon are the page that asks for the token.
        true if app.guarded && !path.starts_with("/assets/") => {
            match reader_refused(&app, &path, request.headers()).await {
                Some(refused) => refused,
                None => next.run(request).await,
            }
        }
        true => next.run(request).await,
    };
    let mut response = uniform(&path, response).await;
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_SECURITY_POLICY, POLICY),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::CACHE_CONTROL, "no-store"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

/// Whether this server has actions: `MARA_SERVE_TOKEN`, or a named token in the ledger (the
/// pages show the buttons then).
async fn actions_on(app: &Shared) -> bool {
    if app.token.is_some() {
        return true;
    }
    let any = app.source.read(|ledger| Ok(!ledger.tokens()?.is_empty()));
    matches!(any.await, Ok(Some(true)))
}

/// On an address beyond loopback, the refusal of a request without a token of this server's
/// (any role reads): 401, as JSON under `/api/`, elsewhere a page that asks for the token.
async fn reader_refused(app: &Shared, path: &str, headers: &HeaderMap) -> Option<Response> {
    let message = match auth::identify(app, headers).await {
        Ok((auth::Presented::Known(_), _)) => return None,
        Ok((auth::Presented::Wrong, _)) => auth::WRONG,
        Ok((auth::Presented::Nothing, _)) => {
            "This server needs a token to read: a viewer's is enough (`Authorization: Bearer TOKEN`)."
        }
        Err(error) => return Some(routes::Failure::from(error).into_response()),
    };
    let response = match path.starts_with("/api/") {
        true => auth::unauthorized(message).into_response(),
        false => (StatusCode::UNAUTHORIZED, pages::token_needed(message)).into_response(),
    };
    Some(auth::challenge(response))
}

/// A failure that axum said in its own way (a path that is not UTF-8, a method the address does
/// not take) said as mara's are: `{"error": …}` under `/api/`, a page elsewhere.
async fn uniform(path: &str, response: Response) -> Response {
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let api = path.starts_with("/api/");
    let kind = (response.headers().get(header::CONTENT_TYPE))
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if kind.starts_with(if api { "application/json" } else { "text/html" }) {
        return response;
    }
    let body = axum::body::to_bytes(response.into_body(), 64 * 1024).await;
    let said = String::from_utf8_lossy(&body.unwrap_or_default())
        .trim()
        .to_string();
    let message = match (said.is_empty(), status) {
        (true, StatusCode::METHOD_NOT_ALLOWED) => {
            "This address does not take that method.".to_string()
        }
        (true, _) => format!("{}.", status.canonical_reason().unwrap_or("Error")),
        (false, _) => said,
    };
    let failure = routes::Failure::new(status, message);
    match api {
        true => failure.into_response(),
        false => failure.page(),
    }
}

/// Whether the request names one host (HTTP/1.1 requires one), and it is `localhost`, an IP
/// address, or one of `hosts` (this machine's name and those given with `--allow-host`), with
/// or without a port.
fn names_this_server(headers: &HeaderMap, hosts: &[String]) -> bool {
    let mut all = headers.get_all(header::HOST).iter();
    let (Some(host), None) = (all.next(), all.next()) else {
        return false;
    };
    let Ok(host) = host.to_str() else {
        return false;
    };
    let name = match host.strip_prefix('[') {
        Some(rest) => {
            return rest
                .split(']')
                .next()
                .is_some_and(|ip| ip.parse::<IpAddr>().is_ok());
        }
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    name.eq_ignore_ascii_case("localhost")
        || name.parse::<IpAddr>().is_ok()
        || hosts.iter().any(|h| h.eq_ignore_ascii_case(name))
}

/// The stylesheet, the script and the icon, from the binary: the pages work offline.
async fn asset(axum::extract::Path(file): axum::extract::Path<String>) -> Response {
    let (body, kind) = match file.as_str() {
        "serve.css" => (include_str!("assets/serve.css"), "text/css; charset=utf-8"),
        "serve.js" => (
            include_str!("assets/serve.js"),
            "text/javascript; charset=utf-8",
        ),
        "icon.svg" => (include_str!("assets/icon.svg"), "image/svg+xml"),
        _ => return routes::missing(&format!("/assets/{file}")),
    };
    ([(header::CONTENT_TYPE, kind)], body).into_response()
}
