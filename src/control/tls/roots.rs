//! The trust store: webpki-roots, the PEM file `SSL_CERT_FILE` names, the PEM files of
//! each `SSL_CERT_DIR` directory, then `--ca-certificate`. Loaded once per run, when the
//! first certificate must be verified (never under `-k`); a file reached by two names
//! (the usual `/etc/ssl/certs` holds the bundle `SSL_CERT_FILE` names and a hashed
//! symlink beside each certificate) is read once, by device and inode; a certificate
//! seen already is not parsed again.

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use rustls::RootCertStore;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

/// What one source gave: files read, files skipped as read already under another
/// name, certificates in them, and how many were added as trust anchors (webpki took
/// them and no file or `--ca-certificate` gave them before; the bundled roots are not
/// compared).
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    pub(crate) files: usize,
    pub(crate) same_file: usize,
    pub(crate) certificates: usize,
    pub(crate) anchors: usize,
}

/// The store being filled: the roots, and what was read already.
struct Store {
    roots: RootCertStore,
    /// (st_dev, st_ino) of every file read (stat(2) follows symlinks).
    files: HashSet<(u64, u64)>,
    /// SHA-256 of every certificate's DER added from a file.
    seen: HashSet<[u8; 32]>,
}

impl Store {
    /// Adds the certificates of the PEM file `path` unless that file was read already.
    ///
    /// # Errors
    /// The file cannot be opened or read (a directory is not an error: it is skipped).
    fn add_file(&mut self, path: &Path, c: &mut Counts) -> std::io::Result<()> {
        let meta = std::fs::metadata(path)?;
        if !meta.is_file() {
            return Ok(());
        }
        if !self.files.insert((meta.dev(), meta.ino())) {
            c.same_file += 1;
            return Ok(());
        }
        let file = std::fs::File::open(path)?;
        c.files += 1;
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_reader_iter(file).flatten().collect();
        self.add(certs, c);
        Ok(())
    }

    /// Adds `certs` not seen before as anchors (webpki refuses some: a v1 certificate).
    fn add(&mut self, certs: Vec<CertificateDer<'static>>, c: &mut Counts) {
        c.certificates += certs.len();
        let new: Vec<_> = certs
            .into_iter()
            .filter(|d| {
                let h = ring::digest::digest(&ring::digest::SHA256, d.as_ref());
                self.seen.insert(h.as_ref().try_into().expect("SHA-256 is 32 bytes"))
            })
            .collect();
        c.anchors += self.roots.add_parsable_certificates(new).0;
    }
}

/// Loads the trust store (see the module doc): the bundled roots, `cert_file`
/// (`SSL_CERT_FILE`), `cert_dirs` (`SSL_CERT_DIR`, split), then `own` (the certificates of
/// `--ca-certificate`). A path that cannot be read is reported once on stderr and skipped;
/// with `verbose`, one line per source says what it gave ([`Counts`]).
pub(crate) fn load(
    cert_file: Option<&Path>,
    cert_dirs: &[std::path::PathBuf],
    own: Option<(&Path, &[CertificateDer<'static>])>,
    verbose: u8,
) -> RootCertStore {
    let mut s = Store {
        roots: RootCertStore::empty(),
        files: HashSet::new(),
        seen: HashSet::new(),
    };
    s.roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    // Compiled in: a host without any CA file (an initramfs, a scratch container) still
    // verifies public servers; no system path is read unless SSL_CERT_FILE/DIR name one.
    if verbose > 0 {
        eprintln!(
            "ringdl: {} trust anchors bundled (webpki-roots, Mozilla)",
            s.roots.len()
        );
    }
    let say = |what: String, c: &Counts| {
        if verbose > 0 {
            let skipped = if c.same_file > 0 {
                format!(", {} skipped (a file read already, under another name)", c.same_file)
            } else {
                String::new()
            };
            eprintln!(
                "ringdl: {what}: {} read{skipped}, {}, {} added",
                plural(c.files, "file"),
                plural(c.certificates, "certificate"),
                plural(c.anchors, "trust anchor")
            );
        }
    };
    if let Some(p) = cert_file {
        let mut c = Counts::default();
        match s.add_file(p, &mut c) {
            Ok(()) => say(format!("SSL_CERT_FILE={}", p.display()), &c),
            Err(e) => eprintln!(
                "ringdl: warning: SSL_CERT_FILE={}: {e}; going on with the other trust anchors",
                p.display()
            ),
        }
    }
    for dir in cert_dirs {
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) => {
                eprintln!(
                    "ringdl: warning: SSL_CERT_DIR {}: {e}; going on with the other trust anchors",
                    dir.display()
                );
                continue;
            }
        };
        let mut c = Counts::default();
        let mut paths: Vec<_> = entries.flatten().map(|e| e.path()).collect();
        // Real files before symlinks to them would not change what is read; sorted for
        // a stable order of the counts.
        paths.sort();
        for p in paths {
            // (A dangling symlink or an unreadable file in the directory is skipped.)
            let _ = s.add_file(&p, &mut c);
        }
        say(format!("SSL_CERT_DIR {}", dir.display()), &c);
    }
    if let Some((f, certs)) = own {
        let mut c = Counts::default();
        s.add(certs.to_vec(), &mut c);
        if verbose > 0 {
            eprintln!(
                "ringdl: --ca-certificate {}: {}, {} added",
                f.display(),
                plural(c.certificates, "certificate"),
                plural(c.anchors, "trust anchor")
            );
        }
    }
    if verbose > 0 {
        eprintln!("ringdl: {} trust anchors in all", s.roots.len());
    }
    s.roots
}

/// `1 file`, `2 files`.
fn plural(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}
