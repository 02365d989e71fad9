//! Mutual TLS between a cluster's tasks (`--tls-cert`, `--tls-key`, `--tls-ca`): every task
//! presents its certificate and accepts only peers whose certificate the cluster's CA signed.
//! A ps task does the handshakes itself (not in tonic) so that a peer refused there is logged
//! with its address, as a request without the token is.

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio_rustls::rustls::crypto::ring::default_provider;
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{RootCertStore, ServerConfig};
use tokio_rustls::TlsAcceptor;

/// The longest a TLS handshake may take: a peer that connects and says nothing is dropped.
const HANDSHAKE: Duration = Duration::from_secs(10);

/// This task's certificate and key, and the cluster's CA, checked to make a server and a
/// client configuration.
#[derive(Clone)]
pub struct Tls {
    cert: Vec<u8>,
    key: Vec<u8>,
    ca: Vec<u8>,
    server: Arc<ServerConfig>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tls(mutual)")
    }
}

fn read(path: &Path, what: &str, flag: &str) -> Result<Vec<u8>, String> {
    graphc_runtime::fsutil::read_regular(path, what).map_err(|e| format!("{flag}: {e}"))
}

impl Tls {
    /// Reads the PEM files of `--tls-cert` (this task's certificate chain), `--tls-key` (its
    /// private key) and `--tls-ca` (the CA that signs every task's certificate).
    pub fn load(cert: &Path, key: &Path, ca: &Path) -> Result<Tls, String> {
        Tls::from_pem(
            read(cert, "a PEM certificate", "--tls-cert")?,
            read(key, "a PEM private key", "--tls-key")?,
            read(ca, "a PEM certificate", "--tls-ca")?,
        )
    }

    pub fn from_pem(cert: Vec<u8>, key: Vec<u8>, ca: Vec<u8>) -> Result<Tls, String> {
        let certs = |pem: &[u8], flag: &str| -> Result<Vec<CertificateDer<'static>>, String> {
            let certs = CertificateDer::pem_slice_iter(pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("{flag}: not a PEM certificate: {e}"))?;
            if certs.is_empty() {
                return Err(format!("{flag}: expected a PEM certificate (-----BEGIN CERTIFICATE-----), found none"));
            }
            Ok(certs)
        };
        let chain = certs(&cert, "--tls-cert")?;
        let private = PrivateKeyDer::from_pem_slice(&key)
            .map_err(|e| format!("--tls-key: expected a PEM private key (PKCS#8, PKCS#1 or SEC1): {e}"))?;
        let mut roots = RootCertStore::empty();
        for c in certs(&ca, "--tls-ca")? {
            roots.add(c).map_err(|e| format!("--tls-ca: not a CA certificate: {e}"))?;
        }
        let provider = Arc::new(default_provider());
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
            .build()
            .map_err(|e| format!("--tls-ca: {e}"))?;
        let mut server = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS: {e}"))?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain, private)
            .map_err(|e| format!("--tls-cert and --tls-key do not make an identity: {e}"))?;
        server.alpn_protocols = vec![b"h2".to_vec()];
        Ok(Tls { cert, key, ca, server: Arc::new(server) })
    }

    /// A worker's configuration: this task's identity, and the CA its ps tasks must show.
    pub(crate) fn client(&self) -> tonic::transport::ClientTlsConfig {
        use tonic::transport::{Certificate, ClientTlsConfig, Identity};
        ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(&self.ca))
            .identity(Identity::from_pem(&self.cert, &self.key))
    }

    /// Handshakes the connections `listener` accepts, sending those that complete to `out`
    /// and logging the peers refused (`who` names this task).
    pub(crate) async fn accept(
        &self,
        listener: tokio::net::TcpListener,
        out: tokio::sync::mpsc::Sender<tokio_rustls::server::TlsStream<tokio::net::TcpStream>>,
        who: String,
    ) {
        let acceptor = TlsAcceptor::from(self.server.clone());
        loop {
            let (tcp, peer) = match listener.accept().await {
                Ok(accepted) => accepted,
                // Out of descriptors, say: the next accept may do, but not in a busy loop.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let _ = tcp.set_nodelay(true);
            let (acceptor, out, who) = (acceptor.clone(), out.clone(), who.clone());
            tokio::spawn(async move {
                match tokio::time::timeout(HANDSHAKE, acceptor.accept(tcp)).await {
                    Ok(Ok(tls)) => {
                        let _ = out.send(tls).await;
                    }
                    Ok(Err(e)) => refused(&who, peer, &e.to_string()),
                    Err(_) => refused(&who, peer, "no TLS handshake within 10 s"),
                }
            });
        }
    }
}

fn refused(who: &str, peer: SocketAddr, why: &str) {
    tracing::warn!("{who}: refused a connection from {peer}: {why}");
}
