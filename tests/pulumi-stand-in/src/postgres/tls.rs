//! TLS as lib/pq v1.12.3 sets it up for each `sslmode` (`ssl.go`), with rustls in place of Go's
//! crypto/tls:
//!
//! - `require`, `prefer` and the unset mode: TLS without any check of the server's certificate,
//!   unless `sslrootcert` names a file that exists, which makes it `verify-ca` (for `require` and
//!   `prefer`, `~/.postgresql/root.crt` is that file when `sslrootcert` is unset);
//! - `verify-ca`: the certificate must chain to a root; its names are not checked;
//! - `verify-full`: the chain, and the host name (or IP address) against the certificate's names.
//!
//! The roots are the certificates of `sslrootcert` alone when it is set, otherwise the system's
//! (`SSL_CERT_FILE` and `SSL_CERT_DIR` replace the system's files, as they do for Go). The
//! server name is sent (SNI) unless `sslsni` is off or the host is an IP address. Client
//! certificates are not implemented. A failed check reads as Go's (`x509: certificate signed by
//! unknown authority`; `tls: failed to verify certificate: x509: …` for `verify-full`).

use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};

use super::conninfo::{ConnInfo, SslMode};

/// How the server's certificate is checked.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Check {
    Nothing,
    Chain,
    ChainAndName,
}

/// The client configuration for `mode` (one that uses TLS), and how it checks the server.
pub fn client_config(
    info: &ConnInfo,
    mode: SslMode,
) -> Result<(rustls::ClientConfig, Check), String> {
    let rootcert = root_certificate(info, mode);
    let check = match mode {
        SslMode::VerifyFull => Check::ChainAndName,
        SslMode::VerifyCa => Check::Chain,
        _ if rootcert.is_some() => Check::Chain,
        _ => Check::Nothing,
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("tls: {e}"))?;
    let verifier: Arc<dyn ServerCertVerifier> = match check {
        Check::Nothing => Arc::new(Unchecked(provider)),
        check => {
            let roots = Arc::new(roots(rootcert.as_deref())?);
            let inner = WebPkiServerVerifier::builder_with_provider(roots, provider)
                .build()
                .map_err(|e| format!("tls: {e}"))?;
            Arc::new(Checked { inner, check })
        }
    };
    let mut config = builder
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    config.enable_sni = info.sslsni;
    Ok((config, check))
}

/// The `sslrootcert` that counts: set and there (or `system`), else `~/.postgresql/root.crt`
/// when the mode was given and uses TLS.
fn root_certificate(info: &ConnInfo, mode: SslMode) -> Option<String> {
    let given = info.sslrootcert.clone().or_else(|| {
        if mode == SslMode::Default {
            return None;
        }
        let home = std::env::var("HOME").ok().filter(|h| !h.is_empty())?;
        let file = format!("{home}/.postgresql/root.crt");
        std::path::Path::new(&file).exists().then_some(file)
    })?;
    let verifying = matches!(mode, SslMode::VerifyCa | SslMode::VerifyFull);
    if verifying || given == "system" || std::path::Path::new(&given).exists() {
        Some(given)
    } else {
        None
    }
}

fn roots(rootcert: Option<&str>) -> Result<RootCertStore, String> {
    let mut store = RootCertStore::empty();
    match rootcert {
        Some(file) if file != "system" => {
            let certs = CertificateDer::pem_file_iter(file)
                .map_err(|e| format!("open {file}: {e}"))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("{file}: {e}"))?;
            let (added, _) = store.add_parsable_certificates(certs);
            if added == 0 {
                return Err(format!("pq: couldn't parse pem in sslrootcert: {file}"));
            }
        }
        _ => {
            let found = rustls_native_certs::load_native_certs();
            store.add_parsable_certificates(found.certs);
        }
    }
    Ok(store)
}

/// A handshake's failure as Go's crypto/tls (and lib/pq's own check, for `verify-ca`) words it.
pub fn describe(error: &std::io::Error, check: Check, host: &str) -> String {
    let Some(rustls::Error::InvalidCertificate(cert)) = error
        .get_ref()
        .and_then(|e| e.downcast_ref::<rustls::Error>())
    else {
        return match error
            .get_ref()
            .and_then(|e| e.downcast_ref::<rustls::Error>())
        {
            Some(e) => format!("tls: {e}"),
            None if error.kind() == std::io::ErrorKind::UnexpectedEof => "EOF".into(),
            None => error.to_string(),
        };
    };
    let x509 = match cert {
        CertificateError::UnknownIssuer => "x509: certificate signed by unknown authority".into(),
        CertificateError::NotValidForNameContext { presented, .. } => {
            name_mismatch(presented, host)
        }
        CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
            "x509: certificate has expired or is not yet valid".into()
        }
        CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
            "x509: certificate has expired or is not yet valid".into()
        }
        other => format!("x509: {other:?}"),
    };
    match check {
        Check::ChainAndName => format!("tls: failed to verify certificate: {x509}"),
        _ => x509,
    }
}

/// Go's `HostnameError`: the names the certificate is valid for, of the kind the host is.
fn name_mismatch(presented: &[String], host: &str) -> String {
    let unwrap = |name: &String, kind: &str| {
        name.strip_prefix(kind)
            .and_then(|n| n.strip_suffix(')'))
            .map(|n| n.trim_matches('"').to_string())
    };
    let is_ip = host.parse::<std::net::IpAddr>().is_ok();
    let kind = if is_ip { "IpAddress(" } else { "DnsName(" };
    let valid: Vec<String> = presented.iter().filter_map(|n| unwrap(n, kind)).collect();
    if is_ip && valid.is_empty() {
        return format!(
            "x509: cannot validate certificate for {host} because it doesn't contain any IP SANs"
        );
    }
    if valid.is_empty() {
        return format!("x509: certificate is not valid for any names, but wanted to match {host}");
    }
    format!(
        "x509: certificate is valid for {}, not {host}",
        valid.join(", ")
    )
}

/// `require` without a root: Go's `InsecureSkipVerify` (the handshake's signatures still count).
#[derive(Debug)]
struct Unchecked(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.0.signature_verification_algorithms;
        rustls::crypto::verify_tls12_signature(message, cert, dss, algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.0.signature_verification_algorithms;
        rustls::crypto::verify_tls13_signature(message, cert, dss, algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `verify-ca` (a name that does not match is let through) and `verify-full`.
#[derive(Debug)]
struct Checked {
    inner: Arc<WebPkiServerVerifier>,
    check: Check,
}

impl ServerCertVerifier for Checked {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .inner
            .verify_server_cert(end_entity, intermediates, name, ocsp, now)
        {
            // The chain is checked before the names: a name error means the chain was good.
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if self.check == Check::Chain => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}
