//! TLS certificates for the `rediss://` tests: a throwaway CA and a server certificate for
//! 127.0.0.1 / localhost signed by it, made with the `openssl` command in a test's directory.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::require;

/// Certificate files for a TLS server, made by [`make_certs`].
#[derive(Clone)]
pub struct TlsFiles {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

#[track_caller]
fn openssl(dir: &Path, args: &[&str]) {
    let openssl = require(
        "openssl",
        "the TLS tests make their certificates with it",
        "`apt-get install -y openssl` on Debian/Ubuntu",
    );
    let out = Command::new(openssl)
        .current_dir(dir)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("running openssl");
    assert!(
        out.status.success(),
        "openssl {args:?} failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A test CA and a server certificate for 127.0.0.1 / localhost signed by it.
pub fn make_certs(dir: &Path) -> TlsFiles {
    fs::write(
        dir.join("ca.cnf"),
        "[req]\ndistinguished_name = dn\nprompt = no\nx509_extensions = v3_ca\n\
         [dn]\nCN = redlock-run test CA\n\
         [v3_ca]\nbasicConstraints = critical,CA:TRUE\nkeyUsage = critical,keyCertSign,cRLSign\n\
         subjectKeyIdentifier = hash\n",
    )
    .unwrap();
    fs::write(
        dir.join("server.cnf"),
        "[req]\ndistinguished_name = dn\nprompt = no\n[dn]\nCN = localhost\n",
    )
    .unwrap();
    fs::write(
        dir.join("server.ext"),
        "subjectAltName = IP:127.0.0.1,DNS:localhost\nbasicConstraints = CA:FALSE\n\
         keyUsage = critical,digitalSignature,keyEncipherment\nextendedKeyUsage = serverAuth\n\
         authorityKeyIdentifier = keyid\nsubjectKeyIdentifier = hash\n",
    )
    .unwrap();
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];
    let mut ca_args = vec!["req", "-x509", "-nodes", "-days", "2", "-config", "ca.cnf"];
    ca_args.extend(ec);
    ca_args.extend(["-keyout", "ca.key", "-out", "ca.pem"]);
    openssl(dir, &ca_args);
    let mut csr_args = vec!["req", "-new", "-nodes", "-config", "server.cnf"];
    csr_args.extend(ec);
    csr_args.extend(["-keyout", "server.key", "-out", "server.csr"]);
    openssl(dir, &csr_args);
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "server.ext",
            "-out",
            "server.pem",
        ],
    );
    // redis-server reads the key file; make sure it can whatever openssl's umask did.
    fs::set_permissions(dir.join("server.key"), fs::Permissions::from_mode(0o600)).unwrap();
    TlsFiles {
        ca: dir.join("ca.pem"),
        cert: dir.join("server.pem"),
        key: dir.join("server.key"),
    }
}
