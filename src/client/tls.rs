//! TLS for every HTTP client the agent builds (the model's, an MCP
//! server's): rustls with the ring provider, certificates checked against
//! the system's trust store by `rustls-platform-verifier`, and that store
//! read at the first `https` handshake instead of when a client is built.
//!
//! Why lazily: reading and parsing the store (`/etc/ssl/certs`, a few
//! hundred PEM certificates) was about a quarter of all instructions of a
//! one-shot task against a local `http://` model, which never needs it.
//! Against an `https` endpoint the same work happens once, in the first
//! request. A store that cannot be read fails that handshake with the
//! reason, as it failed building the client before.

use std::sync::{Arc, OnceLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

/// A reqwest client builder with this module's TLS. Errors (no usable
/// protocol version in the provider) come back as text for the caller's
/// message.
pub fn builder() -> Result<reqwest::ClientBuilder, String> {
    install_crypto_provider();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("cannot set up TLS: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(SystemRoots::new(provider)))
        .with_no_client_auth();
    // What reqwest offers on its own with HTTP/2 enabled.
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(reqwest::Client::builder().tls_backend_preconfigured(config))
}

/// Makes rustls's ring provider the process default, once: reqwest is
/// built without a provider of its own (`rustls-no-provider`), so it does
/// not bring aws-lc-rs, and whatever builds a client without [`builder`]
/// (rmcp's defaults) finds this one.
pub fn install_crypto_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // Err only when a provider is already installed, which is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// The platform verifier, made at the first certificate it checks.
/// Handshake signatures need no roots and are checked by the provider's
/// algorithms directly, as the platform verifier does.
#[derive(Debug)]
pub struct SystemRoots {
    provider: Arc<CryptoProvider>,
    verifier: OnceLock<Result<rustls_platform_verifier::Verifier, rustls::Error>>,
}

impl SystemRoots {
    pub fn new(provider: Arc<CryptoProvider>) -> SystemRoots {
        SystemRoots {
            provider,
            verifier: OnceLock::new(),
        }
    }

    /// Whether the trust store has been read.
    pub fn loaded(&self) -> bool {
        self.verifier.get().is_some()
    }

    fn verifier(&self) -> Result<&rustls_platform_verifier::Verifier, rustls::Error> {
        self.verifier
            .get_or_init(|| rustls_platform_verifier::Verifier::new(self.provider.clone()))
            .as_ref()
            .map_err(Clone::clone)
    }
}

impl ServerCertVerifier for SystemRoots {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.verifier()?.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        )
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roots() -> SystemRoots {
        SystemRoots::new(Arc::new(rustls::crypto::ring::default_provider()))
    }

    #[test]
    fn building_a_client_reads_no_trust_store() {
        let roots = roots();
        assert!(!roots.supported_verify_schemes().is_empty());
        assert!(!roots.loaded(), "the schemes need no roots");
        assert!(
            builder()
                .and_then(|b| b.build().map_err(|e| e.to_string()))
                .is_ok()
        );
    }

    #[test]
    fn a_certificate_is_checked_against_the_store() {
        // Not a certificate: refused, after the store was read (or with
        // the reason it could not be).
        let roots = roots();
        let name = ServerName::try_from("example.com").unwrap();
        let verdict = roots.verify_server_cert(
            &CertificateDer::from(vec![0x30, 0x03, 0x02, 0x01, 0x00]),
            &[],
            &name,
            &[],
            UnixTime::now(),
        );
        assert!(verdict.is_err());
        assert!(roots.loaded());
    }
}
