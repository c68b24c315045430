//! The app's side of `--signature` / `--trusted-key`: reads the keys and the signature
//! (a URL is fetched first, in the same run, by the caller's download), decides what the
//! download owes the check (a digest in the read-back, or the bytes under a bound), and
//! turns the verdict of [`crate::signature`] into a message, an exit code (10) and the
//! `--json` object. The verification itself is pure ([`crate::signature::verify`]).

use std::path::Path;

use crate::config::Config;
use crate::err;
use crate::error::{Error, Kind, Result};
use crate::signature::{self as sig, Input, Signature, TrustedKey, Verified};

/// A signature to check, and the keys it may come from.
pub(crate) struct Plan {
    /// The parsed signature.
    pub sig: Signature,
    /// Every `--trusted-key`'s keys.
    pub keys: Vec<TrustedKey>,
    /// Where it came from (`--signature` as given).
    pub source: String,
}

/// Reads a file of at most [`sig::MAX_FILE`] bytes.
fn read_small(path: &Path, what: &str, kind: Kind) -> Result<Vec<u8>> {
    let meta = std::fs::metadata(path).map_err(|e| Error::new(kind, format!("{what} {}: {e}", path.display())))?;
    if meta.len() > sig::MAX_FILE {
        return Err(Error::new(
            kind,
            format!(
                "{what} {}: {} bytes, more than a signature or key file holds (64 KiB)",
                path.display(),
                meta.len()
            ),
        ));
    }
    std::fs::read(path).map_err(|e| Error::new(kind, format!("{what} {}: {e}", path.display())))
}

/// Whether `--signature`'s value is a URL (http:// or https://) rather than a file.
pub(crate) fn is_url(s: &str) -> bool {
    let l = s.to_ascii_lowercase();
    l.starts_with("http://") || l.starts_with("https://")
}

/// Reads every `--trusted-key` and the `--signature` (`fetch` downloads a URL into memory),
/// and parses them; `None` without `--signature`.
///
/// # Errors
/// `LocalIo` for a key file that cannot be read, `Usage` for one that holds no key;
/// [`Kind::Signature`] for a signature that cannot be read or fetched (HTTP 4xx/5xx), or is
/// not one (truncated, unknown format); what `fetch` fails with otherwise.
pub(crate) fn load(opts: &Config, fetch: impl FnOnce(&str) -> Result<Vec<u8>>) -> Result<Option<Plan>> {
    let Some(source) = &opts.signature else {
        return Ok(None);
    };
    let mut keys = Vec::new();
    for k in &opts.trusted_keys {
        let bytes = read_small(k, "--trusted-key", Kind::LocalIo)?;
        let parsed = sig::parse_keys(&bytes).map_err(|e| err!(Usage, "--trusted-key {}: {e}", k.display()))?;
        keys.extend(parsed);
    }
    let bytes = if is_url(source) {
        fetch(source).map_err(|mut e| {
            if e.kind == Kind::HttpStatus {
                e.kind = Kind::Signature;
            }
            e.msg = format!("--signature {source}: {}", e.msg);
            e
        })?
    } else {
        read_small(Path::new(source), "--signature", Kind::Signature)?
    };
    let parsed = sig::parse(&bytes).map_err(|e| err!(Signature, "--signature {source}: {e}"))?;
    Ok(Some(Plan {
        sig: parsed,
        keys,
        source: source.clone(),
    }))
}

impl Plan {
    /// What the download must compute over the file (`None`: the signature is over the
    /// checksum file instead), and, for a raw-message signature, the size bound it sets
    /// in `opts` ([`Config::size_bound`]).
    pub(crate) fn over_file(&self, opts: &mut Config) -> Option<Input> {
        if opts.checksum_file.is_some() {
            return None;
        }
        let input = self.sig.input();
        if input == Input::Message {
            opts.size_bound = Some((sig::MAX_MESSAGE, self.bound_reason()));
        }
        Some(input)
    }

    fn bound_reason(&self) -> String {
        format!(
            "a {} signature covers the whole file, which is verified in memory up to {} MiB \
             (--signature {}): sign a SHA256SUMS and give it with --checksum-file, or use SSHSIG or \
             minisign's default (prehashed) form",
            match &self.sig {
                Signature::Minisign(_) => "legacy minisign (-l)",
                _ => "signify",
            },
            sig::MAX_MESSAGE >> 20,
            self.source
        )
    }

    /// Checks the signature over `bytes` (the checksum file `name`, in memory), or over
    /// the downloaded file (`input`: what the read-back computed; `None` = too large).
    /// Returns the `--json` object and says with `-v` which key verified what.
    ///
    /// # Errors
    /// [`Kind::Signature`] naming the key and the file; `Usage` for a raw-message signature
    /// over more than [`sig::MAX_MESSAGE`] bytes.
    pub(crate) fn check(
        &self,
        input: Option<&[u8]>,
        name: &str,
        opts: &Config,
        json: &mut Option<String>,
    ) -> Result<()> {
        let Some(input) = input else {
            return Err(err!(Usage, "{name}: {}", self.bound_reason()));
        };
        let got = sig::verify(&self.sig, &self.keys, &opts.signature_namespace, input);
        *json = Some(self.to_json(&got));
        match got {
            Ok(v) => {
                if opts.verbose > 0 {
                    eprintln!(
                        "ringdl: {} signature {} verified over {name}: key {}{}",
                        v.format.name(),
                        self.source,
                        v.key,
                        v.principals.as_deref().map_or(String::new(), |p| format!(" ({p})"))
                    );
                }
                Ok(())
            }
            Err(why) => Err(err!(
                Signature,
                "{} signature {} over {name}: {why}",
                self.sig.format().name(),
                self.source
            )),
        }
    }

    /// Refuses, before a byte of the file is fetched, a signature no `--trusted-key` may
    /// have made ([`sig::signer_known`]: an unknown key, another SSHSIG namespace or one
    /// not allowed the signer, a minisign trusted comment that does not verify); fills
    /// `json` when it does.
    ///
    /// # Errors
    /// [`Kind::Signature`] naming the key.
    pub(crate) fn signer_known(&self, opts: &Config, json: &mut Option<String>) -> Result<()> {
        let Err(why) = sig::signer_known(&self.sig, &self.keys, &opts.signature_namespace) else {
            return Ok(());
        };
        let e = err!(
            Signature,
            "{} signature {}: {why}; nothing fetched",
            self.sig.format().name(),
            self.source
        );
        *json = Some(self.to_json(&Err(why)));
        Err(e)
    }

    /// `{"format":…,"source":…,"key":…,"principals":…,"verified":…,"error":…}`.
    fn to_json(&self, got: &std::result::Result<Verified, sig::Refused>) -> String {
        let s = |v: Option<&str>| {
            let mut out = String::new();
            match v {
                Some(v) => crate::report::push_json_string(&mut out, v),
                None => out.push_str("null"),
            }
            out
        };
        let (key, principals, error) = match got {
            Ok(v) => (Some(v.key.clone()), v.principals.clone(), None),
            Err(
                e @ (sig::Refused::UnknownKey(k)
                | sig::Refused::Bad(k)
                | sig::Refused::TrustedComment(k)
                | sig::Refused::NotAllowed { key: k, .. }
                | sig::Refused::Namespace { key: k, .. }),
            ) => (
                Some(k.clone()),
                sig::principals(&self.sig, &self.keys),
                Some(e.to_string()),
            ),
        };
        format!(
            r#"{{"format":{},"source":{},"key":{},"principals":{},"verified":{},"error":{}}}"#,
            s(Some(self.sig.format().name())),
            s(Some(&self.source)),
            s(key.as_deref()),
            s(principals.as_deref()),
            got.is_ok(),
            s(error.as_deref())
        )
    }
}

/// Fetches a small file (a `--signature` or key URL, a `.zsync` control file) through the
/// same download (proxy, TLS, redirects, retries) (`run`: the app's download) into a
/// private temporary directory, and returns its bytes (at most `bound.0`, refused with
/// `bound.1` said).
///
/// # Errors
/// What the download fails with; `LocalIo` when the temporary file cannot be made or read.
pub(crate) fn fetch_small(
    url: &str,
    opts: &Config,
    bound: (u64, String),
    run: impl FnOnce(Box<Config>) -> Result<()>,
) -> Result<Vec<u8>> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let dir = std::env::temp_dir().join(format!("ringdl-fetch-{}-{nanos}", std::process::id()));
    std::fs::create_dir(&dir).map_err(|e| err!(LocalIo, "{}: {e}", dir.display()))?;
    let file = dir.join("file");
    let mut sub = Box::new(opts.clone());
    let same_origin = match (http::Url::parse(url), http::Url::parse(&opts.url)) {
        (Ok(a), Ok(b)) => crate::control::headers::same_origin(&a, &b),
        _ => false,
    };
    if !same_origin {
        // Credentials and secret fields belong to the download's origin only.
        sub.credentials = None;
        sub.headers
            .retain(|(n, _)| !n.eq_ignore_ascii_case("authorization") && !n.eq_ignore_ascii_case("cookie"));
    }
    sub.url = url.to_owned();
    sub.mirrors.clear();
    sub.output = crate::config::OutputTarget::File(file.clone());
    sub.connections = 1;
    (sub.resume, sub.force, sub.quiet, sub.content_disposition) = (false, false, true, false);
    (sub.checksum, sub.checksum_file, sub.signature, sub.json) = (None, None, None, None);
    // The signature is fetched whole every time: the conditions and the device options
    // are the file's (a signature fetch saved its own ETag into the file's --etag-save).
    (sub.etag_compare, sub.etag_save, sub.timestamping, sub.condition) = (None, None, false, None);
    (sub.kept, sub.replace) = (None, false);
    (sub.offset, sub.control) = (0, None);
    sub.trusted_keys.clear();
    sub.seeds.clear();
    sub.size_bound = Some(bound);
    let got = run(sub).and_then(|()| std::fs::read(&file).map_err(|e| err!(LocalIo, "{}: {e}", file.display())));
    let _ = std::fs::remove_dir_all(&dir);
    got
}

/// A PGP clear-signed checksum file (`SHA256SUMS.asc`): its signature is NOT checked
/// (OpenPGP is not taken): said on stderr, and as the `--json` signature object, unless a
/// `--signature` is checked instead.
pub(crate) fn pgp_unchecked(text: &[u8], name: &str, json: &mut Option<String>) {
    let marker = b"-----BEGIN PGP SIGNED MESSAGE-----";
    if !text.windows(marker.len()).any(|w| w == marker) {
        return;
    }
    eprintln!(
        "ringdl: warning: {name} carries a PGP signature, which ringdl does NOT check (OpenPGP is not \
         supported): only its digest lines are used; check it with gpg --verify, or give --signature"
    );
    *json = Some(r#"{"format":"openpgp","source":null,"key":null,"principals":null,"verified":false,"error":"not checked: OpenPGP is not supported"}"#.to_owned());
}
