//! An `https` endpoint through the built binary: a TLS server on loopback
//! whose certificate for `localhost` comes from a throwaway authority
//! (made by the `openssl` command). Trusted through `SSL_CERT_FILE` the
//! answer arrives; not trusted, the agent refuses the certificate at once
//! (no retries: asking again meets the same certificate) and says what to
//! set. The trust store is read at the first handshake (`client::tls`).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::common::{Dirs, agent_command, output, stderr, stdout};

/// The answer the server streams to every request.
const ANSWER: &str = "answered over TLS";

/// Runs `openssl` with these arguments in `dir`.
fn openssl(dir: &Path, args: &[&str]) {
    let status = std::process::Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stderr(std::process::Stdio::null())
        .status()
        .expect("the openssl command (install openssl; .ci/run does)");
    assert!(status.success(), "openssl {args:?}");
}

/// A CA and a leaf for localhost signed by it; returns the CA's PEM path.
fn certificates(dir: &Path) -> PathBuf {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=agent test authority",
        ],
    );
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "leaf.key",
            "-out",
            "leaf.csr",
            "-subj",
            "/CN=localhost",
        ],
    );
    std::fs::write(
        dir.join("leaf.ext"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "leaf.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "leaf.pem",
            "-days",
            "2",
            "-extfile",
            "leaf.ext",
        ],
    );
    dir.join("ca.pem")
}

/// Serves TLS on a loopback port (returned) from a thread: each request
/// gets [`ANSWER`] as a stream; a refused handshake just ends its connection.
fn serve(dir: &Path) -> u16 {
    let cert = CertificateDer::from_pem_file(dir.join("leaf.pem")).unwrap();
    let key = PrivateKeyDer::from_pem_file(dir.join("leaf.key")).unwrap();
    let config = Arc::new(
        rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)
        .unwrap(),
    );
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let config = config.clone();
            std::thread::spawn(move || {
                let tls = rustls::ServerConnection::new(config).unwrap();
                let _ = answer(rustls::StreamOwned::new(tls, stream));
            });
        }
    });
    port
}

fn answer(stream: impl Read + Write) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream);
    let mut length = 0;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
        if line == "\r\n" {
            break;
        }
    }
    reader.read_exact(&mut vec![0; length])?;
    let body = format!(
        "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"role\":\"assistant\",\"content\":\"{ANSWER}\"}}}}]}}\n\n\
         data: {{\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"stop\"}}]}}\n\ndata: [DONE]\n\n"
    );
    let stream = reader.get_mut();
    write!(
        stream,
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )?;
    stream.flush()
}

#[tokio::test]
async fn an_https_endpoint_is_trusted_through_the_store_and_a_refused_certificate_is_not_retried() {
    let dirs = Dirs::new();
    let pki = tempfile::tempdir().unwrap();
    let ca = certificates(pki.path());
    let port = serve(pki.path());
    let url = format!("https://localhost:{port}/v1");

    let mut trusted = agent_command(&dirs, &url);
    trusted.env("SSL_CERT_FILE", &ca).args(["-p", "hello"]);
    let out = output(trusted).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains(ANSWER), "{}", stdout(&out));

    // A store that trusts another authority only (hermetic, whatever the
    // machine trusts): refused on the first try, with what to set.
    openssl(
        pki.path(),
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "other.key",
            "-out",
            "other.pem",
            "-days",
            "2",
            "-subj",
            "/CN=another authority",
        ],
    );
    let mut refused = agent_command(&dirs, &url);
    refused
        .env("SSL_CERT_FILE", pki.path().join("other.pem"))
        .args(["-p", "hello"]);
    let out = output(refused).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(!stdout(&out).contains(ANSWER));
    assert!(
        !err.contains("retrying"),
        "a refused certificate is not retried: {err}"
    );
    assert!(err.contains("SSL_CERT_FILE"), "{err}");
}
