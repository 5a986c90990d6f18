//! Optional TLS for the API and the console (`[server] tls_cert_file` and `tls_key_file`), with
//! rustls and its ring provider. The files are read and checked when the configuration is
//! validated, before any port is bound, so a wrong path or a key that does not match the
//! certificate stops start-up with a clear message instead of failing the first handshake.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// The TLS settings of the server: TLS 1.2 and 1.3 with rustls' safe defaults, HTTP/1.1 by ALPN,
/// no client certificates.
pub fn server_config(
    cert_file: &Path,
    key_file: &Path,
) -> Result<Arc<rustls::ServerConfig>, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert_file)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("server.tls_cert_file {}: {e}", cert_file.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "server.tls_cert_file {}: no PEM certificate in it",
            cert_file.display()
        ));
    }
    let key = PrivateKeyDer::from_pem_file(key_file)
        .map_err(|e| format!("server.tls_key_file {}: {e}", key_file.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| {
            format!(
                "server.tls_cert_file / tls_key_file ({}, {}): {e}",
                cert_file.display(),
                key_file.display()
            )
        })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
