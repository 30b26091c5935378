//! `rediss://`: a TLS-only redis-server with a certificate from a CA the test makes with
//! the `openssl` command. Trusted through SSL_CERT_FILE the lock works; untrusted it is a
//! 125 with a TLS/certificate error.

use crate::support::*;

fn tls_server(certs_dir: &TempDir) -> (RedisServer, TlsFiles) {
    let files = make_certs(certs_dir.path());
    let server = RedisServer::start_with(ServerOptions {
        tls: Some(files.clone()),
        ..ServerOptions::default()
    });
    (server, files)
}

#[test]
fn tls_with_a_trusted_ca_works() {
    let certs = TempDir::new("certs");
    let (server, files) = tls_server(&certs);
    let dir = TempDir::new("tlsrun");
    for host in ["localhost", "127.0.0.1"] {
        let url = format!("rediss://{host}:{}", server.port());
        let marker = dir.join(&format!("ran-{host}"));
        let out = Wrapper::bare()
            .env("SSL_CERT_FILE", &files.ca)
            .args(["-r", &url, "-k", "tls", "--", "sh", "-c"])
            .arg("touch \"$1\"; printf %s \"$REDLOCK_KEY\"")
            .arg("sh")
            .arg(&marker)
            .run();
        out.assert_code(0);
        assert_eq!(out.stdout_str(), "redlock:tls");
        assert!(marker.exists(), "{host}: the command did not run");
    }
    assert_eq!(server.dbsize(), 0, "keys: {:?}", server.keys());
}

#[test]
fn tls_with_an_untrusted_certificate_exits_125() {
    let certs = TempDir::new("certs");
    let (server, _files) = tls_server(&certs);
    let dir = TempDir::new("tlsbad");
    // A CA file that does not contain our CA: the server's chain cannot be verified.
    let other = TempDir::new("othercerts");
    let other_files = make_certs(other.path());
    for trust in [None, Some(other_files.ca.clone())] {
        let mut cmd = Wrapper::bare();
        if let Some(ca) = &trust {
            cmd = cmd.env("SSL_CERT_FILE", ca);
        }
        let out = cmd
            .args(["-r", &format!("rediss://localhost:{}", server.port())])
            .args(["-k", "tls", "--", "touch"])
            .arg(dir.join("ran"))
            .run();
        out.assert_code(125).assert_stderr_prefixed();
        let lower = out.stderr.to_lowercase();
        assert!(
            lower.contains("tls") || lower.contains("certificate") || lower.contains("cert"),
            "trust {trust:?}: stderr does not mention TLS or the certificate: {}",
            out.stderr
        );
        assert!(!dir.exists("ran"), "the command ran");
    }
    assert_eq!(server.dbsize(), 0);
}

/// Plain `redis://` against a TLS-only port fails cleanly with 125 (no hang).
#[test]
fn plaintext_against_tls_port_exits_125() {
    let certs = TempDir::new("certs");
    let (server, _files) = tls_server(&certs);
    let out = Wrapper::bare()
        .args(["-r", &format!("redis://127.0.0.1:{}", server.port())])
        .args(["--redis-timeout", "2s", "-k", "x", "--", "true"])
        .run();
    out.assert_code(125);
    assert!(
        out.elapsed < std::time::Duration::from_secs(15),
        "took {:?}",
        out.elapsed
    );
}

/// `rediss://` against a plain server (which reads the TLS handshake as the start of a
/// command and waits): the error hints at TLS and says how long it waited, rather than only
/// "no answer in time".
#[test]
fn tls_against_a_plaintext_server_hints_at_tls() {
    let server = RedisServer::start();
    let url = server.url().replacen("redis://", "rediss://", 1);
    Wrapper::new(&url)
        .args(["-k", "tp", "--redis-timeout", "1s", "--", "true"])
        .run()
        .assert_code(125)
        .assert_stderr_contains("within 1s")
        .assert_stderr_contains("use a redis:// URL, not rediss://");
}
