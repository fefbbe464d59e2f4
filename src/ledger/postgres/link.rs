//! The connection to a ledger server, driven by a runtime of its own so that no call can hang
//! mara (docs/commands.md, "A server that stops answering"): connecting is bounded by
//! `CONNECT_LIMIT`, every statement by `Driver::limit` (a third of the lease, from 2 to 10 s),
//! and a new interruption (Ctrl-C, SIGTERM, SIGHUP: `Escalation`) abandons the call at once. The
//! server is told the same bounds (`statement_timeout`, `lock_timeout`, and
//! `idle_in_transaction_session_timeout`, so that a client stopped mid-transaction does not hold
//! a stack's advisory lock), but only the client's own bound holds when the server itself is
//! stopped. A call abandoned leaves its connection unusable: it is dropped, and the next call
//! connects again.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_postgres::Client;

use crate::error::Error;

/// How long connecting (the TCP connection, TLS and PostgreSQL's startup) may take.
pub const CONNECT_LIMIT: Duration = Duration::from_secs(10);

/// How far an interruption of the process has gone, asked by a call that waits (a number that
/// only grows: `run::interrupt::Interrupt::level`). A call abandons its wait when it grows.
#[derive(Clone)]
pub struct Escalation(Arc<dyn Fn() -> u8 + Send + Sync>);

impl Escalation {
    pub fn new(level: impl Fn() -> u8 + Send + Sync + 'static) -> Escalation {
        Escalation(Arc::new(level))
    }

    fn level(&self) -> u8 {
        (self.0)()
    }
}

/// Why a call failed: the server (or the connection to it) said so, it did not answer in time,
/// the process was interrupted, or mara could not put a value into it or read one out.
pub enum Failure {
    Db(tokio_postgres::Error),
    Stalled(Duration),
    Interrupted,
    Mara(Error),
}

/// The runtime every call is driven on, and its bounds.
pub struct Driver {
    /// `Some` until dropped (`shutdown_background`: a runtime may not be dropped where a task
    /// of another is running).
    runtime: Option<tokio::runtime::Runtime>,
    escalation: Option<Escalation>,
    /// How long one statement may take.
    pub limit: Duration,
}

impl Driver {
    pub fn new(escalation: Option<Escalation>, lease: Duration) -> std::io::Result<Driver> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        Ok(Driver {
            runtime: Some(runtime),
            escalation,
            limit: statement_limit(lease),
        })
    }

    fn runtime(&self) -> &tokio::runtime::Runtime {
        self.runtime
            .as_ref()
            .expect("the runtime lives as long as its driver")
    }

    /// `work`, bounded by `limit` and abandoned when the interruption escalates.
    pub fn call<T, E>(
        &self,
        limit: Duration,
        work: impl Future<Output = Result<T, E>>,
    ) -> Result<T, Failure>
    where
        Failure: From<E>,
    {
        let before = self.escalation.as_ref().map_or(0, Escalation::level);
        self.call_since(before, limit, work)
    }

    /// `work`, bounded by `limit` and abandoned when the interruption has gone past `before`
    /// (the level its caller saw: an escalation between that look and this call counts too).
    fn call_since<T, E>(
        &self,
        before: u8,
        limit: Duration,
        work: impl Future<Output = Result<T, E>>,
    ) -> Result<T, Failure>
    where
        Failure: From<E>,
    {
        let escalation = self.escalation.clone();
        let escalated = async move {
            match escalation {
                Some(escalation) => loop {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    if escalation.level() > before {
                        return;
                    }
                },
                None => std::future::pending().await,
            }
        };
        self.runtime().block_on(async {
            tokio::select! {
                done = tokio::time::timeout(limit, work) => match done {
                    Ok(result) => result.map_err(Failure::from),
                    Err(_) => Err(Failure::Stalled(limit)),
                },
                () = escalated => Err(Failure::Interrupted),
            }
        })
    }

    /// A connection to the server `config` names, made within `CONNECT_LIMIT` — not once the
    /// process is interrupted: a run that is ending does not wait to connect again (what it
    /// could not write is kept, `ledger::journal`).
    pub fn connect(&self, config: &tokio_postgres::Config) -> Result<Link, Failure> {
        // Looked at once: an interruption that comes while the connection is being made (its
        // TLS roots read from the system can take a while) abandons it too.
        let before = self.escalation.as_ref().map_or(0, Escalation::level);
        if before > 0 {
            return Err(Failure::Interrupted);
        }
        let mut config = config.clone();
        bound_the_server(&mut config, self.limit);
        let (client, task) = match crate::workspace::ledger_url::only_sockets(&config) {
            true => {
                // libpq ignores `sslmode` on a socket; so does mara.
                config.ssl_mode(tokio_postgres::config::SslMode::Disable);
                let (client, connection) =
                    self.call_since(before, CONNECT_LIMIT, config.connect(tokio_postgres::NoTls))?;
                (client, self.runtime().spawn(drive(connection)))
            }
            false => {
                let (client, connection) =
                    self.call_since(before, CONNECT_LIMIT, config.connect(tls()))?;
                (client, self.runtime().spawn(drive(connection)))
            }
        };
        Ok(Link { client, task })
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl From<tokio_postgres::Error> for Failure {
    fn from(error: tokio_postgres::Error) -> Self {
        Failure::Db(error)
    }
}

/// One connection: its client, and the task that drives it on the driver's runtime (stopped
/// with it).
pub struct Link {
    pub client: Client,
    task: JoinHandle<()>,
}

impl Drop for Link {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn drive<C: Future<Output = Result<(), tokio_postgres::Error>>>(connection: C) {
    let _ = connection.await;
}

/// A statement's bound: a third of the lease (so that a renewal that cannot be made is known in
/// time to try again), from 2 to 10 seconds.
pub fn statement_limit(lease: Duration) -> Duration {
    (lease / 3).clamp(Duration::from_secs(2), Duration::from_secs(10))
}

/// The server bounds its own waits as the client does (`-c` options, after any the URL gives).
fn bound_the_server(config: &mut tokio_postgres::Config, limit: Duration) {
    let ms = limit.as_millis();
    let ours = format!(
        "-c statement_timeout={ms} -c lock_timeout={ms} -c idle_in_transaction_session_timeout={}",
        ms * 3
    );
    let options = match config.get_options() {
        Some(given) if !given.trim().is_empty() => format!("{given} {ours}"),
        _ => ours,
    };
    config.options(options);
}

/// The TLS connector: rustls with the system's root certificates.
fn tls() -> tokio_postgres_rustls::MakeRustlsConnect {
    let mut roots = rustls::RootCertStore::empty();
    let found = rustls_native_certs::load_native_certs();
    for certificate in found.certs {
        // A certificate the store cannot take is skipped, as every TLS client does.
        let _ = roots.add(certificate);
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("ring supports TLS 1.2 and 1.3")
        .with_root_certificates(roots)
        .with_no_client_auth();
    tokio_postgres_rustls::MakeRustlsConnect::new(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_statement_is_bounded_by_a_third_of_the_lease_within_two_to_ten_seconds() {
        assert_eq!(
            statement_limit(Duration::from_secs(6)),
            Duration::from_secs(2)
        );
        assert_eq!(
            statement_limit(Duration::from_secs(15)),
            Duration::from_secs(5)
        );
        assert_eq!(
            statement_limit(Duration::from_secs(60)),
            Duration::from_secs(10)
        );
    }

    #[test]
    fn a_call_that_does_not_end_is_bounded_and_an_escalation_abandons_it() {
        let driver = Driver::new(None, Duration::from_secs(6)).unwrap();
        let started = std::time::Instant::now();
        let hung = std::future::pending::<Result<(), tokio_postgres::Error>>();
        let result = driver.call(Duration::from_millis(200), hung);
        assert!(matches!(result, Err(Failure::Stalled(_))));
        assert!(started.elapsed() < Duration::from_secs(2));

        let level = Arc::new(std::sync::atomic::AtomicU8::new(1));
        let seen = level.clone();
        let escalation = Escalation::new(move || seen.load(std::sync::atomic::Ordering::SeqCst));
        let driver = Driver::new(Some(escalation), Duration::from_secs(6)).unwrap();
        let raise = level.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            raise.store(2, std::sync::atomic::Ordering::SeqCst);
        });
        let started = std::time::Instant::now();
        let hung = std::future::pending::<Result<(), tokio_postgres::Error>>();
        let result = driver.call(Duration::from_secs(30), hung);
        assert!(matches!(result, Err(Failure::Interrupted)));
        assert!(started.elapsed() < Duration::from_secs(5));
        // Interrupted before the call (a run closing its record after a first Ctrl-C): the call
        // still goes on, until the next escalation.
        let done = driver.call(Duration::from_secs(1), async {
            Ok::<_, tokio_postgres::Error>(7)
        });
        assert!(matches!(done, Ok(7)));
    }
}
