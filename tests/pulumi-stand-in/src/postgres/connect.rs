//! Opening a connection as lib/pq v1.12.3 does (`conn.go`, `Connector.open`): dial the host
//! (TCP, or the Unix socket of a directory host), negotiate TLS as `sslmode` says (an
//! `SSLRequest`; `pq: SSL is not enabled on the server` when the server answers no), then the
//! startup and authentication, which tokio-postgres speaks over the stream made here. `prefer`
//! falls back to a plain connection when TLS fails; `allow` starts plain and tries TLS when the
//! startup fails. The password is sent as given, empty when there is none (lib/pq does not
//! refuse to authenticate without one: the server does).
//!
//! Errors read as lib/pq's: a server's as `pq: <message> (<SQLSTATE>)`, a dial's as Go's
//! (`dial tcp 127.0.0.1:1: connect: connection refused`).

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_postgres::{Client, NoTls};

use super::conninfo::{ConnInfo, SslMode};
use super::tls;
use crate::store::os_error;

trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

type Boxed = Box<dyn Stream>;

/// The `SSLRequest` message: its length and the code 80877103.
const SSL_REQUEST: [u8; 8] = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];

/// A connected client, its connection driven by the current runtime.
pub async fn connect(info: &ConnInfo) -> Result<Client, String> {
    match info.connect_timeout {
        Some(limit) => tokio::time::timeout(limit, open(info))
            .await
            .unwrap_or_else(|_| Err(format!("dial {}: i/o timeout", address(info)))),
        None => open(info).await,
    }
}

async fn open(info: &ConnInfo) -> Result<Client, String> {
    let mut mode = info.sslmode;
    loop {
        let stream = dial(info).await?;
        if let Some(refused) = &info.refused {
            return Err(refused.clone());
        }
        let stream = match negotiate(stream, info, mode).await {
            Ok(stream) => stream,
            Err(_) if mode == SslMode::Prefer => {
                mode = SslMode::Disable;
                continue;
            }
            Err(e) => return Err(e),
        };
        match startup(stream, info).await {
            Err(_) if mode == SslMode::Allow => mode = SslMode::Require,
            result => return result,
        }
    }
}

/// `tcp host:port` or `unix <socket>`, as Go names what it dials.
fn address(info: &ConnInfo) -> String {
    match info.unix_socket() {
        Some(socket) => format!("unix {socket}"),
        None if info.host.contains(':') => format!("tcp [{}]:{}", info.host, info.port),
        None => format!("tcp {}:{}", info.host, info.port),
    }
}

async fn dial(info: &ConnInfo) -> Result<Boxed, String> {
    if let Some(socket) = info.unix_socket() {
        let stream = tokio::net::UnixStream::connect(&socket)
            .await
            .map_err(|e| format!("dial unix {socket}: connect: {}", os_error(&e)))?;
        return Ok(Box::new(stream));
    }
    let host = if info.host.is_empty() {
        "localhost"
    } else {
        &info.host
    };
    let addresses: Vec<std::net::SocketAddr> = tokio::net::lookup_host((host, info.port))
        .await
        .map_err(|_| format!("dial tcp: lookup {host}: no such host"))?
        .collect();
    let mut first_error = None;
    for address in &addresses {
        match tokio::net::TcpStream::connect(address).await {
            Ok(stream) => {
                let _ = stream.set_nodelay(true);
                return Ok(Box::new(stream));
            }
            Err(e) => {
                first_error.get_or_insert(format!("dial tcp {address}: connect: {}", os_error(&e)));
            }
        }
    }
    Err(first_error.unwrap_or_else(|| format!("dial tcp: lookup {host}: no such host")))
}

/// TLS as `mode` says: none for `disable` and `allow`; otherwise an `SSLRequest`, and the
/// handshake when the server agrees.
async fn negotiate(mut stream: Boxed, info: &ConnInfo, mode: SslMode) -> Result<Boxed, String> {
    if matches!(mode, SslMode::Disable | SslMode::Allow) {
        return Ok(stream);
    }
    let (config, check) = tls::client_config(info, mode)?;
    let eof = |e: std::io::Error| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => "EOF".to_string(),
        _ => format!("write {}: {}", address(info), os_error(&e)),
    };
    stream.write_all(&SSL_REQUEST).await.map_err(eof)?;
    let answer = stream.read_u8().await.map_err(eof)?;
    if answer != b'S' {
        return Err("pq: SSL is not enabled on the server".into());
    }
    let name = rustls::pki_types::ServerName::try_from(info.host.clone())
        .map_err(|e| format!("tls: {e}"))?;
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let tls = connector
        .connect(name, stream)
        .await
        .map_err(|e| tls::describe(&e, check, &info.host))?;
    Ok(Box::new(tls))
}

/// The startup message and authentication, then the connection handed to the runtime.
async fn startup(stream: Boxed, info: &ConnInfo) -> Result<Client, String> {
    let mut config = tokio_postgres::Config::new();
    config
        .user(&info.user)
        .password(info.password.as_bytes())
        .ssl_mode(tokio_postgres::config::SslMode::Disable);
    if let Some(dbname) = &info.dbname {
        config.dbname(dbname);
    }
    let options = startup_options(info);
    if !options.is_empty() {
        config.options(&options);
    }
    if let Some(name) = &info.application_name {
        config.application_name(name);
    }
    let (client, connection) = config
        .connect_raw(stream, NoTls)
        .await
        .map_err(|e| pq_error(&e))?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

/// `options`, and each run-time parameter as `-c key=value` (spaces and backslashes escaped).
fn startup_options(info: &ConnInfo) -> String {
    let mut words: Vec<String> = Vec::new();
    if !info.options.is_empty() {
        words.push(info.options.clone());
    }
    for (key, value) in &info.runtime {
        let escape = |s: &str| s.replace('\\', "\\\\").replace(' ', "\\ ");
        words.push(format!("-c {}={}", escape(key), escape(value)));
    }
    words.join(" ")
}

/// An error as lib/pq words it: a server's `pq: <message> (<code>)`.
pub fn pq_error(error: &tokio_postgres::Error) -> String {
    pq_error_in(error, "")
}

/// An error of `query` as lib/pq words it: a server's error with where in the query it is
/// (` at column 7`, or ` at position 2:5` in a query of several lines).
pub fn pq_error_in(error: &tokio_postgres::Error, query: &str) -> String {
    let Some(db) = error.as_db_error() else {
        return match std::error::Error::source(error) {
            Some(source) => source.to_string(),
            None => error.to_string(),
        };
    };
    let mut message = db.message().to_string();
    if let (false, Some(tokio_postgres::error::ErrorPosition::Original(position))) =
        (query.is_empty(), db.position())
    {
        let lines: Vec<&str> = query.split('\n').collect();
        let (line, column) = line_and_column(*position as usize, &lines);
        match lines.len() {
            1 => message.push_str(&format!(" at column {column}")),
            _ => message.push_str(&format!(" at position {line}:{column}")),
        }
    }
    format!("pq: {message} ({})", db.code().code())
}

/// lib/pq's `posToLine`: the line and column of a 1-based character position.
fn line_and_column(position: usize, lines: &[&str]) -> (usize, usize) {
    let mut read = 0;
    for (i, text) in lines.iter().enumerate() {
        let length = text.chars().count() + 1;
        if read + length >= position {
            return (i + 1, position.saturating_sub(read).max(1));
        }
        read += length;
    }
    (lines.len(), 0)
}
